//! Where a load runs: the tux3 engine API on a device (`Engine`), or system
//! calls on a host directory (`Posix`). Both speak the same small path-based
//! interface, so one load drives either.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use tux3::{Attr, Fs, Ino, RenameFlags, SetAttr, Timespec, ROOT_INO};

pub type R<T> = io::Result<T>;

/// An open file (or directory) of a target.
pub enum Handle {
    Engine { ino: Ino, sync: bool },
    Posix { file: File },
}

/// The operations the loads use. Paths are relative, '/'-separated.
pub trait Target: Send + Sync {
    fn open(&self, path: &str, create: bool, trunc: bool, sync: bool) -> R<Handle>;
    fn open_dir(&self, path: &str, create: bool) -> R<Handle>;
    fn close(&self, h: Handle) -> R<()>;
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> R<()>;
    fn read(&self, h: &Handle, off: u64, len: usize) -> R<usize>;
    fn fsync(&self, h: &Handle) -> R<()>;
    fn fstat(&self, h: &Handle) -> R<()>;
    fn touch(&self, h: &Handle) -> R<()>;
    fn stat(&self, path: &str) -> R<()>;
    fn statfs(&self) -> R<()>;
    fn list(&self, dir: &str) -> R<usize>;
    fn mkdir(&self, path: &str) -> R<()>;
    fn unlink(&self, path: &str) -> R<()>;
    fn rename(&self, from: &str, to: &str) -> R<()>;
    fn deltree(&self, path: &str) -> R<()>;
}

fn eng(e: tux3::Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno().0)
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// The engine API on one mounted volume.
pub struct Engine {
    pub fs: Arc<Fs>,
}

impl Engine {
    fn resolve(&self, path: &str) -> R<Attr> {
        let mut attr = self.fs.getattr(ROOT_INO).map_err(eng)?;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            attr = self.fs.lookup(attr.ino, part.as_bytes()).map_err(eng)?;
        }
        Ok(attr)
    }
    fn parent(&self, path: &str) -> R<(Ino, String)> {
        let (dir, name) = split(path);
        Ok((self.resolve(dir)?.ino, name.to_string()))
    }
    fn ino(h: &Handle) -> Ino {
        match h {
            Handle::Engine { ino, .. } => *ino,
            Handle::Posix { .. } => unreachable!("posix handle given to the engine"),
        }
    }
}

impl Target for Engine {
    fn open(&self, path: &str, create: bool, trunc: bool, sync: bool) -> R<Handle> {
        let (dir, name) = self.parent(path)?;
        let attr = match self.fs.lookup(dir, name.as_bytes()) {
            Ok(a) => a,
            Err(e) if create && e.errno().0 == libc::ENOENT => {
                self.fs.create(dir, name.as_bytes(), 0o644, 0, 0).map_err(eng)?
            }
            Err(e) => return Err(eng(e)),
        };
        if attr.kind == tux3::FileType::Directory {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        if trunc && attr.size > 0 {
            let set = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            self.fs.setattr(attr.ino, &set).map_err(eng)?;
        }
        self.fs.open_handle(attr.ino).map_err(eng)?;
        Ok(Handle::Engine { ino: attr.ino, sync })
    }
    fn open_dir(&self, path: &str, create: bool) -> R<Handle> {
        let attr = match self.resolve(path) {
            Ok(a) => a,
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                let (dir, name) = self.parent(path)?;
                self.fs.mkdir(dir, name.as_bytes(), 0o755, 0, 0).map_err(eng)?
            }
            Err(e) => return Err(e),
        };
        self.fs.open_handle(attr.ino).map_err(eng)?;
        Ok(Handle::Engine {
            ino: attr.ino,
            sync: false,
        })
    }
    fn close(&self, h: Handle) -> R<()> {
        self.fs.release_handle(Self::ino(&h)).map_err(eng)
    }
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> R<()> {
        self.fs.write(Self::ino(h), off, data).map_err(eng)?;
        if let Handle::Engine { sync: true, ino } = h {
            self.fs.fsync(*ino, false).map_err(eng)?;
        }
        Ok(())
    }
    fn read(&self, h: &Handle, off: u64, len: usize) -> R<usize> {
        Ok(self.fs.read(Self::ino(h), off, len).map_err(eng)?.len())
    }
    fn fsync(&self, h: &Handle) -> R<()> {
        self.fs.fsync(Self::ino(h), false).map_err(eng)
    }
    fn fstat(&self, h: &Handle) -> R<()> {
        self.fs.getattr(Self::ino(h)).map(|_| ()).map_err(eng)
    }
    fn touch(&self, h: &Handle) -> R<()> {
        let now = Timespec::now();
        let set = SetAttr {
            atime: Some(now),
            mtime: Some(now),
            ..Default::default()
        };
        self.fs.setattr(Self::ino(h), &set).map(|_| ()).map_err(eng)
    }
    fn stat(&self, path: &str) -> R<()> {
        self.resolve(path).map(|_| ())
    }
    fn statfs(&self) -> R<()> {
        self.fs.statfs().map(|_| ()).map_err(eng)
    }
    fn list(&self, dir: &str) -> R<usize> {
        let ino = self.resolve(dir)?.ino;
        let (mut pos, mut n) = (0, 0);
        loop {
            let ents = self.fs.readdir(ino, pos, 128).map_err(eng)?;
            match ents.last() {
                Some(e) => pos = e.next,
                None => return Ok(n),
            }
            n += ents.len();
        }
    }
    fn mkdir(&self, path: &str) -> R<()> {
        let (dir, name) = self.parent(path)?;
        self.fs
            .mkdir(dir, name.as_bytes(), 0o755, 0, 0)
            .map(|_| ())
            .map_err(eng)
    }
    fn unlink(&self, path: &str) -> R<()> {
        let (dir, name) = self.parent(path)?;
        self.fs.unlink(dir, name.as_bytes()).map_err(eng)
    }
    fn rename(&self, from: &str, to: &str) -> R<()> {
        let (d1, n1) = self.parent(from)?;
        let (d2, n2) = self.parent(to)?;
        self.fs
            .rename(d1, n1.as_bytes(), d2, n2.as_bytes(), RenameFlags::default())
            .map_err(eng)
    }
    fn deltree(&self, path: &str) -> R<()> {
        let attr = self.resolve(path)?;
        let mut pos = 0;
        loop {
            let ents = self.fs.readdir(attr.ino, pos, 128).map_err(eng)?;
            let Some(last) = ents.last() else { break };
            pos = last.next;
            for e in &ents {
                let child = format!("{}/{}", path, String::from_utf8_lossy(&e.name));
                if e.kind == tux3::FileType::Directory {
                    self.deltree(&child)?;
                } else {
                    self.unlink(&child)?;
                }
            }
        }
        let (dir, name) = self.parent(path)?;
        self.fs.rmdir(dir, name.as_bytes()).map_err(eng)
    }
}

/// System calls on a host directory.
pub struct Posix {
    pub root: PathBuf,
}

impl Posix {
    fn p(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }
    fn file(h: &Handle) -> &File {
        match h {
            Handle::Posix { file } => file,
            Handle::Engine { .. } => unreachable!("engine handle given to posix"),
        }
    }
}

impl Target for Posix {
    fn open(&self, path: &str, create: bool, trunc: bool, sync: bool) -> R<Handle> {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(create).truncate(trunc);
        if sync {
            o.custom_flags(libc::O_SYNC);
        }
        Ok(Handle::Posix {
            file: o.open(self.p(path))?,
        })
    }
    fn open_dir(&self, path: &str, create: bool) -> R<Handle> {
        if create {
            match std::fs::create_dir(self.p(path)) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        Ok(Handle::Posix {
            file: File::open(self.p(path))?,
        })
    }
    fn close(&self, h: Handle) -> R<()> {
        drop(h);
        Ok(())
    }
    fn write(&self, h: &Handle, off: u64, data: &[u8]) -> R<()> {
        Self::file(h).write_all_at(data, off)
    }
    fn read(&self, h: &Handle, off: u64, len: usize) -> R<usize> {
        let mut buf = vec![0u8; len];
        Self::file(h).read_at(&mut buf, off)
    }
    fn fsync(&self, h: &Handle) -> R<()> {
        Self::file(h).sync_all()
    }
    fn fstat(&self, h: &Handle) -> R<()> {
        Self::file(h).metadata().map(|_| ())
    }
    fn touch(&self, h: &Handle) -> R<()> {
        let now = std::time::SystemTime::now();
        Self::file(h).set_times(std::fs::FileTimes::new().set_accessed(now).set_modified(now))
    }
    fn stat(&self, path: &str) -> R<()> {
        std::fs::metadata(self.p(path)).map(|_| ())
    }
    fn statfs(&self) -> R<()> {
        let c = CString::new(self.root.as_os_str().as_bytes()).unwrap();
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        match unsafe { libc::statvfs(c.as_ptr(), &mut st) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
    fn list(&self, dir: &str) -> R<usize> {
        Ok(std::fs::read_dir(self.p(dir))?.count())
    }
    fn mkdir(&self, path: &str) -> R<()> {
        std::fs::create_dir(self.p(path))
    }
    fn unlink(&self, path: &str) -> R<()> {
        std::fs::remove_file(self.p(path))
    }
    fn rename(&self, from: &str, to: &str) -> R<()> {
        std::fs::rename(self.p(from), self.p(to))
    }
    fn deltree(&self, path: &str) -> R<()> {
        std::fs::remove_dir_all(self.p(path))
    }
}

/// Per-client table of open handles, keyed by the loadfile's file numbers.
pub type Handles = HashMap<u32, Handle>;
