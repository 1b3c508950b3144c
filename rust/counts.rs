//! Counts by call, bounded (polls and transient retries of a run). Moved out of `guard.rs`
//! as it was.

use std::collections::{HashMap, VecDeque};

use crate::key::Key;

/// How many distinct calls' poll counts, and transient-retry counts, a run remembers (each):
/// past it, the least recently counted is forgotten (the reference's `COUNTED_CALLS`).
pub const COUNTED_CALLS: usize = 256;

/// Counts by call (polls, transient retries), in the order they were last counted: at most
/// [`COUNTED_CALLS`], the least recently counted forgotten first, as the reference's
/// `Guard._count` does (snapshots keep the order, so a restored guard forgets the same one).
#[derive(Default)]
pub struct Counts {
    counts: HashMap<Key, u32>,
    /// Oldest first; the call being counted is nearly always the newest, so it is looked
    /// for from the back.
    order: VecDeque<Key>,
}

impl Counts {
    pub fn get(&self, key: Key) -> u32 {
        self.counts.get(&key).copied().unwrap_or(0)
    }

    /// Sets a call's count, as the most recently counted.
    pub fn set(&mut self, key: Key, count: u32) {
        if self.counts.insert(key, count).is_some() {
            if let Some(at) = self.order.iter().rposition(|k| *k == key) {
                self.order.remove(at);
            }
        }
        self.order.push_back(key);
        if self.order.len() > COUNTED_CALLS {
            if let Some(old) = self.order.pop_front() {
                self.counts.remove(&old);
            }
        }
    }

    /// Adds a call read from a snapshot as the most recent; false if it is there already.
    pub fn push_read(&mut self, key: Key, count: u32) -> bool {
        if self.counts.insert(key, count).is_some() {
            return false;
        }
        self.order.push_back(key);
        true
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The counts, the least recently counted first.
    pub fn in_order(&self) -> impl Iterator<Item = (Key, u32)> + '_ {
        self.order.iter().map(|k| (*k, self.get(*k)))
    }
}
