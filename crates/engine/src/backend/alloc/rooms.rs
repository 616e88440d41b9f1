//! Backend layer, allocator: the rooms kept for data streams. A file
//! written at its end over several deltas keeps the free run after it
//! (its room, up to [`ROOM`] blocks) for its next delta's data; metadata
//! and other files' data start outside the rooms while they can, so a
//! stream lies in one run rather than one per delta with the delta's
//! leaves and log blocks between (ARCHITECTURE.md, "Streams keep the room
//! after them").
//!
//! Calls the allocator's search (`mod.rs`).

use super::Allocator;
use crate::error::Result;

/// The most blocks a stream's room holds (128 MiB of 4 KiB blocks; at most
/// a sixteenth of the volume): a stream crosses metadata at most once per
/// this many blocks.
pub const ROOM: u64 = 1 << 15;
/// The most rooms kept (the newest).
pub(super) const MAX_ROOMS: usize = 16;
/// A room lasts this many deltas after its stream's last data.
pub(super) const ROOM_DELTAS: u64 = 8;

impl Allocator {
    /// Allocate one block of metadata (a leaf, a branch, a log or bitmap
    /// block) near `goal`, outside the rooms kept for data streams.
    pub fn alloc_meta(&mut self, goal: u64, logged: bool) -> Result<u64> {
        Ok(self.alloc_avoiding(goal, 1, logged, None, false)?.0)
    }

    /// Allocate data: as [`Allocator::alloc`], but outside the rooms kept
    /// for data streams (`keep_room`), except the one starting at `own`
    /// (a stream's next data), while any run of the size asked for is free
    /// elsewhere: so a file written over several deltas lies in one run,
    /// not one per delta with the delta's leaves, log blocks and other
    /// files between. Rooms kept in this delta do not count here, nor, for
    /// a new file's data, rooms whose streams write nothing in it (every
    /// room keeps metadata out): a stream may be done, and a file written
    /// after it then follows it, where a file placed after its room would
    /// leave the room as a gap between them.
    pub fn alloc_outside_rooms(
        &mut self,
        goal: u64,
        want: u64,
        logged: bool,
        own: Option<u64>,
    ) -> Result<(u64, u64)> {
        self.alloc_avoiding(goal, want, logged, own, true)
    }

    /// [`Allocator::alloc_outside_rooms`] for data, else for metadata
    /// (every room counts).
    pub(super) fn alloc_avoiding(
        &mut self,
        goal: u64,
        want: u64,
        logged: bool,
        own: Option<u64>,
        data: bool,
    ) -> Result<(u64, u64)> {
        if self.rooms.is_empty() || self.available == 0 || want == 0 {
            return self.alloc(goal, want, logged);
        }
        let goal = if goal >= self.limit { 2 } else { goal.max(2) };
        let size = want.min(self.bits_per_block) as u32;
        let Some((first, _)) = self.search(goal, size) else {
            return self.alloc(goal, want, logged);
        };
        let mut at = first;
        // Each room skipped moves past it; a search that comes back to the
        // first run (the volume wrapped) gives up on them.
        for _ in 0..=self.rooms.len() {
            let Some(past) = self.room_end(at, own, data) else {
                return self.alloc(at, want, logged);
            };
            match self.search(if past >= self.limit { 2 } else { past }, size) {
                Some((next, _)) if next != first => at = next,
                _ => break,
            }
        }
        self.alloc(first, want, logged)
    }

    /// Keep the free run from `end` (up to `ROOM` blocks) for the data of
    /// the stream that ends there, for `ROOM_DELTAS` deltas.
    pub fn keep_room(&mut self, end: u64) {
        self.rooms.retain(|r| r.0 != end);
        if self.rooms.len() == MAX_ROOMS {
            self.rooms.remove(0);
        }
        self.rooms.push((end, self.room_clock));
        let rooms = &self.rooms;
        self.writing
            .retain(|e| *e != end && rooms.iter().any(|r| r.0 == *e));
        self.writing.push(end);
    }

    /// A delta begins: rooms no stream renewed for `ROOM_DELTAS` deltas
    /// go, and so do rooms data has filled.
    pub fn age_rooms(&mut self) {
        self.room_clock += 1;
        let oldest = self.room_clock.saturating_sub(ROOM_DELTAS);
        let mut rooms = std::mem::take(&mut self.rooms);
        rooms.retain(|&(end, at)| at >= oldest && self.run_from(end, 1) == 1);
        self.rooms = rooms;
    }

    /// The delta being committed writes data after the blocks `ends`
    /// (its files' goals): the rooms starting there keep new files' data
    /// out in it; the others keep out only metadata and the data of files
    /// written before, as their streams may be done (a file written after
    /// one in the next delta then follows it, instead of leaving its room
    /// as a gap).
    pub fn streams_writing(&mut self, mut ends: Vec<u64>) {
        // Only room ends matter: at most MAX_ROOMS, so the check each
        // allocation makes stays short however many files the delta has.
        ends.retain(|e| self.rooms.iter().any(|r| r.0 == *e));
        self.writing = ends;
    }

    /// Whether `room` keeps out the data of another file (`new`: one with
    /// no data of this mount before it): not if kept in this delta, nor,
    /// for a new file, if its stream writes nothing in this delta.
    fn keeps_out(&self, room: &(u64, u64), new: bool) -> bool {
        room.1 != self.room_clock && (!new || self.writing.contains(&room.0))
    }

    /// If block `b` (allocatable) lies in a stream's room (but the one at
    /// `own`), the block past that room's free run (at most `ROOM` from
    /// the stream's end).
    fn room_end(&self, b: u64, own: Option<u64>, data: bool) -> Option<u64> {
        let room = ROOM.min(self.blocks / 16);
        self.rooms
            .iter()
            .filter(|r| Some(r.0) != own && (!data || self.keeps_out(r, own.is_none())))
            .find_map(|&(end, _)| {
                let run = (b >= end && b - end < room).then(|| self.run_from(end, room))?;
                (b < end + run).then_some(end + run)
            })
    }
}
