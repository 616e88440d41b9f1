//! Whether a directory listing carries each entry's attributes.
//!
//! The kernel asks for a listing with attributes (READDIRPLUS) at the start
//! of every listing, and later in one when entries of the directory were
//! looked up meanwhile. An entry with attributes saves a LOOKUP round trip
//! if the caller then opens or stats it (`ls -l`, `du`, rsync), and costs
//! the kernel an inode and a dentry it may never use if the caller only
//! wants names (`find`, a shell glob): on this machine a walk of 100,000
//! files by `find` runs at about 200,000 entries/s with attributes and
//! 700,000 without, while `find -size` (a stat of each) runs at 180,000
//! with them and 23,000 without.
//!
//! So the server decides, the way the kernel decides for the later parts
//! of one listing, but across directories: a listing starts without
//! attributes (every entry's `fuse_entry_out` is zero, which the kernel
//! reads as "no attributes for this one"); if entries of a directory
//! listed so are then looked up (`MISSES` of them; not subdirectories,
//! which any walker looks up to go down into them), the caller is a
//! stat-each walker, and the next `WINDOW` listings, of any directory,
//! carry attributes. Asking for the attributes of files (GETATTR, which
//! names no directory) after a listing without them counts the same way:
//! a listing with attributes refreshes those the kernel holds of the
//! entries, which dbench's mix asks for again. A directory whose entries
//! were looked up since its last listing gets them too. Then listings go
//! back to names only, and
//! the first miss of a walker that is still going turns attributes on
//! again: such a walker pays a LOOKUP per entry of one directory in
//! `WINDOW` + 1.
//!
//! Only the io_uring transport sends names without attributes: `/dev/fuse`
//! listings always carry them, as they did when fuser answered them (its
//! listing reply took an attribute for every entry), which this advice was
//! not measured against.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use tux3::types::Ino;

/// Lookups of entries of a directory listed without attributes that turn
/// attributes on.
const MISSES: u32 = 2;

/// Listings that carry attributes once turned on.
const WINDOW: u64 = 64;

/// Directories listed without attributes remembered at most (a walk of a
/// larger tree forgets the oldest batch at once).
const REMEMBERED: usize = 4096;

/// What the server knows of recent listings.
#[derive(Default)]
pub struct ListingAdvice {
    /// Directories whose last listing went without attributes, with the
    /// lookups of their entries since.
    light: Mutex<HashMap<Ino, u32>>,
    /// Listings started so far.
    started: AtomicU64,
    /// Listings started before this count carry attributes.
    plus_until: AtomicU64,
    /// The last listing started went without attributes.
    last_light: AtomicBool,
    /// Attributes of files asked for since then.
    asked: AtomicU32,
}

impl ListingAdvice {
    /// Whether a READDIRPLUS of `dir` at `offset` (at most 2: a new
    /// listing) answers with attributes.
    pub fn with_attrs(&self, dir: Ino, offset: u64) -> bool {
        let mut light = self.light.lock();
        if offset > 2 {
            // A later part of a listing: as its start, unless entries were
            // looked up since (which is why the kernel asks again).
            return self.turned_on() || light.get(&dir).is_none_or(|&n| n > 0);
        }
        let n = self.started.fetch_add(1, Relaxed);
        if n < self.plus_until.load(Relaxed) || light.get(&dir).is_some_and(|&n| n > 0) {
            light.remove(&dir);
            self.last_light.store(false, Relaxed);
            return true;
        }
        if light.len() >= REMEMBERED {
            light.clear();
        }
        light.insert(dir, 0);
        self.asked.store(0, Relaxed);
        self.last_light.store(true, Relaxed);
        false
    }

    /// The kernel asked for the attributes of a file (not a directory).
    pub fn attrs_asked(&self) {
        if self.last_light.load(Relaxed) && self.asked.fetch_add(1, Relaxed) + 1 == MISSES {
            self.turn_on();
        }
    }

    /// The next `WINDOW` listings carry attributes.
    fn turn_on(&self) {
        self.last_light.store(false, Relaxed);
        self.plus_until
            .store(self.started.load(Relaxed).saturating_add(WINDOW), Relaxed);
    }

    /// A lookup in `dir` found an entry that is not a directory.
    pub fn looked_up(&self, dir: Ino) {
        let mut light = self.light.lock();
        let Some(n) = light.get_mut(&dir) else {
            return;
        };
        *n = n.saturating_add(1);
        if *n == MISSES {
            self.turn_on();
        }
    }

    fn turned_on(&self) -> bool {
        self.started.load(Relaxed) <= self.plus_until.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_only_until_entries_are_looked_up_then_a_window_with_attributes() {
        let a = ListingAdvice::default();
        // A names-only walker: never attributes.
        for d in 10..20 {
            assert!(!a.with_attrs(d, 0), "dir {d}");
            assert!(!a.with_attrs(d, 500), "dir {d}, a later part");
        }
        // A stat-each walker: the first directory goes without, its
        // lookups turn attributes on for the next WINDOW listings.
        assert!(!a.with_attrs(100, 0));
        a.looked_up(100);
        assert!(!a.with_attrs(101, 0), "one lookup is not a walker yet");
        a.looked_up(100);
        for d in 0..WINDOW {
            assert!(a.with_attrs(200 + d, 0), "listing {d} of the window");
        }
        assert!(!a.with_attrs(300, 0), "the window is over");
        // Lookups in a directory since its listing give it attributes.
        assert!(!a.with_attrs(400, 0));
        a.looked_up(400);
        assert!(a.with_attrs(400, 500), "the kernel asks again after lookups");
        assert!(a.with_attrs(400, 0));
        // Lookups in directories never listed change nothing.
        a.looked_up(999);
        a.looked_up(999);
        assert!(!a.with_attrs(500, 0));
        // Attributes of files asked for after a listing without them turn
        // them on as well; asked for after one with them, they do not.
        a.attrs_asked();
        assert!(!a.with_attrs(501, 0), "one is not a pattern");
        a.attrs_asked();
        a.attrs_asked();
        for d in 0..WINDOW {
            assert!(a.with_attrs(600 + d, 0), "listing {d} of the window");
        }
        a.attrs_asked();
        a.attrs_asked();
        assert!(!a.with_attrs(700, 0), "asked for after listings with attributes");
    }
}
