//! Crash states from a recorded device op log.
//!
//! The log is cut into flush epochs: the writes between two flushes (and a
//! last, usually empty, epoch after the final flush). A crash during epoch
//! `e` leaves the durable prefix (base image + every write of the epochs
//! before `e`) plus some of `e`'s writes:
//!
//! * every subset of them when there are at most [`EXHAUSTIVE`] writes;
//!   otherwise every prefix in issue order plus [`RANDOM_SUBSETS`] random
//!   subsets (seeded);
//! * torn writes: one write of the epoch lands only a prefix of its 512-byte
//!   sectors (the rest of the block keeps its old content), with the other
//!   writes of the epoch landing or not — exhaustively when that makes at
//!   most [`TORN_MAX`] images, else [`TORN_MAX`] random ones, always
//!   including "the prefix up to the torn write, in issue order".
//!
//! The empty subset of the last epoch is the image after all writes (no
//! crash). Identical images are kept once: an image's hash is the wrapping
//! sum over blocks of a 128-bit hash of (address, contents), updated
//! incrementally, so deduplication never hashes a whole image.
//!
//! When there are more distinct states than the budget, whole-subset states
//! ("tier 0") get two thirds of it, torn and random ones the rest, each drawn
//! at random (seeded); unused share goes to the other tier.

use super::snapshot::hash128;
use super::Rng;
use std::collections::{BTreeSet, HashMap};
use tux3::device::RecordedOp;

/// Epochs of at most this many writes get every subset.
pub const EXHAUSTIVE: usize = 8;
/// Random subsets of a larger epoch.
pub const RANDOM_SUBSETS: usize = 48;
/// Torn-write states per epoch, at most.
pub const TORN_MAX: usize = 160;
/// Sector size of torn writes.
pub const SECTOR: usize = 512;

/// The writes between two flushes.
#[derive(Debug, Clone)]
pub struct Epoch {
    /// Log index of the epoch's first op, and of its closing flush (or the
    /// log length for the last epoch).
    pub start: usize,
    pub end: usize,
    /// Log indices of its writes, in issue order.
    pub writes: Vec<usize>,
    /// Log indices of its discards (`RecordedOp::Discard`), in issue order:
    /// not applied to crash images, but a crash state's volume must refer
    /// to none of their blocks (`discarded`).
    pub discards: Vec<usize>,
}

/// Blocks whose last change before the end of `epoch` is a discard, for a
/// crash in `epoch` that landed the writes of `state`: `before` holds
/// those of the durable prefix (every epoch before). Each of the epoch's
/// discards counts as issued (the crash may follow it), each of its
/// writes only if it landed whole (a torn write leaves the block neither
/// old nor new, so nothing may refer to it either way; but see
/// [`discarded_in`]).
pub fn discarded(before: &BTreeSet<u64>, log: &[RecordedOp], epoch: &Epoch, state: &State) -> BTreeSet<u64> {
    let mut out = before.clone();
    if out.is_empty() && epoch.discards.is_empty() {
        return out;
    }
    let landed: HashMap<usize, bool> = epoch
        .writes
        .iter()
        .enumerate()
        .map(|(k, &i)| (i, state.has(k)))
        .collect();
    for (i, op) in log.iter().enumerate().take(epoch.end).skip(epoch.start) {
        match op {
            RecordedOp::Write { block, .. } if landed.get(&i) == Some(&true) => {
                out.remove(block);
            }
            RecordedOp::Discard { start, count } => out.extend(*start..start.saturating_add(*count)),
            _ => {}
        }
    }
    out
}

/// [`discarded`], less the block of a torn write that reads back whole in
/// `image` (the crash image, of blocks of `bs` bytes): the sectors that did
/// not land held those bytes already, so the block is the write's as far
/// as anything can tell, and the volume may refer to it. (On a device a
/// discarded block's untouched sectors may read back otherwise; a block
/// written in the crash's epoch is referred to only through a checksum —
/// a log block's own, or a single-flush delta's `BlockSum` — so such a
/// device makes the recovery drop what refers to it instead, which the
/// integrity checks cover.)
pub fn discarded_in(
    before: &BTreeSet<u64>,
    log: &[RecordedOp],
    epoch: &Epoch,
    state: &State,
    image: &[u8],
    bs: usize,
) -> BTreeSet<u64> {
    let mut out = discarded(before, log, epoch, state);
    let torn = state.torn.and_then(|(k, _)| epoch.writes.get(k)).copied();
    if let Some((i, RecordedOp::Write { block, data })) = torn.map(|i| (i, &log[i])) {
        // Not when a discard of the block follows it in the epoch.
        let discarded_after = log[i..epoch.end]
            .iter()
            .any(|op| matches!(op, RecordedOp::Discard { start, count } if (*start..start.saturating_add(*count)).contains(block)));
        let at = usize::try_from(*block).unwrap_or(usize::MAX).saturating_mul(bs);
        if !discarded_after && image.get(at..at.saturating_add(bs)) == Some(&data[..]) {
            out.remove(block);
        }
    }
    out
}

/// Take the ops of a durable epoch into `set`: discarded blocks in,
/// written ones out.
pub fn note_discards(set: &mut BTreeSet<u64>, log: &[RecordedOp], epoch: &Epoch) {
    if set.is_empty() && epoch.discards.is_empty() {
        return;
    }
    for op in log.iter().take(epoch.end).skip(epoch.start) {
        match op {
            RecordedOp::Write { block, .. } => {
                set.remove(block);
            }
            RecordedOp::Discard { start, count } => set.extend(*start..start.saturating_add(*count)),
            RecordedOp::Flush => {}
        }
    }
}

/// Cut a log into flush epochs; the last one follows the final flush.
pub fn epochs(log: &[RecordedOp]) -> Vec<Epoch> {
    let mut out = Vec::new();
    let epoch = |start| Epoch {
        start,
        end: 0,
        writes: Vec::new(),
        discards: Vec::new(),
    };
    let mut cur = epoch(0);
    for (i, op) in log.iter().enumerate() {
        match op {
            RecordedOp::Write { .. } => cur.writes.push(i),
            RecordedOp::Discard { .. } => cur.discards.push(i),
            RecordedOp::Flush => {
                cur.end = i;
                out.push(std::mem::replace(&mut cur, epoch(i + 1)));
            }
        }
    }
    cur.end = log.len();
    out.push(cur);
    out
}

/// One crash state: which writes of its epoch landed, and which one (if
/// any) landed torn.
#[derive(Debug, Clone)]
pub struct State {
    pub epoch: usize,
    /// Bitset over the epoch's writes (by position in `Epoch::writes`).
    pub landed: Vec<u64>,
    /// (position in the epoch, sectors that landed) of a torn write; it is
    /// not in `landed`.
    pub torn: Option<(usize, usize)>,
    /// 0: whole writes only; 1: torn or random.
    pub tier: u8,
    /// Always checked, whatever the budget (the image after all writes).
    pub must: bool,
}

impl State {
    pub(crate) fn has(&self, i: usize) -> bool {
        self.landed[i / 64] >> (i % 64) & 1 == 1
    }

    /// Short description, e.g. "epoch 12: 3 of 5 writes landed, #2 torn after 3 sectors".
    pub fn describe(&self, epoch: &Epoch) -> String {
        let n = epoch.writes.len();
        let landed: Vec<usize> = (0..n).filter(|&i| self.has(i)).collect();
        let list = if landed.len() <= 12 {
            format!(" {landed:?}")
        } else {
            String::new()
        };
        let mut s = format!(
            "epoch {}: {} of {n} writes landed{list}",
            self.epoch,
            landed.len()
        );
        if let Some((w, k)) = self.torn {
            s.push_str(&format!(", write #{w} torn after {k} sectors"));
        }
        s
    }
}

fn bits(n: usize, mut f: impl FnMut(usize) -> bool) -> Vec<u64> {
    let mut v = vec![0u64; n.div_ceil(64).max(1)];
    for i in (0..n).filter(|&i| f(i)) {
        v[i / 64] |= 1 << (i % 64);
    }
    v
}

/// Hash of one block at one address.
fn block_hash(addr: u64, data: &[u8]) -> u128 {
    hash128(&(addr, data))
}

/// The image a state describes: `durable` with the state's writes applied
/// in issue order (the torn one as a sector prefix over what was there).
pub fn build(durable: &[u8], log: &[RecordedOp], epoch: &Epoch, st: &State, bs: usize) -> Vec<u8> {
    let mut img = durable.to_vec();
    for (i, &li) in epoch.writes.iter().enumerate() {
        let RecordedOp::Write { block, data } = &log[li] else {
            continue;
        };
        let at = *block as usize * bs;
        if st.has(i) {
            img[at..at + bs].copy_from_slice(data);
        } else if st.torn.map(|t| t.0) == Some(i) {
            let k = st.torn.unwrap_or_default().1 * SECTOR;
            img[at..at + k].copy_from_slice(&data[..k]);
        }
    }
    img
}

/// Whether `img` is the image `st` describes (see [`build`]), compared
/// block by block without building it.
pub fn matches(img: &[u8], durable: &[u8], log: &[RecordedOp], epoch: &Epoch, st: &State, bs: usize) -> bool {
    if img.len() != durable.len() {
        return false;
    }
    let mut touched = std::collections::HashSet::new();
    for (i, &li) in epoch.writes.iter().enumerate() {
        if let RecordedOp::Write { block, .. } = &log[li] {
            if st.has(i) || st.torn.map(|t| t.0) == Some(i) {
                touched.insert(*block as usize);
            }
        }
    }
    let others = img
        .chunks(bs)
        .zip(durable.chunks(bs))
        .enumerate()
        .all(|(b, (x, y))| touched.contains(&b) || x == y);
    others
        && touched.iter().all(|&b| {
            let want = build_block(durable, log, epoch, st, bs, b);
            img[b * bs..(b + 1) * bs] == want[..]
        })
}

/// Block `b` of the image `st` describes.
fn build_block(
    durable: &[u8],
    log: &[RecordedOp],
    epoch: &Epoch,
    st: &State,
    bs: usize,
    b: usize,
) -> Vec<u8> {
    let mut out = durable[b * bs..(b + 1) * bs].to_vec();
    for (i, &li) in epoch.writes.iter().enumerate() {
        let RecordedOp::Write { block, data } = &log[li] else {
            continue;
        };
        if *block as usize != b {
            continue;
        }
        if st.has(i) {
            out.copy_from_slice(data);
        } else if st.torn.map(|t| t.0) == Some(i) {
            let k = st.torn.unwrap_or_default().1 * SECTOR;
            out[..k].copy_from_slice(&data[..k]);
        }
    }
    out
}

/// Every distinct crash state of a log, before the budget is applied.
pub struct Generator<'a> {
    log: &'a [RecordedOp],
    bs: usize,
    /// The durable image of the current epoch and its block hashes.
    image: Vec<u8>,
    hashes: Vec<u128>,
    total: u128,
    seen: HashMap<u128, usize>,
    pub states: Vec<State>,
    /// States generated, duplicates included.
    pub generated: usize,
}

impl<'a> Generator<'a> {
    pub fn new(base: &[u8], log: &'a [RecordedOp], bs: usize) -> Generator<'a> {
        let hashes: Vec<u128> = base
            .chunks(bs)
            .enumerate()
            .map(|(i, b)| block_hash(i as u64, b))
            .collect();
        let total = hashes.iter().fold(0u128, |a, h| a.wrapping_add(*h));
        Generator {
            log,
            bs,
            image: base.to_vec(),
            hashes,
            total,
            seen: HashMap::new(),
            states: Vec::new(),
            generated: 0,
        }
    }

    /// Hash of the image `st` describes, without building it.
    fn hash_of(&self, epoch: &Epoch, st: &State) -> u128 {
        let mut changed: std::collections::HashMap<u64, Vec<u8>> = Default::default();
        for (i, &li) in epoch.writes.iter().enumerate() {
            let RecordedOp::Write { block, data } = &self.log[li] else {
                continue;
            };
            if st.has(i) {
                changed.insert(*block, data.clone());
            } else if st.torn.map(|t| t.0) == Some(i) {
                let k = st.torn.unwrap_or_default().1 * SECTOR;
                let at = *block as usize * self.bs;
                let mut b = changed
                    .get(block)
                    .cloned()
                    .unwrap_or_else(|| self.image[at..at + self.bs].to_vec());
                b[..k].copy_from_slice(&data[..k]);
                changed.insert(*block, b);
            }
        }
        changed.iter().fold(self.total, |t, (addr, data)| {
            t.wrapping_sub(self.hashes[*addr as usize])
                .wrapping_add(block_hash(*addr, data))
        })
    }

    fn offer(&mut self, epoch: &Epoch, st: State) {
        self.generated += 1;
        let h = self.hash_of(epoch, &st);
        if let Some(&i) = self.seen.get(&h) {
            self.states[i].must |= st.must;
        } else {
            self.seen.insert(h, self.states.len());
            self.states.push(st);
        }
    }

    /// Add the states of epoch `index`, then make its writes durable. The
    /// `last` epoch's empty subset (the image after all writes) is a must.
    pub fn epoch(&mut self, index: usize, epoch: &Epoch, last: bool, rng: &mut Rng) {
        let n = epoch.writes.len();
        let sectors = self.bs / SECTOR;
        let mk = |landed: Vec<u64>, torn, tier| State {
            epoch: index,
            landed,
            torn,
            tier,
            must: false,
        };
        self.offer(
            epoch,
            State {
                must: last,
                ..mk(bits(n, |_| false), None, 0)
            },
        );
        if n <= EXHAUSTIVE {
            for mask in 0u64..1 << n {
                self.offer(epoch, mk(vec![mask], None, 0));
            }
        } else {
            for p in 0..=n {
                self.offer(epoch, mk(bits(n, |i| i < p), None, 0));
            }
            for _ in 0..RANDOM_SUBSETS {
                let keep = rng.below(1000);
                let landed = bits(n, |_| rng.below(1000) < keep);
                self.offer(epoch, mk(landed, None, 1));
            }
        }
        if n > 0 && sectors > 1 {
            // In issue order up to a torn write.
            let mut torn = Vec::new();
            for w in 0..n {
                torn.push(mk(
                    bits(n, |i| i < w),
                    Some((w, 1 + rng.below(sectors as u64 - 1) as usize)),
                    1,
                ));
            }
            let all = n
                .saturating_mul(sectors - 1)
                .saturating_mul(1usize << (n - 1).min(20));
            if all <= TORN_MAX {
                for w in 0..n {
                    for k in 1..sectors {
                        for mask in 0u64..1 << (n - 1) {
                            // Spread the other writes' mask around position w.
                            let low = mask & ((1 << w) - 1);
                            let full = low | (mask >> w) << (w + 1);
                            torn.push(mk(vec![full], Some((w, k)), 1));
                        }
                    }
                }
            } else {
                while torn.len() < TORN_MAX {
                    let w = rng.below(n as u64) as usize;
                    let k = 1 + rng.below(sectors as u64 - 1) as usize;
                    let keep = rng.below(1000);
                    torn.push(mk(bits(n, |i| i != w && rng.below(1000) < keep), Some((w, k)), 1));
                }
            }
            for st in torn {
                self.offer(epoch, st);
            }
        }
        // The epoch is flushed: its writes join the durable image.
        for &li in &epoch.writes {
            if let RecordedOp::Write { block, data } = &self.log[li] {
                let at = *block as usize * self.bs;
                self.image[at..at + self.bs].copy_from_slice(data);
                let h = block_hash(*block, data);
                self.total = self
                    .total
                    .wrapping_sub(self.hashes[*block as usize])
                    .wrapping_add(h);
                self.hashes[*block as usize] = h;
            }
        }
    }
}

/// Keep at most `budget` states (see the module comment), in epoch order.
pub fn select(states: Vec<State>, budget: usize, rng: &mut Rng) -> Vec<State> {
    if states.len() <= budget {
        return states;
    }
    let (mut must, rest): (Vec<State>, Vec<State>) = states.into_iter().partition(|s| s.must);
    let budget = budget.saturating_sub(must.len());
    let (mut t0, mut t1): (Vec<State>, Vec<State>) = rest.into_iter().partition(|s| s.tier == 0);
    rng.shuffle(&mut t0);
    rng.shuffle(&mut t1);
    let want0 = (budget * 2 / 3)
        .max(budget.saturating_sub(t1.len()))
        .min(t0.len());
    let want1 = (budget - want0).min(t1.len());
    t0.truncate(want0);
    t1.truncate(want1);
    t0.append(&mut t1);
    t0.append(&mut must);
    t0.sort_by_key(|s| s.epoch);
    t0
}
