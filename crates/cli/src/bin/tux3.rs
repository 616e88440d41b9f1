//! The `tux3` command: everything lives in the tux3-cli library
//! (`tux3_cli::main`).

/// mimalloc rather than glibc malloc: under many threads glibc's arenas
/// grow and trim over and over, and the page faults of that cost a fifth or
/// more of the filesystem's CPU in dbench.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tux3_cli::tune_allocator();
    tux3_cli::main()
}
