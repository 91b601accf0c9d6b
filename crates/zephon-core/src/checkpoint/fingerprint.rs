//! A run's identity, typed: what a checkpoint must match to restore, part by part, so that a
//! mismatch can say what changed.
//!
//! Every part is built from explicit encodings (operator and source [`Settings`], dataset
//! shard listings), never from `Debug` output, and the whole is digested through the same
//! canonical settings encoding ([`RunFingerprint::digest`]), so a fingerprint is the same on
//! every build of one version of zephon.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use zephon_operator::{Digest, Settings, SettingsValue};

use crate::policy::{BadRecords, Tail};
use crate::step_schedule::{RowsPerStep, ShareSchedule};

/// One operator of the pipeline as fingerprinted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorPrint {
    /// The operator's name.
    pub name: String,
    /// Its kind (`map`, `accumulate`, `map+accumulate`).
    pub kind: String,
    /// The text form of its settings (for messages).
    pub settings: String,
    /// The digest of its settings' canonical encoding (what is compared).
    pub digest: Digest,
}

/// One dataset as fingerprinted: its name and the digest of its shard listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetPrint {
    /// The dataset's name.
    pub name: String,
    /// The digest of its name and shard listing.
    pub digest: Digest,
}

/// The identity of a run: everything that changes a byte of any step.
///
/// The step schedules (rows per step, token shares) are compared apart from the digest, by
/// the first step at which they differ: a checkpoint may
/// continue under a schedule that changes only after its step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunFingerprint {
    /// The checkpoint format.
    pub format: u32,
    /// The row encoding's version (what lane digests hash).
    pub row_encoding: u32,
    /// The settings encoding's version.
    pub settings_encoding: u32,
    /// The pipeline, in order.
    pub operators: Vec<OperatorPrint>,
    /// The digest of the work source's settings (only the digest: a mixture's settings list
    /// every dataset's row sizes, too large for every checkpoint file).
    pub work_source: Digest,
    /// The datasets, in order.
    pub datasets: Vec<DatasetPrint>,
    /// Lanes.
    pub lanes: u32,
    /// G(step), the rows of each global step. Not part of [`RunFingerprint::digest`]: a
    /// schedule may change after a checkpoint's step (see the schedule check of `checkpoint::load`).
    pub rows_per_step: RowsPerStep,
    /// w(step), the token shares of a steered mixture (see [`crate::Steering::shares`]). Not
    /// part of the digest either.
    pub shares: Option<ShareSchedule>,
    /// The run's seed.
    pub seed: u64,
    /// The bad-record policy.
    pub bad_records: BadRecords,
    /// The end-of-input policy.
    pub tail: Tail,
}

impl RunFingerprint {
    /// The fingerprint as canonical settings (`run/v<format>`), without the schedules.
    pub fn to_settings(&self) -> Settings {
        let operators: Vec<SettingsValue> = self
            .operators
            .iter()
            .map(|o| {
                Settings::new("operator", 1).set("name", &o.name).set("kind", &o.kind).set("settings", o.digest).into()
            })
            .collect();
        let datasets: Vec<SettingsValue> = self
            .datasets
            .iter()
            .map(|d| Settings::new("dataset", 1).set("name", &d.name).set("shards", d.digest).into())
            .collect();
        Settings::new("run", self.format)
            .set("row_encoding", self.row_encoding)
            .set("settings_encoding", self.settings_encoding)
            .set("operators", SettingsValue::List(operators))
            .set("work_source", self.work_source)
            .set("datasets", SettingsValue::List(datasets))
            .set("lanes", self.lanes)
            .set("seed", self.seed)
            .set("bad_records", self.bad_records.as_str())
            .set("tail", self.tail.as_str())
    }

    /// The digest of [`RunFingerprint::to_settings`]: what a lane part names its run by.
    pub fn digest(&self) -> Digest {
        self.to_settings().digest()
    }

    /// The parts, named for messages (`operator 2 (pack)`, `dataset web`, `seed`), with the
    /// text compared for each.
    pub fn parts(&self) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        p.insert("format".into(), self.format.to_string());
        p.insert("row encoding".into(), self.row_encoding.to_string());
        p.insert("settings encoding".into(), self.settings_encoding.to_string());
        for (i, o) in self.operators.iter().enumerate() {
            p.insert(format!("operator {i} ({})", o.name), format!("{} {}", o.kind, o.settings));
        }
        p.insert("work source".into(), self.work_source.to_hex());
        let names: Vec<&str> = self.datasets.iter().map(|d| d.name.as_str()).collect();
        p.insert("datasets".into(), names.join(", "));
        for d in &self.datasets {
            p.insert(format!("dataset {}", d.name), d.digest.to_hex());
        }
        p.insert("lanes".into(), self.lanes.to_string());
        p.insert("seed".into(), self.seed.to_string());
        p.insert("bad records".into(), self.bad_records.as_str().into());
        p.insert("tail".into(), self.tail.as_str().into());
        p
    }
}

impl RunFingerprint {
    /// Compares the schedules of a checkpoint taken before `next_step` (`saved`) with this
    /// run's: a difference at a step the checkpoint's run already delivered is an error (the
    /// steps before it would not be the same bytes); a difference at or after `next_step` is
    /// allowed, and returned as a notice to report.
    pub(crate) fn schedule_check(&self, saved: &RunFingerprint, next_step: u64) -> Result<Vec<String>, String> {
        let mut notices = Vec::new();
        let rows = saved.rows_per_step.first_difference(&self.rows_per_step).map(|step| {
            let change = format!(
                "rows per step: the checkpoint's schedule gives {} at step {step}, this run's {} \
                 (checkpoint: {}; now: {})",
                saved.rows_per_step.at(step),
                self.rows_per_step.at(step),
                saved.rows_per_step.describe(),
                self.rows_per_step.describe()
            );
            (step, change)
        });
        let shares = match (&saved.shares, &self.shares) {
            (Some(was), Some(now)) => was.first_difference(now).map(|step| {
                (
                    step,
                    format!(
                        "token shares: the checkpoint's are {:?} at step {step}, this run's {:?}",
                        was.at(step),
                        now.at(step)
                    ),
                )
            }),
            (None, None) => None,
            _ => Some((0, "token shares: one run steers its mixture by token shares and the other does not".into())),
        };
        for (step, change) in [rows, shares].into_iter().flatten() {
            if step < next_step {
                return Err(format!("{change}; the checkpoint's run delivered steps up to {}", next_step - 1));
            }
            notices.push(format!("the schedule changes after the checkpoint's step {next_step}: {change}"));
        }
        Ok(notices)
    }
}

/// What differs between a saved fingerprint and the run's, part by part: for a dataset, its
/// changed shards (from the shard listings); for an operator, its first changed setting.
pub(super) fn fingerprint_diff(
    saved: &RunFingerprint,
    now: &RunFingerprint,
    saved_meta: &super::RunMetadata,
    now_meta: &super::RunMetadata,
) -> Vec<String> {
    if saved.digest() == now.digest() {
        return Vec::new();
    }
    let (saved, now) = (saved.parts(), now.parts());
    let keys: BTreeSet<&String> = saved.keys().chain(now.keys()).collect();
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| saved.get(*k) != now.get(*k))
        .map(|k| {
            let listings =
                |name: &str| Some((saved_meta.shard_listings.get(name)?, now_meta.shard_listings.get(name)?));
            if let Some((was, is)) = k.strip_prefix("dataset ").and_then(listings) {
                return format!("{k} changed: {}", shard_diff(was, is));
            }
            match (saved.get(k), now.get(k)) {
                (Some(was), Some(is)) => {
                    let (was, is) = first_difference(was, is);
                    format!("{k} was {was} and is now {is}")
                }
                (was, is) => {
                    format!(
                        "{k} was {} and is now {}",
                        show(was.map_or("(absent)", |v| v)),
                        show(is.map_or("(absent)", |v| v))
                    )
                }
            }
        })
        .collect();
    if diffs.is_empty() {
        // Equal texts with different digests: a setting whose text form hides the difference.
        return vec!["an operator's or the work source's settings differ in a value their text does not show".into()];
    }
    diffs
}

fn show(v: &str) -> String {
    const MAX: usize = 100;
    if v.chars().count() <= MAX { v.to_string() } else { format!("{}…", v.chars().take(MAX).collect::<String>()) }
}

/// The first differing `name=value` entry of two settings texts, by name in the order of
/// `is` (the whole texts when their kinds differ or no entry does).
fn first_difference(was: &str, is: &str) -> (String, String) {
    let (a, b) = (top_level(was), top_level(is));
    // The words before the entries (an operator's kind, the settings' `kind/vN`) must agree.
    let heads = |e: &[&str]| e.iter().take_while(|w| !w.contains('=')).count();
    if heads(&a) == heads(&b) && a[..heads(&a)] == b[..heads(&b)] {
        let value =
            |entries: &[&str], name: &str| entries.iter().find(|e| entry_name(e) == Some(name)).map(|e| e.to_string());
        for e in &b {
            let Some(name) = entry_name(e) else { continue };
            let old = value(&a, name);
            if old.as_deref() != Some(*e) {
                return (show(&old.unwrap_or_else(|| format!("{name} unset"))), show(e));
            }
        }
        for e in &a {
            if let Some(name) = entry_name(e)
                && value(&b, name).is_none()
            {
                return (show(e), show(&format!("{name} unset")));
            }
        }
    }
    (show(was), show(is))
}

fn entry_name(entry: &str) -> Option<&str> {
    entry.split_once('=').map(|(n, _)| n)
}

/// Splits a settings text at the spaces outside quotes, brackets and parentheses.
fn top_level(text: &str) -> Vec<&str> {
    let (mut out, mut depth, mut quoted, mut escaped, mut start) = (Vec::new(), 0i32, false, false, 0);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '(' | '[' | '{' if !quoted => depth += 1,
            ')' | ']' | '}' if !quoted => depth -= 1,
            ' ' if !quoted && depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// Which shards differ between two shard listings (one line per shard).
fn shard_diff(was: &str, is: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (was.lines().collect(), is.lines().collect());
    let mut out = Vec::new();
    if a.len() != b.len() {
        out.push(format!("{} shards, now {}", a.len(), b.len()));
    }
    let changed: Vec<String> = a
        .iter()
        .zip(&b)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| format!("shard {i} was {x}, now {y}"))
        .collect();
    let n = changed.len();
    out.extend(changed.into_iter().take(3));
    if n > 3 {
        out.push(format!("and {} more changed shards", n - 3));
    }
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> RunFingerprint {
        RunFingerprint {
            format: 5,
            row_encoding: 2,
            settings_encoding: 1,
            operators: vec![OperatorPrint {
                name: "pack".into(),
                kind: "accumulate".into(),
                settings: "pack/v1 seq_len=8".into(),
                digest: Settings::new("pack", 1).set("seq_len", 8u32).digest(),
            }],
            work_source: Settings::new("sequential", 1).set("seed", 7u64).digest(),
            datasets: vec![DatasetPrint { name: "web".into(), digest: Digest::of(b"web\nshard-0 10 100 sha256:00") }],
            lanes: 4,
            rows_per_step: RowsPerStep::constant(8),
            shares: None,
            seed: 7,
            bad_records: BadRecords::Fail,
            tail: Tail::Drop,
        }
    }

    /// A run's identity must not move between builds. Both digests were computed apart from
    /// this code, by a few lines of Python that follow the rules in the row-encoding guide
    /// (struct.pack and hashlib); a change of either is a change of format.
    #[test]
    fn fixed_settings_give_a_fixed_run_digest() {
        assert_eq!(
            Settings::new("pack", 1).set("seq_len", 8u32).digest().to_hex(),
            "f610670943a8ec89281c987fa3d2f6c0da9d958c5ac2d830de857269cac51d69"
        );
        assert_eq!(fixed().digest().to_hex(), "d7b0285a3daf6885a7a292d330c44451f7068190cd4f31d121393cb5144d3510");
    }

    #[test]
    fn a_difference_names_the_part_and_the_first_changed_entry() {
        let was = fixed();
        let mut now = fixed();
        now.seed = 8;
        now.operators[0].settings = "pack/v1 seq_len=16".into();
        now.operators[0].digest = Settings::new("pack", 1).set("seq_len", 16u32).digest();
        let d = fingerprint_diff(&was, &now, &Default::default(), &Default::default());
        assert_eq!(d, vec!["operator 0 (pack) was seq_len=8 and is now seq_len=16", "seed was 7 and is now 8"]);
        assert!(fingerprint_diff(&was, &fixed(), &Default::default(), &Default::default()).is_empty());
    }
}
