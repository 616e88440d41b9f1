//! Frontend layer, namespace: rename(2) — within a directory or across
//! two, replacing or exchanging, with the loop check (a directory never
//! moves under itself) and a moved directory's `..` and parent links.
//!
//! Calls the parent module's entry helpers and the cache.

use super::*;

impl Volume {
    /// Is `ancestor` equal to `ino` or above it in the tree?
    pub(super) fn is_ancestor(&mut self, ancestor: Ino, mut ino: Ino) -> Result<bool> {
        for _ in 0..4096 {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            ino = self.dir(ino)?.attrs.parent;
        }
        Err(Error::corrupt(
            0,
            format!("directory {ino}: parent chain does not reach the root"),
        ))
    }

    pub fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.exchange && (flags.noreplace || flags.whiteout.is_some()) {
            return err(Errno::EINVAL);
        }
        self.dir(parent)?;
        if name.len() > NAME_MAX {
            return err(Errno::ENAMETOOLONG);
        }
        live_dir(self.dir(newparent)?)?;
        check_name(newname)?;
        // The order of checks follows Linux's renameat2.
        let src = self.find(parent, name)?.ok_or(Error::Posix(Errno::ENOENT))?;
        let (target, free) = match self.probe(newparent, newname)? {
            Lookup::Found { ino, kind, spot } => (Some(Found { spot, ino, kind }), None),
            Lookup::Absent { free } => (None, free),
        };
        if flags.noreplace && target.is_some() {
            return err(Errno::EEXIST);
        }
        if flags.exchange && target.is_none() {
            return err(Errno::ENOENT);
        }
        if parent != newparent {
            if src.kind == FileType::Directory && self.is_ancestor(src.ino, newparent)? {
                return err(Errno::EINVAL);
            }
            if let Some(t) = &target {
                if t.kind == FileType::Directory && self.is_ancestor(t.ino, parent)? {
                    return err(if flags.exchange {
                        Errno::EINVAL
                    } else {
                        Errno::ENOTEMPTY
                    });
                }
            }
        }
        self.may_unname(parent, src.ino)?;
        crate::frontend::flags::may_name_in(&self.dir(newparent)?.attrs)?;
        if let Some(t) = &target {
            self.may_unname(newparent, t.ino)?;
        }
        let src_dir = src.kind == FileType::Directory;
        if flags.exchange {
            let Some(tgt) = target else {
                return err(Errno::ENOENT);
            };
            if src.ino == tgt.ino {
                return Ok(());
            }
            self.begin_change(4)?;
            self.books.get_mut().ns_touched.extend([src.ino, tgt.ino]);
            if src.kind == FileType::Directory || tgt.kind == FileType::Directory {
                // Parents and link counts of directories change.
                self.books.get_mut().ns_touched.extend([parent, newparent]);
            }
            // Each name takes the lowest free position of its hash once
            // both are gone (looked for again: the trees changed).
            self.remove_entry(parent, &src.spot, src.ino)?;
            self.remove_entry(newparent, &tgt.spot, tgt.ino)?;
            self.add_entry(parent, name, tgt.ino, tgt.kind, None)?;
            self.add_entry(newparent, newname, src.ino, src.kind, None)?;
            if parent != newparent {
                self.reparent(src.ino, parent, newparent)?;
                self.reparent(tgt.ino, newparent, parent)?;
            }
            self.changed(src.ino)?;
            return self.changed(tgt.ino);
        }
        if let Some(t) = &target {
            if t.ino == src.ino {
                return Ok(());
            }
            let tgt_dir = t.kind == FileType::Directory;
            if src_dir && !tgt_dir {
                return err(Errno::ENOTDIR);
            }
            if !src_dir && tgt_dir {
                return err(Errno::EISDIR);
            }
            if tgt_dir && !self.is_empty_dir(t.ino)? {
                return err(Errno::ENOTEMPTY);
            }
        }
        // A whiteout is a new inode and entry, in the same delta.
        self.begin_change(if flags.whiteout.is_some() { 7 } else { 4 })?;
        self.books.get_mut().ns_touched.insert(src.ino);
        if let Some(t) = &target {
            self.books.get_mut().ns_touched.insert(t.ino);
        }
        let dir_moves = src_dir || target.as_ref().is_some_and(|t| t.kind == FileType::Directory);
        if dir_moves {
            // Link counts of the parents change.
            self.books.get_mut().ns_touched.extend([parent, newparent]);
        }
        if let Some(t) = target {
            self.remove_entry(newparent, &t.spot, t.ino)?;
            if t.kind == FileType::Directory {
                self.dir(newparent)?.attrs.nlink -= 1;
                self.drop_dir(t.ino)?;
            } else {
                self.drop_link(t.ino)?;
            }
        }
        self.remove_entry(parent, &src.spot, src.ino)?;
        // The position the lookup found free, unless a removal above
        // changed the tree (then looked for again).
        self.add_entry(newparent, newname, src.ino, src.kind, free)?;
        if parent != newparent {
            self.reparent(src.ino, parent, newparent)?;
        }
        if let Some((uid, gid)) = flags.whiteout {
            self.whiteout(parent, name, uid, gid)?;
        }
        self.changed(src.ino)
    }

    /// An inode moved from `from` to `to`: a directory's parent and link
    /// counts; any other file's parent hint.
    pub(super) fn reparent(&mut self, ino: Ino, from: Ino, to: Ino) -> Result<()> {
        if !self.inode(ino)?.is_dir() {
            self.inode(ino)?.attrs.parent = to;
            return Ok(());
        }
        self.dir(ino)?.attrs.parent = to;
        self.touch(ino);
        self.dir(from)?.attrs.nlink -= 1;
        self.dir(to)?.attrs.nlink += 1;
        Ok(())
    }
}
