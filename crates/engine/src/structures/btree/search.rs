//! Read-only descents of the btree: the entry at a key, the next entry at
//! or after a key, the last entry at or before one, each with the address
//! of the leaf that holds it. Loads nodes through `tree::load`.

use super::node::{Leaf, Node};
use super::tree::{child_level, child_mut, load, Ctx, Found};
use crate::error::Result;

pub(super) fn get_rec(node: &mut Node, cx: &Ctx, key: u64) -> Result<Option<(Vec<u8>, u64)>> {
    match node {
        Node::Leaf(l) => Ok(l
            .entries
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .and_then(|i| l.entries.get(i))
            .map(|(_, v)| (v.clone(), l.addr))),
        Node::Branch(b) => {
            let i = b.child_index(key);
            let level = child_level(b);
            get_rec(load(&mut child_mut(b, i)?.slot, cx, level)?, cx, key)
        }
    }
}

fn found(l: &Leaf, i: usize) -> Option<Found> {
    l.entries.get(i).map(|(k, v)| Found {
        key: *k,
        value: v.clone(),
        leaf: l.addr,
    })
}

pub(super) fn next_rec(node: &mut Node, cx: &Ctx, from: u64) -> Result<Option<Found>> {
    match node {
        Node::Leaf(l) => Ok(found(l, l.lower_bound(from))),
        Node::Branch(b) => {
            let level = child_level(b);
            let first = b.child_index(from);
            for c in b.children.iter_mut().skip(first) {
                let found = next_rec(load(&mut c.slot, cx, level)?, cx, from)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        }
    }
}

pub(super) fn prev_rec(node: &mut Node, cx: &Ctx, at: u64) -> Result<Option<Found>> {
    match node {
        Node::Leaf(l) => {
            let i = l.entries.partition_point(|(k, _)| *k <= at);
            Ok(i.checked_sub(1).and_then(|i| found(l, i)))
        }
        Node::Branch(b) => {
            let level = child_level(b);
            let last = b.child_index(at).saturating_add(1);
            for c in b.children.iter_mut().take(last).rev() {
                let found = prev_rec(load(&mut c.slot, cx, level)?, cx, at)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        }
    }
}
