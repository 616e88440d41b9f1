//! The `tux3` command: everything lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    tux3_cli::main()
}
