//! `umount.fuse.tux3`: the helper umount(8) runs for mounts of type
//! `fuse.tux3`, so that `umount /mnt` returns once the server has committed
//! everything. Everything lives in the tux3-cli library's `umount` module
//! (the same code path as `tux3 umount`). Cargo cannot name a binary with a
//! dot, so it builds as `umount-tux3` and is installed as
//! `umount.fuse.tux3`.

/// mimalloc, as in the other binaries.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tux3_cli::umount::helper_main()
}
