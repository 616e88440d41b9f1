//! Backend layer: one allocation group — the blocks one bitmap block
//! covers — as the allocator holds it: counts and a hint of its longest
//! free run always, its bits only once anything in it was ever used.
//!
//! A group whose `bits` is `None` is wholly free and unpinned: the empty
//! part of a large volume costs 16 bytes per group (per 127 MiB with 4 KiB
//! blocks), never a bit per block. Bits past the group's `size` (the end of
//! the volume, in the last group) are never set; searches stop at `size`.
//!
//! Calls nothing: plain bit arithmetic.

/// A group's bits: in use, and freed but pinned (not yet reusable).
pub struct Bits {
    pub used: Box<[u64]>,
    pub pinned: Box<[u64]>,
}

pub struct Group {
    /// Blocks in the group (the last one may be short).
    pub size: u32,
    /// Blocks whose used bit is clear (pinned or not).
    pub free: u32,
    /// Blocks clear and not pinned: allocatable.
    pub avail: u32,
    /// At least the longest run of allocatable blocks (exact after a
    /// search of the whole group found nothing longer).
    pub hint: u32,
    pub bits: Option<Box<Bits>>,
}

impl Group {
    /// A wholly free group of `size` blocks.
    pub fn empty(size: u32) -> Group {
        Group {
            size,
            free: size,
            avail: size,
            hint: size,
            bits: None,
        }
    }

    /// The bits, made on first use (all clear).
    pub fn bits_mut(&mut self, words: usize) -> &mut Bits {
        self.bits.get_or_insert_with(|| {
            Box::new(Bits {
                used: vec![0; words].into_boxed_slice(),
                pinned: vec![0; words].into_boxed_slice(),
            })
        })
    }

    pub fn is_used(&self, i: u32) -> bool {
        self.bits.as_ref().is_some_and(|b| get(&b.used, i))
    }

    pub fn is_pinned(&self, i: u32) -> bool {
        self.bits.as_ref().is_some_and(|b| get(&b.pinned, i))
    }

    /// Whether block `i` of the group can be handed out.
    pub fn is_avail(&self, i: u32) -> bool {
        i < self.size
            && self
                .bits
                .as_ref()
                .is_none_or(|b| !get(&b.used, i) && !get(&b.pinned, i))
    }

    /// Word `w` of the taken map (used or pinned, and past `size`).
    fn taken(&self, w: usize) -> u64 {
        let base = (w as u64) * 64;
        let mut t = match &self.bits {
            Some(b) => b.used[w] | b.pinned[w],
            None => 0,
        };
        let size = u64::from(self.size);
        if base + 64 > size {
            let valid = size.saturating_sub(base);
            t |= if valid == 0 { u64::MAX } else { u64::MAX << valid };
        }
        t
    }

    /// The first block at or after `i` that is (`want_taken`) taken or
    /// not; `size` if none.
    fn next(&self, i: u32, want_taken: bool) -> u32 {
        let mut i = u64::from(i);
        let size = u64::from(self.size);
        while i < size {
            let w = (i / 64) as usize;
            let mut word = self.taken(w);
            if !want_taken {
                word = !word;
            }
            word &= u64::MAX << (i % 64);
            if word != 0 {
                return (w as u64 * 64 + u64::from(word.trailing_zeros())).min(size) as u32;
            }
            i = (w as u64 + 1) * 64;
        }
        self.size
    }

    /// The first run of at least `want` allocatable blocks starting at or
    /// after `from`: (start, length up to the group's end). A search from
    /// 0 that finds none makes the hint exact.
    pub fn find(&mut self, from: u32, want: u32) -> Option<(u32, u32)> {
        if self.avail < want || self.hint < want {
            return None;
        }
        if self.bits.is_none() {
            return (from < self.size && self.size - from >= want).then(|| (from, self.size - from));
        }
        let (mut i, mut best) = (from, 0);
        while i < self.size {
            let s = self.next(i, false);
            if s >= self.size {
                break;
            }
            let e = self.next(s, true);
            if e - s >= want {
                return Some((s, e - s));
            }
            best = best.max(e - s);
            i = e;
        }
        if from == 0 {
            self.hint = best;
        }
        None
    }

    /// Where the allocatable run that reaches the group's end starts, if
    /// it starts at or after `from`: the part in this group of a run that
    /// may go on into the next group.
    pub fn tail_start(&self, from: u32) -> Option<u32> {
        if self.size == 0 || !self.is_avail(self.size - 1) {
            return None;
        }
        let mut i = from;
        loop {
            let s = self.next(i, false);
            if s >= self.size {
                return None;
            }
            let e = self.next(s, true);
            if e >= self.size {
                return Some(s);
            }
            i = e;
        }
    }

    /// Allocatable blocks from `i` on, at most `max`.
    pub fn run_from(&self, i: u32, max: u32) -> u32 {
        if !self.is_avail(i) {
            return 0;
        }
        (self.next(i, true) - i).min(max)
    }

    /// Runs of blocks free and not pinned, from `from`: (start, length).
    pub fn free_runs(&self, from: u32) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        let mut i = from;
        while i < self.size {
            let s = self.next(i, false);
            if s >= self.size {
                break;
            }
            let e = self.next(s, true);
            out.push((s, e - s));
            i = e;
        }
        out
    }

    /// Drop the bits of a group nothing uses or pins any more.
    pub fn settle(&mut self) {
        if self.free == self.size && self.avail == self.size {
            self.bits = None;
            self.hint = self.size;
        }
        self.hint = self.hint.min(self.avail);
    }
}

pub fn get(v: &[u64], b: u32) -> bool {
    v[(b / 64) as usize] & (1 << (b % 64)) != 0
}

pub fn set(v: &mut [u64], b: u32, on: bool) {
    let w = &mut v[(b / 64) as usize];
    if on {
        *w |= 1 << (b % 64)
    } else {
        *w &= !(1 << (b % 64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(size: u32, used: &[u32]) -> Group {
        let mut g = Group::empty(size);
        let words = (size as usize).div_ceil(64);
        for &i in used {
            set(&mut g.bits_mut(words).used, i, true);
            g.free -= 1;
            g.avail -= 1;
        }
        g
    }

    #[test]
    fn find_skips_runs_shorter_than_asked() {
        let mut g = group(200, &[3, 5, 100]);
        assert_eq!(g.find(0, 1), Some((0, 3)));
        assert_eq!(g.find(0, 4), Some((6, 94)));
        assert_eq!(g.find(0, 95), Some((101, 99)));
        assert_eq!(g.find(0, 100), None);
        assert_eq!(g.hint, 99, "a whole-group search makes the hint exact");
        assert_eq!(g.find(102, 5), Some((102, 98)));
    }

    #[test]
    fn the_end_of_the_group_is_never_handed_out() {
        let mut g = group(70, &[]);
        g.bits_mut(2);
        assert_eq!(g.find(60, 10), Some((60, 10)));
        assert_eq!(g.find(61, 10), None);
        assert_eq!(g.run_from(65, 100), 5);
        assert!(!g.is_avail(70));
        assert_eq!(g.free_runs(0), vec![(0, 70)]);
    }
}
