//! The per-opcode argument structs of FUSE requests (both transports) (`fuse_*_in` in
//! `include/uapi/linux/fuse.h`), as `#[repr(C)]` structs read with
//! zerocopy from the bytes the kernel wrote (see `abi::read`). Where the
//! kernel sends a shorter, older form of a struct (`fuse_setxattr_in`
//! without `FUSE_SETXATTR_EXT`), the struct here is that shorter form: the
//! fields read are all in it.
//!
//! Calls nothing.

use zerocopy::{FromBytes, Immutable, KnownLayout};

/// `struct fuse_setattr_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct SetattrIn {
    pub valid: u32,
    pub padding: u32,
    pub fh: u64,
    pub size: u64,
    pub lock_owner: u64,
    pub atime: u64,
    pub mtime: u64,
    pub ctime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub unused4: u32,
    pub uid: u32,
    pub gid: u32,
    pub unused5: u32,
}

/// `struct fuse_mknod_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct MknodIn {
    pub mode: u32,
    pub rdev: u32,
    pub umask: u32,
    pub padding: u32,
}

/// `struct fuse_create_in` (CREATE and TMPFILE).
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct CreateIn {
    pub flags: u32,
    pub mode: u32,
    pub umask: u32,
    pub open_flags: u32,
}

/// `struct fuse_forget_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct ForgetIn {
    pub nlookup: u64,
}

/// `struct fuse_batch_forget_in`, followed by `count` [`ForgetOne`]s.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct BatchForgetIn {
    pub count: u32,
    pub dummy: u32,
}

/// `struct fuse_forget_one`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct ForgetOne {
    pub nodeid: u64,
    pub nlookup: u64,
}

/// `struct fuse_mkdir_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct MkdirIn {
    pub mode: u32,
    pub umask: u32,
}

/// `struct fuse_rename_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct RenameIn {
    pub newdir: u64,
}

/// `struct fuse_rename2_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct Rename2In {
    pub newdir: u64,
    pub flags: u32,
    pub padding: u32,
}

/// `struct fuse_link_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct LinkIn {
    pub oldnodeid: u64,
}

/// `struct fuse_read_in` (READ and READDIR).
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct ReadIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

/// `struct fuse_write_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct WriteIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub write_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

/// `struct fuse_fsync_in` (FSYNC and FSYNCDIR).
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct FsyncIn {
    pub fh: u64,
    pub fsync_flags: u32,
    pub padding: u32,
}

/// `struct fuse_setxattr_in` in its short form (`FUSE_COMPAT_SETXATTR_IN_SIZE`).
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct SetxattrIn {
    pub size: u32,
    pub flags: u32,
}

/// `struct fuse_getxattr_in` (GETXATTR and LISTXATTR).
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct GetxattrIn {
    pub size: u32,
    pub padding: u32,
}

/// `struct fuse_ioctl_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct IoctlIn {
    pub fh: u64,
    pub flags: u32,
    pub cmd: u32,
    pub arg: u64,
    pub in_size: u32,
    pub out_size: u32,
}

/// `struct fuse_lseek_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct LseekIn {
    pub fh: u64,
    pub offset: u64,
    pub whence: u32,
    pub padding: u32,
}

/// `struct fuse_fallocate_in`.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct FallocateIn {
    pub fh: u64,
    pub offset: u64,
    pub length: u64,
    pub mode: u32,
    pub padding: u32,
}

/// `struct fuse_copy_file_range_in` (COPY_FILE_RANGE and
/// COPY_FILE_RANGE_64): the source is the request's node.
#[derive(FromBytes, KnownLayout, Immutable, Debug, Clone, Copy)]
#[repr(C)]
pub struct CopyFileRangeIn {
    pub fh_in: u64,
    pub off_in: u64,
    pub nodeid_out: u64,
    pub fh_out: u64,
    pub off_out: u64,
    pub len: u64,
    pub flags: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn structs_have_the_kernel_sizes() {
        assert_eq!(size_of::<SetattrIn>(), 88);
        assert_eq!(size_of::<MknodIn>(), 16);
        assert_eq!(size_of::<CreateIn>(), 16);
        assert_eq!(size_of::<ForgetIn>(), 8);
        assert_eq!(size_of::<BatchForgetIn>(), 8);
        assert_eq!(size_of::<ForgetOne>(), 16);
        assert_eq!(size_of::<MkdirIn>(), 8);
        assert_eq!(size_of::<RenameIn>(), 8);
        assert_eq!(size_of::<Rename2In>(), 16);
        assert_eq!(size_of::<LinkIn>(), 8);
        assert_eq!(size_of::<ReadIn>(), 40);
        assert_eq!(size_of::<WriteIn>(), 40);
        assert_eq!(size_of::<FsyncIn>(), 16);
        assert_eq!(size_of::<SetxattrIn>(), 8);
        assert_eq!(size_of::<GetxattrIn>(), 8);
        assert_eq!(size_of::<IoctlIn>(), 32);
        assert_eq!(size_of::<LseekIn>(), 24);
        assert_eq!(size_of::<FallocateIn>(), 32);
        assert_eq!(size_of::<CopyFileRangeIn>(), 56);
    }
}
