//! `mount.tux3`: the helper mount(8) runs for `mount -t tux3 SPEC DIR` and
//! /etc/fstab lines of type tux3. Everything lives in the tux3-cli
//! library's `mount` module (the same code path as `tux3 mount`). Cargo cannot
//! name a binary with a dot, so it builds as `mount-tux3` and is installed
//! as `mount.tux3`.

fn main() -> std::process::ExitCode {
    tux3_cli::mount::helper_main()
}
