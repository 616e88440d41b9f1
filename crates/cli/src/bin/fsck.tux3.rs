//! `fsck.tux3`: the checker fsck(8) runs for `fsck -t tux3 DEVICE` and
//! /etc/fstab lines of type tux3. Everything lives in the tux3-cli
//! library's `fsck_helper` module (the check is `tux3 fsck`'s). Cargo
//! cannot name a binary with a dot, so it builds as `fsck-tux3` and is
//! installed as `fsck.tux3`.

/// mimalloc, as in the other binaries.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tux3_cli::fsck_helper::main()
}
