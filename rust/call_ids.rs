//! The call-id memory (the reference's `tripwire/_call_ids.py`): the verdict given to each
//! recent call id, so that a retried delivery (the same id *and* the same call, not yet
//! answered) gets its first verdict. Bounded by [`CALL_ID_MEMORY`]; an open-addressing table
//! with its own hash, sized for that bound. Moved out of `guard.rs` as it was.

use std::collections::VecDeque;

use smallvec::SmallVec;

use crate::key::Key;

/// How many recent call ids a guard remembers, so a retried delivery gets its first answer.
pub const CALL_ID_MEMORY: usize = 128;

/// The call-id memory's hash of an id: 16 bytes at a time, as two words folded together by a
/// 64x64->128 multiply (as foldhash and wyhash do), so every input bit reaches the top bits
/// the table indexes by. Two words a multiply keeps the chain of dependent multiplies short:
/// a 29-byte OpenAI id is two, where a multiply a word made it five, and hashing was a third
/// of restoring 128 such ids. It is not keyed: ids come from the model, so someone could
/// choose ids that collide. That costs little here: the memory holds at most
/// [`CALL_ID_MEMORY`] ids, so a lookup among ids that all collide compares at most 128 of
/// them (about a microsecond), and a collision is only ever slower, never wrong (the table
/// compares the ids themselves).
#[inline]
pub(crate) fn id_hash(id: &[u8]) -> u64 {
    const SEED: u64 = 0x243f_6a88_85a3_08d3;
    const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
    let n = id.len();
    // The length in the seed tells "a" from "a\0" (short ids are zero-padded).
    let mut state = SEED ^ n as u64;
    let (first, last) = match n {
        0 => (0, 0),
        1..=8 => (tail_word(id), 0),
        9..=16 => (word_at(id, 0), word_at(id, n - 8)),
        _ => {
            let mut at = 0;
            while at + 16 < n {
                state = fold(word_at(id, at) ^ state, word_at(id, at + 8) ^ MIX);
                at += 16;
            }
            (word_at(id, n - 16), word_at(id, n - 8))
        }
    };
    fold(first ^ state, last ^ MIX)
}

#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The 8 bytes of `bytes` from `at`, little-endian.
#[inline]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(array)
}

/// The 1 to 8 bytes of `tail` as a little-endian word, zero-padded. Read as two
/// overlapping loads (or three bytes), not copied into a zeroed array: that copy is a call
/// to `memcpy` whose stores the next load waits on (a stalled store forward), which was
/// the costliest part of hashing a restored id.
#[inline]
fn tail_word(tail: &[u8]) -> u64 {
    let n = tail.len();
    if n >= 4 {
        let word = |at: usize| {
            let mut array = [0u8; 4];
            array.copy_from_slice(&tail[at..at + 4]);
            u64::from(u32::from_le_bytes(array))
        };
        // The overlapping bytes are the same in both, so OR puts each in its place.
        word(0) | word(n - 4) << (8 * (n - 4))
    } else {
        let byte = |at: usize| u64::from(tail[at]) << (8 * at);
        byte(0) | byte(n / 2) | byte(n - 1)
    }
}

/// A call id as the call-id memory keeps it: inline up to 32 bytes (OpenAI's `call_...`
/// and Anthropic's `toolu_...` ids are about 30), so remembering one, or restoring 128 of
/// them, allocates nothing per id; the map and the order each hold a copy.
pub type CallId = SmallVec<[u8; 32]>;

/// Slots of the call-id memory's table: a power of two at least twice [`CALL_ID_MEMORY`],
/// so it is never more than half full and a probe stays short.
const ID_SLOTS: usize = 256;
const _: () = assert!(ID_SLOTS.is_power_of_two() && ID_SLOTS >= 2 * CALL_ID_MEMORY);
const _: () = assert!(CALL_ID_MEMORY < u16::MAX as usize);

/// A remembered call id: its bytes, its hash (so the table's probes and removals never hash
/// again) and what was remembered.
pub(crate) struct IdRecord<V> {
    pub(crate) id: CallId,
    hash: u64,
    pub(crate) remembered: Remembered<V>,
}

/// The call-id memory (the reference's ordered dict of `_Remembered`), sized for its bound:
/// at most [`CALL_ID_MEMORY`] records in a vector, an open-addressing table (linear
/// probing) of their indices, and their order as indices. A restore of 128 ids is then 128
/// pushes and 128 two-byte table writes, where a `HashMap` and a `VecDeque` of ids moved
/// each id and its verdict twice. Records never move: the oldest's index is reused by the
/// id that evicts it, and an id remembered again is updated in place and moved to the back
/// of the order only.
pub(crate) struct CallIds<V> {
    records: Vec<IdRecord<V>>,
    /// Index + 1 of a record, 0 for a free slot; empty until the first id.
    table: Vec<u16>,
    /// Indices of `records`, oldest first.
    order: VecDeque<u16>,
}

impl<V> Default for CallIds<V> {
    fn default() -> Self {
        CallIds {
            records: Vec::new(),
            table: Vec::new(),
            order: VecDeque::new(),
        }
    }
}

/// Where an id is in the table, or the free slot where it would go.
enum Probe {
    Found(usize),
    Vacant(usize),
}

impl<V> CallIds<V> {
    /// Room for `n` ids, before a restore pushes them.
    pub(crate) fn with_capacity(n: usize) -> Self {
        CallIds {
            records: Vec::with_capacity(n),
            table: vec![0; ID_SLOTS],
            order: VecDeque::with_capacity(n),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    #[inline]
    fn home(hash: u64) -> usize {
        // The top bits: the folded multiply mixes every input bit into them.
        (hash >> (64 - ID_SLOTS.trailing_zeros())) as usize
    }

    #[inline]
    fn probe(&self, id: &[u8], hash: u64) -> Probe {
        let mut at = Self::home(hash);
        loop {
            match self.table[at] {
                0 => return Probe::Vacant(at),
                slot => {
                    let record = &self.records[usize::from(slot) - 1];
                    if record.hash == hash && *record.id == *id {
                        return Probe::Found(at);
                    }
                }
            }
            at = (at + 1) & (ID_SLOTS - 1);
        }
    }

    fn index_of(&self, id: &[u8]) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        match self.probe(id, id_hash(id)) {
            Probe::Found(at) => Some(usize::from(self.table[at]) - 1),
            Probe::Vacant(_) => None,
        }
    }

    pub(crate) fn get(&self, id: &[u8]) -> Option<&Remembered<V>> {
        self.index_of(id).map(|i| &self.records[i].remembered)
    }

    pub(crate) fn get_mut(&mut self, id: &[u8]) -> Option<&mut Remembered<V>> {
        self.index_of(id).map(|i| &mut self.records[i].remembered)
    }

    /// The records, oldest first.
    pub(crate) fn in_order(&self) -> impl Iterator<Item = &IdRecord<V>> + '_ {
        self.order.iter().map(|&i| &self.records[usize::from(i)])
    }

    /// Remembers an id at the back of the order; hands back the verdict it replaces (the
    /// same id's, or the oldest id's when the memory is full).
    pub(crate) fn remember(&mut self, id: &[u8], remembered: Remembered<V>) -> Option<V> {
        if self.table.is_empty() {
            self.table = vec![0; ID_SLOTS];
        }
        let hash = id_hash(id);
        let at = match self.probe(id, hash) {
            Probe::Found(at) => {
                // Re-inserted at the back, as the reference's ordered dict moves it there.
                let index = self.table[at] - 1;
                let old =
                    std::mem::replace(&mut self.records[usize::from(index)].remembered, remembered);
                self.order.retain(|&i| i != index);
                self.order.push_back(index);
                return Some(old.verdict);
            }
            Probe::Vacant(at) => at,
        };
        let record = IdRecord {
            id: CallId::from_slice(id),
            hash,
            remembered,
        };
        if self.records.len() < CALL_ID_MEMORY {
            let index = self.records.len() as u16;
            self.table[at] = index + 1;
            self.records.push(record);
            self.order.push_back(index);
            return None;
        }
        // Full: the oldest goes, and the new id takes its record.
        let oldest = self.order.pop_front()?;
        self.unlink(oldest);
        let Probe::Vacant(at) = self.probe(id, hash) else {
            unreachable!("the id was not in the table before a removal");
        };
        self.table[at] = oldest + 1;
        self.order.push_back(oldest);
        let old = std::mem::replace(&mut self.records[usize::from(oldest)], record);
        Some(old.remembered.verdict)
    }

    /// Takes a record's index out of the table, shifting back the entries after it that
    /// would no longer be found (linear probing's deletion: no tombstones to skip later).
    fn unlink(&mut self, index: u16) {
        let mask = ID_SLOTS - 1;
        let mut hole = Self::home(self.records[usize::from(index)].hash);
        while self.table[hole] != index + 1 {
            hole = (hole + 1) & mask;
        }
        let mut at = hole;
        loop {
            at = (at + 1) & mask;
            let slot = self.table[at];
            if slot == 0 {
                break;
            }
            let home = Self::home(self.records[usize::from(slot) - 1].hash);
            // The entry stays if its home is cyclically within (hole, at].
            let stays = if hole <= at {
                hole < home && home <= at
            } else {
                hole < home || home <= at
            };
            if !stays {
                self.table[hole] = slot;
                hole = at;
            }
        }
        self.table[hole] = 0;
    }

    /// Appends an id read from a snapshot (capacity made by [`CallIds::with_capacity`]);
    /// false if it is there already.
    pub(crate) fn push_read(&mut self, id: &[u8], remembered: Remembered<V>) -> bool {
        debug_assert!(self.records.len() < CALL_ID_MEMORY && !self.table.is_empty());
        let hash = id_hash(id);
        let Probe::Vacant(at) = self.probe(id, hash) else {
            return false;
        };
        let index = self.records.len() as u16;
        self.table[at] = index + 1;
        self.records.push(IdRecord {
            id: CallId::new(),
            hash,
            remembered,
        });
        // Copied where it stays: a `CallId` made first and moved in is a copy on the stack
        // that the move then reads back before the copy's stores are done (a stalled load).
        if let Some(record) = self.records.last_mut() {
            record.id.extend_from_slice(id);
        }
        self.order.push_back(index);
        true
    }

    pub(crate) fn into_verdicts(self) -> impl Iterator<Item = V> {
        self.records.into_iter().map(|r| r.remembered.verdict)
    }
}

/// The verdict given to a call id, the key and step of the call it was given to, and whether
/// that call's result has been observed since: a retried delivery is the same id *and* the
/// same call, still unanswered (providers reuse ids for other calls, and for the same call
/// asked again after its answer: both are new calls).
pub(crate) struct Remembered<V> {
    pub(crate) key: Key,
    pub(crate) step: u64,
    pub(crate) verdict: V,
    pub(crate) answered: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_id_memory_acts_as_an_ordered_map() {
        // Against the ordered map it stands for, over ids that collide in the table often
        // (few distinct ids, many evictions, re-insertions that move an id to the back).
        let mut rng = crate::test_rng::xorshift(0xca11);
        let mut ids = CallIds::<u64>::default();
        let mut model: VecDeque<(Vec<u8>, u64)> = VecDeque::new();
        for n in 0..40_000u64 {
            let id = format!("call_{}", rng() % 300).into_bytes();
            let remembered = Remembered {
                key: n,
                step: n,
                verdict: n,
                answered: false,
            };
            let got = ids.remember(&id, remembered);
            let expected = match model.iter().position(|(i, _)| *i == id) {
                Some(at) => model.remove(at).map(|(_, v)| v),
                None if model.len() == CALL_ID_MEMORY => model.pop_front().map(|(_, v)| v),
                None => None,
            };
            model.push_back((id, n));
            assert_eq!(got, expected);
            if n % 97 == 0 {
                let order: Vec<(Vec<u8>, u64)> = ids
                    .in_order()
                    .map(|r| (r.id.to_vec(), r.remembered.verdict))
                    .collect();
                assert!(order.iter().eq(model.iter()));
                for k in 0..300 {
                    let id = format!("call_{k}").into_bytes();
                    let expected = model.iter().find(|(i, _)| *i == id).map(|(_, v)| *v);
                    assert_eq!(ids.get(&id).map(|r| r.verdict), expected);
                }
            }
        }
    }

    #[test]
    fn a_tail_word_is_the_zero_padded_bytes() {
        for n in 1..=8 {
            let tail: Vec<u8> = (1..=n as u8).map(|b| b * 17).collect();
            let mut array = [0u8; 8];
            array[..n].copy_from_slice(&tail);
            assert_eq!(tail_word(&tail), u64::from_le_bytes(array), "{n}");
        }
    }

    #[test]
    fn call_id_hashes_spread() {
        // Ids that differ in one byte anywhere (in a word, a tail, a chunk before the last
        // 16 bytes) differ in the top bits the table indexes by.
        let mut seen = std::collections::HashSet::new();
        for len in [1usize, 7, 8, 9, 16, 17, 29, 32, 40, 64] {
            for at in 0..len {
                for byte in [b'0', b'1', b'z'] {
                    let mut id = vec![b'a'; len];
                    id[at] = byte;
                    seen.insert((id.clone(), id_hash(&id) >> 52));
                }
            }
        }
        let distinct: std::collections::HashSet<_> = seen.iter().map(|(_, h)| *h).collect();
        assert!(
            distinct.len() * 10 >= seen.len() * 8,
            "{} of {}",
            distinct.len(),
            seen.len()
        );
        assert_ne!(id_hash(b"a"), id_hash(b"a\0"));
        assert_ne!(id_hash(b""), id_hash(b"\0"));
    }
}
