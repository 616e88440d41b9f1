//! Reference model for the model-based tests: an in-memory POSIX namespace
//! with the same operations and the same errors as the engine API. The engine
//! is checked against it step by step, so it is kept deliberately simple.
//!
//! New inodes take the number the engine returned (numbers are the engine's
//! choice); file data is a sparse map of 4 KiB chunks, so a write at 2^40 costs
//! one chunk. Error precedence follows Linux `renameat2`/`linkat`/`unlinkat`:
//! parent checks, then name checks, then existence, then type checks.

use std::collections::BTreeMap;
use tux3::{Errno, FileType, Ino, RenameFlags, SetAttr, XattrMode, NAME_MAX, ROOT_INO, SYMLINK_MAX};

/// Granule of the sparse file data map.
pub const CHUNK: u64 = 4096;

pub type R<T> = Result<T, Errno>;

/// The attributes both sides must agree on. Directory sizes depend on the
/// engine's block layout and are not compared (`size` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub ino: Ino,
    pub kind: FileType,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: Option<u64>,
}

impl View {
    pub fn of(a: &tux3::Attr) -> View {
        View {
            ino: a.ino,
            kind: a.kind,
            mode: a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            size: (a.kind != FileType::Directory).then_some(a.size),
        }
    }
}

/// One directory entry as compared: name, inode, kind.
pub type Entry = (Vec<u8>, Ino, FileType);

#[derive(Debug, Clone)]
pub struct Inode {
    pub kind: FileType,
    /// Permission bits only (`& 0o7777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u64,
    pub size: u64,
    /// Chunk index -> CHUNK bytes; absent chunks are holes. Bytes at or
    /// beyond `size` are always zero.
    pub data: BTreeMap<u64, Vec<u8>>,
    pub target: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub entries: BTreeMap<Vec<u8>, Ino>,
    /// Parent directory (directories only; the root is its own parent).
    pub parent: Ino,
}

impl Inode {
    fn new(kind: FileType, perm: u32, uid: u32, gid: u32) -> Inode {
        Inode {
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            rdev: 0,
            size: 0,
            data: BTreeMap::new(),
            target: Vec::new(),
            xattrs: BTreeMap::new(),
            entries: BTreeMap::new(),
            parent: 0,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    /// Bytes `[off, off + len)` clipped at end of file; holes read as zeros.
    pub fn read_bytes(&self, off: u64, len: usize) -> Vec<u8> {
        if off >= self.size {
            return Vec::new();
        }
        let end = self.size.min(off.saturating_add(len as u64));
        let mut out = vec![0u8; (end - off) as usize];
        let mut pos = off;
        while pos < end {
            let idx = pos / CHUNK;
            let within = (pos % CHUNK) as usize;
            let n = ((CHUNK as usize - within) as u64).min(end - pos) as usize;
            if let Some(chunk) = self.data.get(&idx) {
                let o = (pos - off) as usize;
                out[o..o + n].copy_from_slice(&chunk[within..within + n]);
            }
            pos += n as u64;
        }
        out
    }

    fn write_bytes(&mut self, off: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let idx = pos / CHUNK;
            let within = (pos % CHUNK) as usize;
            let n = (CHUNK as usize - within).min(data.len() - done);
            let chunk = self.data.entry(idx).or_insert_with(|| vec![0; CHUNK as usize]);
            chunk[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        if !data.is_empty() {
            self.size = self.size.max(off + data.len() as u64);
        }
    }

    fn truncate(&mut self, size: u64) {
        if size < self.size {
            let first_gone = size.div_ceil(CHUNK);
            self.data.retain(|&idx, _| idx < first_gone);
            if !size.is_multiple_of(CHUNK) {
                if let Some(chunk) = self.data.get_mut(&(size / CHUNK)) {
                    chunk[(size % CHUNK) as usize..].fill(0);
                }
            }
        }
        self.size = size;
    }

    /// Bytes of a listxattr answer: each name and its NUL.
    fn xattr_list(&self) -> usize {
        self.xattrs.keys().map(|n| n.len() + 1).sum()
    }
}

/// The whole namespace.
#[derive(Debug, Clone)]
pub struct Model {
    pub inodes: BTreeMap<Ino, Inode>,
    /// The engine's per-inode xattr budget in the record
    /// (`Fs::xattr_space`): past it xattrs go to the xattr file, so only a
    /// remount's check of it uses it.
    pub xattr_space: usize,
}

/// Validity of a name that is about to be created.
pub fn check_new_name(name: &[u8]) -> R<()> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Validity of a name that is only looked up.
pub fn check_lookup_name(name: &[u8]) -> R<()> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

impl Model {
    /// A fresh volume: only the root directory.
    pub fn new(root_perm: u32, uid: u32, gid: u32, xattr_space: usize) -> Model {
        let mut root = Inode::new(FileType::Directory, root_perm, uid, gid);
        root.parent = ROOT_INO;
        let mut inodes = BTreeMap::new();
        inodes.insert(ROOT_INO, root);
        Model { inodes, xattr_space }
    }

    pub fn node(&self, ino: Ino) -> R<&Inode> {
        self.inodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: Ino) -> R<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn dir(&self, ino: Ino) -> R<&Inode> {
        let n = self.node(ino)?;
        if n.is_dir() {
            Ok(n)
        } else {
            Err(Errno::ENOTDIR)
        }
    }

    pub fn view(&self, ino: Ino) -> View {
        let n = &self.inodes[&ino];
        let size = match n.kind {
            FileType::Directory => None,
            FileType::Symlink => Some(n.target.len() as u64),
            _ => Some(n.size),
        };
        View {
            ino,
            kind: n.kind,
            mode: n.kind.mode_bits() | n.perm,
            nlink: n.nlink,
            uid: n.uid,
            gid: n.gid,
            rdev: n.rdev,
            size,
        }
    }

    /// Live inode numbers, ascending.
    pub fn inos(&self) -> Vec<Ino> {
        self.inodes.keys().copied().collect()
    }

    /// Live inodes of the kinds accepted by `keep`, ascending.
    pub fn inos_where(&self, keep: impl Fn(&Inode) -> bool) -> Vec<Ino> {
        self.inodes
            .iter()
            .filter(|(_, n)| keep(n))
            .map(|(&i, _)| i)
            .collect()
    }

    /// `a` is `b` or one of its ancestors (both directories).
    fn is_ancestor_or_self(&self, a: Ino, mut b: Ino) -> bool {
        loop {
            if a == b {
                return true;
            }
            if b == ROOT_INO {
                return false;
            }
            b = self.inodes[&b].parent;
        }
    }

    /// Drop one link to non-directory `ino`, freeing it at zero.
    fn drop_link(&mut self, ino: Ino) {
        let n = self.inodes.get_mut(&ino).expect("linked inode is live");
        n.nlink -= 1;
        if n.nlink == 0 {
            self.inodes.remove(&ino);
        }
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> R<View> {
        let d = self.dir(parent)?;
        check_lookup_name(name)?;
        let ino = *d.entries.get(name).ok_or(Errno::ENOENT)?;
        Ok(self.view(ino))
    }

    pub fn getattr(&self, ino: Ino) -> R<View> {
        self.node(ino)?;
        Ok(self.view(ino))
    }

    /// Common checks of every creating operation.
    fn check_create(&self, parent: Ino, name: &[u8]) -> R<()> {
        let d = self.dir(parent)?;
        check_new_name(name)?;
        if d.entries.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        Ok(())
    }

    fn insert(&mut self, parent: Ino, name: &[u8], ino: Ino, mut node: Inode) -> View {
        assert!(
            !self.inodes.contains_key(&ino),
            "new inode {ino} is already live in the model"
        );
        if node.is_dir() {
            node.parent = parent;
            self.inodes.get_mut(&parent).unwrap().nlink += 1;
        }
        self.inodes.insert(ino, node);
        self.inodes
            .get_mut(&parent)
            .unwrap()
            .entries
            .insert(name.to_vec(), ino);
        self.view(ino)
    }

    /// `mknod`, `create` and `mkdir`: `mode` carries the type bits. `ino` is
    /// the number the engine gave the new inode.
    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
        ino: Ino,
    ) -> R<View> {
        self.check_create(parent, name)?;
        let kind = FileType::from_mode(mode).ok_or(Errno::EINVAL)?;
        if kind == FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        let mut node = Inode::new(kind, mode, uid, gid);
        if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            node.rdev = rdev;
        }
        Ok(self.insert(parent, name, ino, node))
    }

    pub fn symlink(
        &mut self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
        ino: Ino,
    ) -> R<View> {
        self.check_create(parent, name)?;
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() > SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut node = Inode::new(FileType::Symlink, 0o777, uid, gid);
        node.target = target.to_vec();
        Ok(self.insert(parent, name, ino, node))
    }

    pub fn readlink(&self, ino: Ino) -> R<Vec<u8>> {
        let n = self.node(ino)?;
        if n.kind != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        Ok(n.target.clone())
    }

    pub fn link(&mut self, ino: Ino, newparent: Ino, name: &[u8]) -> R<View> {
        self.node(ino)?;
        self.check_create(newparent, name)?;
        if self.inodes[&ino].is_dir() {
            return Err(Errno::EPERM);
        }
        self.inodes.get_mut(&ino).unwrap().nlink += 1;
        self.inodes
            .get_mut(&newparent)
            .unwrap()
            .entries
            .insert(name.to_vec(), ino);
        Ok(self.view(ino))
    }

    pub fn unlink(&mut self, parent: Ino, name: &[u8]) -> R<()> {
        let d = self.dir(parent)?;
        check_lookup_name(name)?;
        let ino = *d.entries.get(name).ok_or(Errno::ENOENT)?;
        if self.inodes[&ino].is_dir() {
            return Err(Errno::EISDIR);
        }
        self.inodes.get_mut(&parent).unwrap().entries.remove(name);
        self.drop_link(ino);
        Ok(())
    }

    pub fn rmdir(&mut self, parent: Ino, name: &[u8]) -> R<()> {
        let d = self.dir(parent)?;
        check_lookup_name(name)?;
        let ino = *d.entries.get(name).ok_or(Errno::ENOENT)?;
        let n = &self.inodes[&ino];
        if !n.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if !n.entries.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        let p = self.inodes.get_mut(&parent).unwrap();
        p.entries.remove(name);
        p.nlink -= 1;
        self.inodes.remove(&ino);
        Ok(())
    }

    /// `renameat2`, with Linux's order of checks.
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> R<()> {
        if flags.noreplace && flags.exchange {
            return Err(Errno::EINVAL);
        }
        let src = self.dir(parent)?.entries.get(name).copied();
        check_lookup_name(name)?;
        let dst = self.dir(newparent)?.entries.get(newname).copied();
        check_new_name(newname)?;
        let src = src.ok_or(Errno::ENOENT)?;
        match dst {
            Some(_) if flags.noreplace => return Err(Errno::EEXIST),
            None if flags.exchange => return Err(Errno::ENOENT),
            _ => {}
        }
        let src_dir = self.inodes[&src].is_dir();
        if src_dir && self.is_ancestor_or_self(src, newparent) {
            return Err(Errno::EINVAL);
        }
        if let Some(dst) = dst {
            let dst_dir = self.inodes[&dst].is_dir();
            if dst_dir && self.is_ancestor_or_self(dst, parent) {
                return Err(if flags.exchange {
                    Errno::EINVAL
                } else {
                    Errno::ENOTEMPTY
                });
            }
            if src == dst {
                return Ok(());
            }
            if flags.exchange {
                self.inodes
                    .get_mut(&parent)
                    .unwrap()
                    .entries
                    .insert(name.to_vec(), dst);
                self.inodes
                    .get_mut(&newparent)
                    .unwrap()
                    .entries
                    .insert(newname.to_vec(), src);
                if parent != newparent {
                    if src_dir {
                        self.reparent(src, parent, newparent);
                    }
                    if dst_dir {
                        self.reparent(dst, newparent, parent);
                    }
                }
                return Ok(());
            }
            match (src_dir, dst_dir) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                (true, true) if !self.inodes[&dst].entries.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
            if dst_dir {
                self.inodes.remove(&dst);
                self.inodes.get_mut(&newparent).unwrap().nlink -= 1;
            } else {
                self.drop_link(dst);
            }
        }
        self.inodes.get_mut(&parent).unwrap().entries.remove(name);
        self.inodes
            .get_mut(&newparent)
            .unwrap()
            .entries
            .insert(newname.to_vec(), src);
        if src_dir && parent != newparent {
            self.reparent(src, parent, newparent);
        }
        Ok(())
    }

    fn reparent(&mut self, dir: Ino, from: Ino, to: Ino) {
        self.inodes.get_mut(&dir).unwrap().parent = to;
        self.inodes.get_mut(&from).unwrap().nlink -= 1;
        self.inodes.get_mut(&to).unwrap().nlink += 1;
    }

    /// The file-data operations accept regular files; directories give EISDIR.
    fn data_node(&self, ino: Ino) -> R<&Inode> {
        let n = self.node(ino)?;
        match n.kind {
            FileType::Regular => Ok(n),
            FileType::Directory => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    pub fn read(&self, ino: Ino, off: u64, len: usize) -> R<Vec<u8>> {
        Ok(self.data_node(ino)?.read_bytes(off, len))
    }

    pub fn write(&mut self, ino: Ino, off: u64, data: &[u8]) -> R<usize> {
        self.data_node(ino)?;
        self.node_mut(ino)?.write_bytes(off, data);
        Ok(data.len())
    }

    pub fn setattr(&mut self, ino: Ino, set: &SetAttr) -> R<View> {
        if set.size.is_some() {
            self.data_node(ino)?;
        }
        let n = self.node_mut(ino)?;
        if let Some(m) = set.mode {
            n.perm = m & 0o7777;
        }
        if let Some(u) = set.uid {
            n.uid = u;
        }
        if let Some(g) = set.gid {
            n.gid = g;
        }
        if let Some(s) = set.size {
            n.truncate(s);
        }
        Ok(self.view(ino))
    }

    pub fn readdir(&self, ino: Ino) -> R<Vec<Entry>> {
        let d = self.dir(ino)?;
        Ok(d.entries
            .iter()
            .map(|(name, &i)| (name.clone(), i, self.inodes[&i].kind))
            .collect())
    }

    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> R<Vec<u8>> {
        self.node(ino)?.xattrs.get(name).cloned().ok_or(Errno::ENODATA)
    }

    pub fn listxattr(&self, ino: Ino) -> R<Vec<Vec<u8>>> {
        Ok(self.node(ino)?.xattrs.keys().cloned().collect())
    }

    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], mode: XattrMode) -> R<()> {
        let n = self.node_mut(ino)?;
        if name.is_empty() || name.len() > NAME_MAX {
            return Err(Errno::ERANGE);
        }
        if value.len() > 65536 {
            return Err(Errno::E2BIG);
        }
        let old = n.xattrs.get(name);
        match (mode, old) {
            (XattrMode::Create, Some(_)) => return Err(Errno::EEXIST),
            (XattrMode::Replace, None) => return Err(Errno::ENODATA),
            _ => {}
        }
        // Values past the record's space go to the xattr file: only the
        // listxattr answer bounds them here (the file's 1 MiB is never
        // reached by the values generated).
        if old.is_none() && n.xattr_list() + name.len() + 1 > 65536 {
            return Err(Errno::ENOSPC);
        }
        n.xattrs.insert(name.to_vec(), value.to_vec());
        Ok(())
    }

    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> R<()> {
        self.node_mut(ino)?
            .xattrs
            .remove(name)
            .map(|_| ())
            .ok_or(Errno::ENODATA)
    }
}
