//! The `tux3` command: everything lives in the tux3-cli library
//! (`tux3_cli::main`).

fn main() -> std::process::ExitCode {
    tux3_cli::main()
}
