//! INIT, the one request fuser answers (as its `Filesystem::init`, during
//! the mount): the capabilities and settings the server asks the kernel
//! for. Every request after it is decoded by our own code
//! (`devfuse.rs`, `uring/`), so its answers to the other requests — which
//! ones it refuses with ENOSYS to save round trips (OPEN, OPENDIR, CREATE,
//! FLUSH) — are in `uring/dispatch.rs`.
//!
//! Calls nothing of the engine.

use super::{uring, Tux3Fuse};
use super::{MAX_BACKGROUND, MAX_READAHEAD, MAX_WRITE};
use fuser::{Filesystem, InitFlags, KernelConfig, Request};

impl Filesystem for Tux3Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(MAX_READAHEAD) {
            let _ = config.set_max_readahead(max);
        }
        // Read-ahead and other background requests in flight at once
        // (the kernel's default is 12): a 1 MiB read-ahead is 1 MiB
        // requests, several of them queued ahead of the reader.
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        // Listings with each entry's attributes where they save lookups
        // (the kernel picks: the first batch of a listing, and directories
        // whose entries are then looked up, as by `ls -l`).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // Lookups and readdirs of one directory may run in parallel: the
        // engine serializes what needs it.
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // We take privileges away on write, truncate and chown ourselves,
        // which saves a getxattr round trip before every write.
        self.set_strips_privs(
            config
                .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
                .is_ok(),
        );
        // POSIX ACLs, checked by the kernel (which needs
        // default_permissions for that) and kept by the engine; the umask
        // is then ours to apply (`Tux3Fuse::create_mode`).
        if self.opts.default_permissions {
            let acl = InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
            self.set_acls(config.add_capabilities(acl).is_ok());
        }
        // File handles that outlive the kernel's inode (inode number and
        // generation; `.` and `..` lookups turn them back into files).
        let _ = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT);
        if self.opts.uring != Some(false) && uring::kernel_enabled() {
            self.set_uring(config.add_capabilities(InitFlags::FUSE_OVER_IO_URING).is_ok());
        }
        if self.opts.writeback_cache {
            config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .map_err(|_| std::io::Error::other("the kernel does not support the FUSE writeback cache"))?;
        }
        Ok(())
    }
}
