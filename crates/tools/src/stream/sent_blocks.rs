//! `tux3 send`: clones in a stream. [`SentBlocks`] remembers where the
//! blocks of the snapshot sent as data so far went (first physical block
//! to file and logical block), so that a later file mapping the same
//! blocks is sent as `Clone` records naming them instead of their data; a
//! clone that continues the one before it in both files joins it. Also the
//! sums on sorted extent lists that choosing the blocks to send takes
//! (`gaps`, `changed_runs`).
//!
//! Pure bookkeeping on extent lists: calls only the engine's `Extent`.

use std::collections::BTreeMap;
use tux3::structures::extent::Extent;

/// What to send of a run of a file's blocks: data, or a reference to
/// the same blocks sent before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Piece {
    /// Blocks `[s, e)`, as `Write` records (the last cut at the size).
    Data(u64, u64),
    /// Bytes `offset..+len` read as `src_offset..+len` of inode `src`.
    Clone {
        offset: u64,
        len: u64,
        src: u64,
        src_offset: u64,
    },
}

/// Where a run of blocks sent as data went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    ino: u64,
    /// Its first logical block in `ino`.
    lblock: u64,
    count: u64,
    /// `ino`'s size (a clone may not name bytes past it: they were not sent).
    size: u64,
}

/// Where the blocks of the snapshot sent as data so far went: first
/// physical block → [`Place`], the runs disjoint, at most `limit` of them
/// (see [`CLONE_MAP_ENTRIES`](super::send::CLONE_MAP_ENTRIES); once full,
/// nothing more is remembered). Built the same on a resumed send (the
/// records skipped are decided as if written), so the records after the
/// resume point are the same.
pub(super) struct SentBlocks {
    map: BTreeMap<u64, Place>,
    limit: usize,
}

impl SentBlocks {
    pub(super) fn new(limit: usize) -> SentBlocks {
        SentBlocks {
            map: BTreeMap::new(),
            limit,
        }
    }

    /// The places sent before of physical blocks `[p, p + n)`, clipped to
    /// them: (first physical block, place), in address order.
    fn sent_of(&self, p: u64, n: u64) -> Vec<(u64, Place)> {
        let first = match self.map.range(..=p).next_back() {
            Some((&s, v)) if s + v.count > p => s,
            _ => p,
        };
        let mut out = Vec::new();
        for (&s, v) in self.map.range(first..p + n) {
            let (from, to) = (s.max(p), (s + v.count).min(p + n));
            if from < to {
                let skip = from - s;
                out.push((
                    from,
                    Place {
                        lblock: v.lblock + skip,
                        count: to - from,
                        ..*v
                    },
                ));
            }
        }
        out
    }

    /// Remember that physical blocks from `p` went to `place`, joined to
    /// the run before when it continues it on disk and in the same file.
    fn remember(&mut self, p: u64, place: Place) {
        if let Some((&s, v)) = self.map.range_mut(..p).next_back() {
            if s + v.count == p && v.ino == place.ino && v.lblock + v.count == place.lblock {
                v.count += place.count;
                v.size = place.size;
                return;
            }
        }
        if self.map.len() < self.limit {
            self.map.insert(p, place);
        }
    }

    /// What to send of blocks `[s, e)` of inode `ino` (size `size`, every
    /// block of the range mapped by `extents`, sorted): where blocks were
    /// sent before, whole blocks of the source inside its size, a clone;
    /// the rest data, remembered. Adjacent data pieces are joined.
    pub(super) fn pieces(
        &mut self,
        ino: u64,
        size: u64,
        bs: u64,
        extents: &[Extent],
        s: u64,
        e: u64,
    ) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        let data = |out: &mut Vec<Piece>, a: u64, b: u64| match out.last_mut() {
            Some(Piece::Data(_, end)) if *end == a => *end = b,
            _ => out.push(Piece::Data(a, b)),
        };
        for x in overlapping(extents, s, e) {
            let (ls, le) = (x.lblock.max(s), (x.lblock + x.count).min(e));
            if ls >= le {
                continue;
            }
            let p = x.pblock + (ls - x.lblock);
            // Logical blocks [at, ..) of `ino` not yet decided.
            let mut at = ls;
            let mut fresh = Vec::new();
            for (from, place) in self.sent_of(p, le - ls) {
                let l = ls + (from - p);
                if l > at {
                    data(&mut out, at, l);
                    fresh.push((at, l));
                }
                // Bytes of this file the blocks hold, and whether the
                // source has them all (its last block may be cut short).
                let offset = l * bs;
                let mut len = (place.count * bs).min(size.saturating_sub(offset));
                let src_offset = place.lblock * bs;
                if src_offset + len > place.size {
                    len = place.size.saturating_sub(src_offset) / bs * bs;
                }
                let cloned = len.div_ceil(bs);
                // A clone continuing the last one in both files joins it
                // (extents of summed files hold 64 blocks at most: one
                // record each would cost a clone of 100 MiB 400 records).
                match out.last_mut() {
                    Some(Piece::Clone {
                        offset: o,
                        len: n,
                        src: f,
                        src_offset: so,
                    }) if len > 0 && *f == place.ino && *o + *n == offset && *so + *n == src_offset => {
                        *n += len
                    }
                    _ if len > 0 => out.push(Piece::Clone {
                        offset,
                        len,
                        src: place.ino,
                        src_offset,
                    }),
                    _ => {}
                }
                // What the source cannot give goes as data (not remembered:
                // those blocks are remembered at their first place).
                if cloned < place.count {
                    data(&mut out, l + cloned, l + place.count);
                }
                at = l + place.count;
            }
            if at < le {
                data(&mut out, at, le);
                fresh.push((at, le));
            }
            for (a, b) in fresh {
                let place = Place {
                    ino,
                    lblock: a,
                    count: b - a,
                    size,
                };
                self.remember(x.pblock + (a - x.lblock), place);
            }
        }
        out
    }
}

/// The extents of sorted, disjoint `list` that overlap blocks `[s, e)`.
fn overlapping(list: &[Extent], s: u64, e: u64) -> &[Extent] {
    let from = list.partition_point(|x| x.lblock + x.count <= s);
    let to = list.partition_point(|x| x.lblock < e);
    list.get(from..to.max(from)).unwrap_or_default()
}

/// The block ranges of `[s, e)` that no extent of `list` maps.
pub(super) fn gaps(list: &[Extent], s: u64, e: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = s;
    for x in overlapping(list, s, e) {
        if x.lblock > at {
            out.push((at, x.lblock.min(e)));
        }
        at = at.max(x.lblock + x.count);
    }
    if at < e {
        out.push((at, e));
    }
    out
}

/// The block ranges `now` maps that `before` does not map to the same
/// addresses (only its blocks below `kept` count), in order, merged.
pub(super) fn changed_runs(now: &[Extent], before: &[Extent], kept: u64) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut push = |s: u64, e: u64| match runs.last_mut() {
        Some(r) if r.1 == s => r.1 = e,
        _ => runs.push((s, e)),
    };
    for n in now {
        let (s, e) = (n.lblock, n.lblock + n.count);
        // Where the base maps the same blocks to the same addresses.
        let mut at = s;
        for o in overlapping(before, s, e.min(kept)) {
            let same_place = n.pblock.wrapping_sub(n.lblock) == o.pblock.wrapping_sub(o.lblock);
            if !same_place {
                continue;
            }
            let (os, oe) = (o.lblock.max(s), (o.lblock + o.count).min(e).min(kept));
            if os >= oe {
                continue;
            }
            if os > at {
                push(at, os);
            }
            at = at.max(oe);
        }
        if at < e {
            push(at, e);
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(lblock: u64, pblock: u64, count: u64) -> Extent {
        Extent {
            lblock,
            pblock,
            count,
            birth: 1,
            unwritten: false,
            sums: Vec::new(),
            table_sums: false,
        }
    }

    #[test]
    fn only_blocks_at_new_addresses_are_changed() {
        // One block rewritten in the middle of a 10-block extent.
        let before = [x(0, 100, 10)];
        let now = [x(0, 100, 4), x(4, 500, 1), x(5, 105, 5)];
        assert_eq!(changed_runs(&now, &before, 10), vec![(4, 5)]);
        // Blocks past what the receiver kept are sent again.
        assert_eq!(changed_runs(&now, &before, 6), vec![(4, 5), (6, 10)]);
        // A new file: everything.
        assert_eq!(changed_runs(&now, &[], 0), vec![(0, 10)]);
    }

    #[test]
    fn gaps_are_the_unmapped_blocks() {
        let list = [x(2, 100, 2), x(6, 200, 1)];
        assert_eq!(gaps(&list, 0, 10), vec![(0, 2), (4, 6), (7, 10)]);
        assert_eq!(gaps(&list, 2, 4), vec![]);
        assert_eq!(gaps(&list, 3, 7), vec![(4, 6)]);
    }

    #[test]
    fn blocks_sent_before_are_cloned_and_the_rest_is_data() {
        let bs = 4096;
        let mut m = SentBlocks::new(100);
        // Inode 16: 10 blocks at 100.., sent as data and remembered.
        let a = [x(0, 100, 10)];
        assert_eq!(m.pieces(16, 10 * bs, bs, &a, 0, 10), vec![Piece::Data(0, 10)]);
        // Inode 17: blocks 2.. at 104.. (6 of 16's, then 2 of its own).
        let b = [x(2, 104, 8)];
        let size = 10 * bs - 100;
        assert_eq!(
            m.pieces(17, size, bs, &b, 2, 10),
            vec![
                Piece::Clone {
                    offset: 2 * bs,
                    len: 6 * bs,
                    src: 16,
                    src_offset: 4 * bs,
                },
                Piece::Data(8, 10),
            ]
        );
        // Inode 18 maps one of 17's own blocks and one of 16's: two
        // sources; its last block is cut by its size.
        let c = [x(0, 110, 1), x(1, 100, 1)];
        assert_eq!(
            m.pieces(18, bs + 10, bs, &c, 0, 2),
            vec![
                Piece::Clone {
                    offset: 0,
                    len: bs,
                    src: 17,
                    src_offset: 8 * bs,
                },
                Piece::Clone {
                    offset: bs,
                    len: 10,
                    src: 16,
                    src_offset: 0,
                },
            ]
        );
        // 17's last block (111, its block 9) holds bytes only to its
        // size: a file reading the whole block gets it as data.
        let d = [x(0, 111, 1)];
        assert_eq!(m.pieces(19, bs, bs, &d, 0, 1), vec![Piece::Data(0, 1)]);
        // ... one reading only what 17 has gets a clone.
        assert_eq!(
            m.pieces(20, bs - 100, bs, &d, 0, 1),
            vec![Piece::Clone {
                offset: 0,
                len: bs - 100,
                src: 17,
                src_offset: 9 * bs,
            }]
        );
    }

    #[test]
    fn clones_continuing_each_other_are_one_piece() {
        let bs = 4096;
        let mut m = SentBlocks::new(100);
        // Inode 16: three extents, contiguous in the file, not on disk.
        let a = [x(0, 100, 4), x(4, 300, 4), x(8, 200, 4)];
        assert_eq!(m.pieces(16, 12 * bs, bs, &a, 0, 12), vec![Piece::Data(0, 12)]);
        // Inode 17 maps them alike: one clone of all 12 blocks.
        assert_eq!(
            m.pieces(17, 12 * bs, bs, &a, 0, 12),
            vec![Piece::Clone {
                offset: 0,
                len: 12 * bs,
                src: 16,
                src_offset: 0,
            }]
        );
        // Inode 18 maps them backwards: three clones.
        let b = [x(0, 200, 4), x(4, 300, 4), x(8, 100, 4)];
        let want = |offset, src_offset| Piece::Clone {
            offset,
            len: 4 * bs,
            src: 16,
            src_offset,
        };
        assert_eq!(
            m.pieces(18, 12 * bs, bs, &b, 0, 12),
            vec![want(0, 8 * bs), want(4 * bs, 4 * bs), want(8 * bs, 0)]
        );
    }

    #[test]
    fn a_full_map_remembers_no_more_and_sends_data() {
        let bs = 4096;
        let mut m = SentBlocks::new(1);
        m.pieces(16, bs, bs, &[x(0, 100, 1)], 0, 1);
        // Contiguous on disk and in the file: joined, no new entry.
        m.pieces(16, 2 * bs, bs, &[x(1, 101, 1)], 1, 2);
        m.pieces(17, bs, bs, &[x(0, 500, 1)], 0, 1);
        assert_eq!(m.map.len(), 1);
        assert_eq!(
            m.pieces(18, 2 * bs, bs, &[x(0, 100, 2)], 0, 2),
            vec![Piece::Clone {
                offset: 0,
                len: 2 * bs,
                src: 16,
                src_offset: 0,
            }]
        );
        assert_eq!(
            m.pieces(19, bs, bs, &[x(0, 500, 1)], 0, 1),
            vec![Piece::Data(0, 1)]
        );
    }
}
