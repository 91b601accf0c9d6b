//! The `zephon` command with the built-in spec tables (see the `zephon_cli` library for a
//! command built with more).

fn main() -> std::process::ExitCode {
    zephon_cli::main_with(zephon::Sections::new())
}
