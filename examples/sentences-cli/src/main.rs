//! `zephon` with `[sentences]`: every subcommand of the command, and specs may use the
//! third-party operator of `examples/sentences`.

fn main() -> std::process::ExitCode {
    match zephon::Sections::new().with(zephon_sentences::SentencesSection) {
        Ok(sections) => zephon_cli::main_with(sections),
        Err(e) => zephon_cli::fail(e),
    }
}
