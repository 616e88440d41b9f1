//! Frontend layer: files without a name, and names without a file. A file
//! made with no name (`O_TMPFILE`, [`Volume::tmpfile`]) is an orphan from
//! its start — link count 0, on the orphan list, held by its maker — so it
//! goes at its last handle or at the next mount after a crash, like a file
//! unlinked while open; a link may give it its first name ([`Volume::link`]
//! then calls [`Volume::named`]), which takes it off the list durably (a
//! `Named` record). A whiteout ([`Volume::whiteout`]) is the character
//! device 0/0 a rename with `RENAME_WHITEOUT` leaves at the old name, as
//! overlayfs marks a name removed from a lower layer.
//!
//! Calls the cache and log (`Orphan`, `Named` records for the backend).

use super::{fresh_inode, live_dir};
use crate::error::Result;
use crate::frontend::Volume;
use crate::log::Record;
use crate::types::*;

impl Volume {
    /// Make a regular file with no name in directory `dir` (permission
    /// bits from `mode`), owned by `uid` and `gid`, with one handle held
    /// by the caller: it lives while a handle does, and [`Volume::link`]
    /// may name it once.
    pub fn tmpfile(&mut self, dir: Ino, mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        live_dir(self.dir(dir)?)?;
        self.begin_change(2)?;
        let ino = self.alloc_ino(dir)?;
        let mode = libc::S_IFREG | (mode & 0o7777);
        let mut inode = fresh_inode(ino, dir, FileType::Regular, mode, 0, uid, gid, self.be.delta);
        inode.attrs.nlink = 0;
        crate::frontend::xattr::inherit_acl(&self.dir(dir)?.attrs, &mut inode);
        self.cache.insert(inode);
        self.touch(ino);
        let books = self.books.get_mut();
        books.ns_touched.insert(ino);
        books.linkable.insert(ino);
        self.open_handle(ino)?;
        // On the durable orphan list in the delta that first writes it.
        self.be.orphans.insert(ino);
        self.be.records.push(Record::Orphan { ino });
        self.getattr(ino)
    }

    /// File `ino`, made without a name, got one: off the orphan list.
    pub(super) fn named(&mut self, ino: Ino) {
        self.books.get_mut().linkable.remove(&ino);
        if self.be.orphans.remove(&ino) {
            self.be.records.push(Record::Named { ino });
            self.be.named.insert(ino);
        }
    }

    /// Put a whiteout at `name` in `dir` (free), owned by `uid` and `gid`;
    /// the caller reserved its space (a rename, in the same step).
    pub(super) fn whiteout(&mut self, dir: Ino, name: &[u8], uid: u32, gid: u32) -> Result<()> {
        let ino = self.alloc_ino(dir)?;
        let kind = FileType::CharDevice;
        let inode = fresh_inode(ino, dir, kind, libc::S_IFCHR, 0, uid, gid, self.be.delta);
        self.cache.insert(inode);
        self.touch(ino);
        self.books.get_mut().ns_touched.insert(ino);
        self.add_entry(dir, name, ino, kind, None)?;
        Ok(())
    }
}
