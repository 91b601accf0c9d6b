//! The progress bar: step, tokens/s, ETA (on stderr, only when asked).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress(Option<ProgressBar>);

impl Progress {
    pub fn new(show: bool, steps: Option<u64>) -> Self {
        if !show {
            return Progress(None);
        }
        let bar = match steps {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        let template = if steps.is_some() {
            "{bar:30} step {msg} [{elapsed_precise} < {eta_precise}]"
        } else {
            "{spinner} step {msg} [{elapsed_precise}]"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        Progress(Some(bar))
    }

    /// `shares` gives what is appended as it is (empty, or `", a 30.1 % b 69.9 %"`).
    pub fn step(&self, next_step: u64, tokens: u64, skipped: u64, shares: impl FnOnce() -> String, secs: f64) {
        if let Some(bar) = &self.0 {
            let shares = shares();
            bar.inc(1);
            let skipped = if skipped > 0 { format!(", {skipped} bad records skipped") } else { String::new() };
            bar.set_message(format!(
                "{next_step}, {:.1} M tokens, {:.0} tokens/s{shares}{skipped}",
                tokens as f64 / 1e6,
                tokens as f64 / secs.max(1e-9)
            ));
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
