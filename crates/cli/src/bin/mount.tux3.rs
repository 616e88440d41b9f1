//! `mount.tux3`: the helper mount(8) runs for `mount -t tux3 SPEC DIR` and
//! /etc/fstab lines of type tux3. Everything lives in the tux3-cli
//! library's `mount` module (the same code path as `tux3 mount`). Cargo cannot
//! name a binary with a dot, so it builds as `mount-tux3` and is installed
//! as `mount.tux3`.

/// mimalloc rather than glibc malloc: under many threads glibc's arenas
/// grow and trim over and over, and the page faults of that cost a fifth or
/// more of the filesystem's CPU in dbench.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tux3_cli::tune_allocator();
    tux3_cli::mount::helper_main()
}
