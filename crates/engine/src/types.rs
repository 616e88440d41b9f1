//! Base (bottom layer): the value types every layer shares and the API
//! re-exports — attributes, directory entries, flags, options.
//! Plain data; no behaviour beyond small conversions.
//!
//! Calls only `memory_budget` (the default dirty limit).

/// An inode number. [`ROOT_INO`] is the root directory.
pub type Ino = u64;

/// The root directory's inode number (the same as FUSE's root id).
pub const ROOT_INO: Ino = 1;

/// Longest name of a directory entry, in bytes.
pub const NAME_MAX: usize = 255;

/// Longest symlink target, in bytes (PATH_MAX - 1).
pub const SYMLINK_MAX: usize = 4095;

/// A point in time: seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

/// The kind of an inode, from the `S_IFMT` bits of its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
}

impl FileType {
    /// The type of a mode, or `None` when the `S_IFMT` bits name no type.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Some(FileType::Regular),
            libc::S_IFDIR => Some(FileType::Directory),
            libc::S_IFLNK => Some(FileType::Symlink),
            libc::S_IFIFO => Some(FileType::Fifo),
            libc::S_IFCHR => Some(FileType::CharDevice),
            libc::S_IFBLK => Some(FileType::BlockDevice),
            libc::S_IFSOCK => Some(FileType::Socket),
            _ => None,
        }
    }

    /// The `S_IFMT` bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// One-byte code stored in directory entries (the `DT_*` values).
    pub fn dirent_code(self) -> u8 {
        match self {
            FileType::Regular => libc::DT_REG,
            FileType::Directory => libc::DT_DIR,
            FileType::Symlink => libc::DT_LNK,
            FileType::Fifo => libc::DT_FIFO,
            FileType::CharDevice => libc::DT_CHR,
            FileType::BlockDevice => libc::DT_BLK,
            FileType::Socket => libc::DT_SOCK,
        }
    }

    /// Inverse of [`FileType::dirent_code`].
    pub fn from_dirent_code(code: u8) -> Option<FileType> {
        match code {
            libc::DT_REG => Some(FileType::Regular),
            libc::DT_DIR => Some(FileType::Directory),
            libc::DT_LNK => Some(FileType::Symlink),
            libc::DT_FIFO => Some(FileType::Fifo),
            libc::DT_CHR => Some(FileType::CharDevice),
            libc::DT_BLK => Some(FileType::BlockDevice),
            libc::DT_SOCK => Some(FileType::Socket),
            _ => None,
        }
    }
}

/// Attributes of an inode, as `stat` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub kind: FileType,
    /// Full mode including the `S_IFMT` type bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    /// Blocks of storage the file holds, in 512-byte units.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub btime: Timespec,
    /// The volume's block size.
    pub blksize: u32,
}

/// Which privileges a change to a file takes away, as Linux does when a
/// write, truncate or chown changes a non-directory (`file_remove_privs`):
/// file capabilities always, set-user-ID and set-group-ID only when the
/// caller may not keep them (it lacks `CAP_FSETID`, or the change is a
/// chown). Set-group-ID goes only with group execute: without it the bit
/// means mandatory locking, not privilege.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StripPrivs {
    /// Take nothing away (what [`crate::Fs::write`] and
    /// [`crate::Fs::setattr`] do: the engine does not know the caller).
    #[default]
    Nothing,
    /// Remove the `security.capability` attribute.
    Caps,
    /// Remove `security.capability`, set-user-ID and set-group-ID.
    CapsAndIds,
}

/// The attribute holding a file's capabilities.
pub const XATTR_CAPS: &[u8] = b"security.capability";

/// Which attributes a [`crate::Fs::setattr`] changes; `None` leaves one alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (the type bits are ignored).
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate or extend to this size (regular files only).
    pub size: Option<u64>,
    pub atime: Option<Timespec>,
    pub mtime: Option<Timespec>,
    /// Explicit ctime; when `None` a change sets ctime to now.
    pub ctime: Option<Timespec>,
}

/// One entry returned by [`crate::Fs::readdir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    pub kind: FileType,
    pub name: Vec<u8>,
    /// Position to pass to `readdir` to continue after this entry.
    pub next: u64,
}

/// Where a piece of a file lies on the device: `count` blocks from its
/// block `lblock` on are blocks `pblock..pblock + count` ([`crate::Fs::data_runs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRun {
    pub lblock: u64,
    pub pblock: u64,
    pub count: u64,
}

/// Volume statistics, as `statfs` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    /// Blocks free: not in use, not pinned by a commit still to become
    /// durable, not promised to the open delta's changes.
    pub blocks_free: u64,
    /// Of those, what an ordinary change may still take: less the reserve
    /// kept for deletions, commits and unify (ARCHITECTURE.md, *Full
    /// volumes*).
    pub blocks_avail: u64,
    /// Inodes the volume could hold: those in use and `files_free`
    /// (inodes are allocated dynamically).
    pub files: u64,
    /// Inodes that could still be created: as many records as the
    /// available space holds.
    pub files_free: u64,
    pub name_max: u32,
}

/// Flags of [`crate::Fs::rename`] (`renameat2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameFlags {
    /// Fail with EEXIST if the target exists.
    pub noreplace: bool,
    /// Atomically swap source and target; both must exist.
    pub exchange: bool,
    /// `RENAME_WHITEOUT`: leave a whiteout (a character device 0/0, as
    /// overlayfs marks a removed lower name) at the old name, in the same
    /// step, owned by this (uid, gid). Not with `exchange` (EINVAL).
    pub whiteout: Option<(u32, u32)>,
}

impl RenameFlags {
    /// From the kernel's `RENAME_*` bits; unknown bits give EINVAL. A
    /// whiteout is owned by root until [`RenameFlags::whiteout_owned_by`]
    /// says otherwise.
    pub fn from_bits(bits: u32) -> Option<RenameFlags> {
        const NOREPLACE: u32 = 1;
        const EXCHANGE: u32 = 2;
        const WHITEOUT: u32 = 4;
        if bits & !(NOREPLACE | EXCHANGE | WHITEOUT) != 0 {
            return None;
        }
        Some(RenameFlags {
            noreplace: bits & NOREPLACE != 0,
            exchange: bits & EXCHANGE != 0,
            whiteout: (bits & WHITEOUT != 0).then_some((0, 0)),
        })
    }

    /// These flags with the whiteout, if any, owned by `uid` and `gid`.
    pub fn whiteout_owned_by(self, uid: u32, gid: u32) -> RenameFlags {
        RenameFlags {
            whiteout: self.whiteout.map(|_| (uid, gid)),
            ..self
        }
    }
}

/// Inode flags, with the values Linux gives them (`FS_*_FL`,
/// `FS_IOC_GETFLAGS`). The engine keeps the rules of immutable and
/// append-only files; the others are kept for the tools that read them.
pub mod flags {
    /// Writes synchronous (kept and reported).
    pub const SYNC: u32 = 0x8;
    /// No change at all: data, attributes, xattrs, names (EPERM).
    pub const IMMUTABLE: u32 = 0x10;
    /// Data only appended; no other change, no name taken away (EPERM).
    pub const APPEND: u32 = 0x20;
    /// Not for dump(8) (kept and reported).
    pub const NODUMP: u32 = 0x40;
    /// Reads and listings do not move the access time.
    pub const NOATIME: u32 = 0x80;
    /// Directory changes synchronous (kept and reported).
    pub const DIRSYNC: u32 = 0x10000;
    /// Every flag the engine keeps.
    pub const KNOWN: u32 = SYNC | IMMUTABLE | APPEND | NODUMP | NOATIME | DIRSYNC;
}

/// When a read or a listing moves a file's access time
/// ([`crate::Fs::accessed`]), as the mount options `noatime`, `relatime`
/// and `strictatime` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeRule {
    /// Never.
    Never,
    /// When the access time is not after the last change of data or
    /// attributes, or is a day old (the kernel's default).
    #[default]
    Relative,
    /// At every access.
    Strict,
}

impl AtimeRule {
    /// Whether an access at `now` moves access time `atime` of a file
    /// last modified at `mtime` and changed at `ctime`.
    pub fn moves(self, atime: Timespec, mtime: Timespec, ctime: Timespec, now: Timespec) -> bool {
        match self {
            AtimeRule::Never => false,
            AtimeRule::Strict => atime != now,
            AtimeRule::Relative => {
                atime <= mtime || atime <= ctime || now.sec.saturating_sub(atime.sec) >= 24 * 3600
            }
        }
    }
}

/// How [`crate::Fs::setxattr`] treats an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrMode {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with EEXIST if it exists (`XATTR_CREATE`).
    Create,
    /// Fail with ENODATA if it does not exist (`XATTR_REPLACE`).
    Replace,
}

/// Options of [`crate::Fs::format`].
#[derive(Debug, Clone)]
pub struct FormatOptions {
    /// Owner of the root directory.
    pub root_uid: u32,
    pub root_gid: u32,
    /// Permission bits of the root directory.
    pub root_mode: u32,
    /// A CRC32C for every data block (flag `DATA_SUMS`, format version 4).
    pub data_sums: bool,
    /// Leave all-clear bitmap blocks out of the bitmap file (flag
    /// `SPARSE_BITMAP`, format version 5): mkfs takes the same time at any
    /// size, and a resize grows in constant time. Off, every bitmap block is
    /// written, as programs reading versions 1 to 4 expect.
    pub sparse_bitmap: bool,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            root_uid: 0,
            root_gid: 0,
            root_mode: 0o755,
            data_sums: true,
            sparse_bitmap: true,
        }
    }
}

/// Options of [`crate::Fs::open`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Refuse every change with EROFS; nothing is ever written.
    pub read_only: bool,
    /// Bound on dirty file data in memory, in bytes: the open delta's dirty
    /// pages plus the data a commit in flight still holds (its frozen pages
    /// stay shared with the cache until durable); [`crate::Fs::stats`]
    /// reports both. [`crate::Fs::write`] keeps the sum at or below it: a
    /// write that would pass it first waits for the commit in flight, or
    /// commits the open delta itself when none is. With a commit thread
    /// (`commit_interval` set, as `tux3 mount` does) half the limit dirty
    /// wakes that thread, so the next delta fills while the previous one is
    /// written; without one, deltas grow to the limit. Not counted: metadata
    /// blocks and the commit's write staging buffer (up to 1 MiB). Beyond
    /// it: a single write larger than the limit (it goes through alone) and
    /// the one block a truncate or symlink may dirty.
    ///
    /// The default is [`default_dirty_limit`]: a sixty-fourth of the
    /// memory this process may use (the machine's, or its control group's
    /// limit when lower), from 64 MiB to 1 GiB.
    pub dirty_limit: u64,
    /// The smaller bound a stream works within, when `dirty_limit` is
    /// larger: a file holding an eighth of it in memory (a heavy writer)
    /// stops once all dirty data reaches seven eighths of it, and wakes the
    /// commit thread at half of it. So a stream's deltas, and the time its
    /// commits hold the volume, stay this size whatever the limit, while
    /// many files' small writes (appends, each fsynced) may share one delta
    /// up to half the limit. Default 64 MiB.
    pub stream_limit: u64,
    /// Clean file data kept in memory after its commit, for reads: the
    /// oldest files' pages go first past it. The default,
    /// [`default_clean_limit`], is four times the default dirty limit (a
    /// sixteenth of usable memory). A server whose kernel caches file data
    /// itself (`tux3 mount`) keeps it at the dirty limit.
    pub clean_limit: u64,
    /// Inodes kept in cache: past it, the end of a commit (and the commit
    /// thread's turn when there is nothing to commit) lets go of those not
    /// used lately that hold nothing the inode table lacks, down to seven
    /// eighths of it; one needed again is loaded again. Inodes with
    /// uncommitted changes stay whatever their number. The default,
    /// [`crate::default_inode_limit`], allows a sixteenth of usable
    /// memory at about 1 KiB an inode.
    pub inode_limit: usize,
    /// Leaves of one directory's tree (its entries) kept in memory: past
    /// it, the end of a commit lets go of that directory's clean leaves
    /// down to three quarters of it; one needed again is read again (in
    /// runs, by a listing). Leaves with uncommitted changes stay. The
    /// default, [`crate::default_dir_leaf_limit`], allows a 128th of usable
    /// memory at about 8 KiB a leaf (some 100 names).
    pub dir_leaf_limit: usize,
    /// Unify once the log holds this many blocks.
    pub unify_log_blocks: u64,
    /// End a delta this often (a background thread commits); `None` (the
    /// library default): only on sync, fsync, dirty pressure and close.
    /// `tux3 mount` uses 5 seconds (`-o commit=SECONDS`).
    pub commit_interval: Option<std::time::Duration>,
    /// `fsync` commits the whole delta instead of just the inode
    /// (`-o fsync=strict`): strict ordering, slower fsync.
    pub fsync_strict: bool,
    /// Open the named snapshot instead of the live volume: read-only (set
    /// `read_only` too), no log replayed, the tree the snapshot's unify
    /// wrote. It may be opened while the live volume is open elsewhere.
    pub snapshot: Option<Vec<u8>>,
    /// Online discard (`-o discard`): once a commit is durable, the blocks
    /// it freed for good (no durable image or snapshot refers to them) go
    /// back to the device — a hole in an image file, a discard on a block
    /// device — batched per commit. Off by default (`tux3 fstrim` does the
    /// same on demand). A device that cannot discard is told once and
    /// then left alone.
    pub discard: bool,
    /// Mounted by `fsck --repair`: inode-table records the mount reads
    /// ahead (of trees the log changed, the table's last) that do not
    /// decode are passed over, for the repair to replace the leaf; so are
    /// snapshot-table entries (`backend/snapshot/load.rs`).
    pub repair: bool,
}

use crate::memory_budget::{
    default_clean_limit, default_dir_leaf_limit, default_dirty_limit, default_inode_limit,
};

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            dirty_limit: default_dirty_limit(),
            stream_limit: 64 << 20,
            clean_limit: default_clean_limit(),
            inode_limit: default_inode_limit(),
            dir_leaf_limit: default_dir_leaf_limit(),
            unify_log_blocks: 256,
            commit_interval: None,
            fsync_strict: false,
            snapshot: None,
            discard: false,
            repair: false,
        }
    }
}

/// One snapshot of a volume, as [`crate::Fs::snapshot_list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Its number: the generation it closed. Snapshots taken later have
    /// larger ones.
    pub id: u64,
    pub name: Vec<u8>,
    /// When it was taken: seconds since the epoch.
    pub created: i64,
    /// Deleted: the name is gone from new lookups and its space is being
    /// reclaimed in the background (`reclaim_left` extents to go).
    pub deleting: bool,
    /// Dead extents still to be examined before its space is all back.
    pub reclaim_left: u64,
    /// Bytes only this snapshot holds: what deleting it gives back.
    pub unique_bytes: u64,
    /// Bytes of blocks it refers to (file data and the trees' nodes), as
    /// counted when it was taken.
    pub referenced_bytes: u64,
    /// Its identity across volumes: the volume it was first taken on and
    /// its id there. This volume's id and `id` for a snapshot taken here;
    /// what `tux3 receive` recorded for one received from elsewhere.
    pub origin: SnapOrigin,
}

/// Where a snapshot was first taken: the volume's id and the snapshot's
/// id on it. A snapshot sent and received keeps its origin, so an
/// incremental stream names its base by it on every volume that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SnapOrigin {
    pub volume: u64,
    pub id: u64,
}
