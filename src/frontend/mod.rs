//! Frontend (stub).
#![allow(unused_variables)]
use crate::api::types::*;
use crate::device::Device;
use crate::error::Result;
use std::sync::Arc;

/// Engine statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub deltas: u64,
    pub unifies: u64,
    pub log_blocks: u64,
}

pub struct Volume {
    dev: Arc<dyn Device>,
}

impl Volume {
    pub fn open(dev: Arc<dyn Device>, opts: OpenOptions) -> Result<Volume> { todo!() }
    pub fn close(self) -> Result<()> { todo!() }
    pub fn device(&self) -> &dyn Device { self.dev.as_ref() }
    pub fn stats(&self) -> Stats { todo!() }
    pub fn lookup(&mut self, parent: Ino, name: &[u8]) -> Result<Attr> { todo!() }
    pub fn getattr(&mut self, ino: Ino) -> Result<Attr> { todo!() }
    pub fn setattr(&mut self, ino: Ino, set: &SetAttr) -> Result<Attr> { todo!() }
    pub fn mknod(&mut self, parent: Ino, name: &[u8], mode: u32, rdev: u64, uid: u32, gid: u32) -> Result<Attr> { todo!() }
    pub fn symlink(&mut self, parent: Ino, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Attr> { todo!() }
    pub fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>> { todo!() }
    pub fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> { todo!() }
    pub fn unlink(&mut self, parent: Ino, name: &[u8]) -> Result<()> { todo!() }
    pub fn rmdir(&mut self, parent: Ino, name: &[u8]) -> Result<()> { todo!() }
    pub fn rename(&mut self, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: RenameFlags) -> Result<()> { todo!() }
    pub fn read(&mut self, ino: Ino, offset: u64, size: usize) -> Result<Vec<u8>> { todo!() }
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> { todo!() }
    pub fn readdir(&mut self, ino: Ino, pos: u64, max: usize) -> Result<Vec<DirEntry>> { todo!() }
    pub fn statfs(&mut self) -> Result<StatFs> { todo!() }
    pub fn getxattr(&mut self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> { todo!() }
    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> { todo!() }
    pub fn listxattr(&mut self, ino: Ino) -> Result<Vec<Vec<u8>>> { todo!() }
    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> { todo!() }
    pub fn fsync(&mut self, ino: Ino, datasync: bool) -> Result<()> { todo!() }
    pub fn sync(&mut self) -> Result<()> { todo!() }
    pub fn unify(&mut self) -> Result<()> { todo!() }
    pub fn xattr_space(&self) -> usize { todo!() }
}
