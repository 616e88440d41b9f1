//! `mkfs.tux3`: the program mkfs(8) runs for `mkfs -t tux3 DEVICE`.
//! Everything lives in the tux3-cli library's `mkfs_helper` module (the
//! formatting is `tux3 mkfs`'s). Cargo cannot name a binary with a dot, so
//! it builds as `mkfs-tux3` and is installed as `mkfs.tux3`.

/// mimalloc, as in the other binaries (`mkfs.tux3 --from` copies a tree
/// through the engine).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tux3_cli::mkfs_helper::main()
}
