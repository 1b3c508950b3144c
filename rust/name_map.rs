//! Maps keyed by tool names, with a hasher cheaper than the default for them. Moved out of
//! `guard.rs` as it was.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a, for maps keyed by short byte strings (tool names) that are looked up on every
/// check: much cheaper than the default SipHash, and these keys come from the harness's own
/// tool list, not from an adversary.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf29ce484222325
        } else {
            self.0
        };
        for &b in bytes {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        self.0 = hash;
    }
}

/// A map keyed by tool names.
pub type NameMap<V> = HashMap<Box<[u8]>, V, BuildHasherDefault<Fnv>>;
