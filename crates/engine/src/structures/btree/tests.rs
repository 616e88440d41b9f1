//! Structures layer: property tests of the btree against a `BTreeMap`,
//! including the log contract: replaying the leaf-map records of each commit
//! on top of the last unified root yields exactly the committed contents.

use super::{Tree, TreeKind};
use crate::device::{Device, MemDevice};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, usize),
    Remove(u64),
    Commit,
    Unify,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u64..3000, 0usize..200).prop_map(|(k, n)| Op::Insert(k, n)),
        5 => (0u64..3000).prop_map(Op::Remove),
        1 => Just(Op::Commit),
        1 => Just(Op::Unify),
    ]
}

struct Harness {
    dev: MemDevice,
    next: u64,
}

impl Harness {
    fn write(&self, out: Vec<(u64, Vec<u8>)>) {
        for (a, b) in out {
            self.dev.write(a, &b).unwrap();
        }
    }
}

fn contents(t: &mut Tree, dev: &dyn Device) -> BTreeMap<u64, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut at = 0;
    while let Some((k, v)) = t.next(dev, at).unwrap() {
        m.insert(k, v);
        at = k + 1;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn replay_equals_committed(ops in proptest::collection::vec(op(), 1..600)) {
        let bs = 1024usize;
        let mut h = Harness { dev: MemDevice::new(bs as u32, 1 << 16), next: 2 };
        let mut t = Tree::new_empty(7, TreeKind::Extents);
        let mut model = BTreeMap::new();
        let mut committed = BTreeMap::new();
        let mut base = t.unified;
        // Per commit: the unmapped seps, then the (sep, address) maps.
        type Logged = (Vec<u64>, Vec<(u64, u64)>);
        let mut log: Vec<Logged> = Vec::new();
        for op in ops {
            match op {
                Op::Insert(k, n) => {
                    let v = vec![(k % 251) as u8; n];
                    t.insert(&h.dev, k, v.clone()).unwrap();
                    model.insert(k, v);
                }
                Op::Remove(k) => {
                    prop_assert_eq!(t.remove(&h.dev, k).unwrap(), model.remove(&k));
                }
                Op::Commit | Op::Unify => {
                    let mut out = Vec::new();
                    let mut maps = Vec::new();
                    let mut next = h.next;
                    let mut alloc = || { next += 1; Ok(next) };
                    t.redirect_leaves(bs, &mut alloc, &mut out, &mut maps).unwrap();
                    let unmaps = std::mem::take(&mut t.unmaps);
                    if matches!(op, Op::Unify) {
                        let mut freed = Vec::new();
                        base = t.redirect_branches(bs, &mut alloc, &mut out, &mut freed).unwrap();
                        log.clear();
                    } else {
                        log.push((unmaps, maps));
                    }
                    h.next = next;
                    h.write(out);
                    committed = model.clone();
                    // Replay from the unified base and compare.
                    let mut r = Tree::open(7, TreeKind::Extents, base);
                    for (unmaps, maps) in &log {
                        for s in unmaps { r.unmap_leaf(&h.dev, *s).unwrap(); }
                        for (s, a) in maps { r.map_leaf(&h.dev, *s, *a).unwrap(); }
                    }
                    prop_assert_eq!(&contents(&mut r, &h.dev), &committed);
                }
            }
            prop_assert_eq!(contents(&mut t, &h.dev), model.clone());
        }
        let _ = committed;
    }
}

#[test]
fn prev_and_range() {
    let dev = MemDevice::new(1024, 4096);
    let mut t = Tree::new_empty(1, TreeKind::Itable);
    for k in (0..2000u64).step_by(2) {
        t.insert(&dev, k, vec![1; 40]).unwrap();
    }
    assert_eq!(t.prev(&dev, 101).unwrap().unwrap().0, 100);
    assert_eq!(t.prev(&dev, 100).unwrap().unwrap().0, 100);
    assert_eq!(t.next(&dev, 101).unwrap().unwrap().0, 102);
    let r = t.range(&dev, 10, 20, 100).unwrap();
    assert_eq!(
        r.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![10, 12, 14, 16, 18]
    );
    assert!(t.depth() >= 1);
}
