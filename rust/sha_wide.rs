//! The keys of many messages at once: SHA-256 in sixteen lanes of AVX-512 registers.
//!
//! SHA-NI compresses one block at a time, ~32 ns a block on the machines we measure on, and
//! two messages interleaved go no faster (its round instruction is throughput-bound, not
//! latency-bound). A batch of keys needs many independent messages hashed, which is what
//! the plain AVX-512 instructions do well: one message per 32-bit lane, sixteen blocks in
//! one pass of 64 rounds (rotates and three-input logic are single instructions), ~18 ns a
//! block. A lane that finishes its message takes the next one, so messages of any mix of
//! lengths keep all sixteen busy.
//!
//! Without AVX-512 the messages are hashed one after the other (`sha2`, SHA-NI where
//! present).

use crate::key::{self, Key, BLOCK, SHA256_INITIAL};

/// Messages written one after the other into one buffer, each followed by its SHA-256
/// padding, so each starts and ends on a block boundary.
#[derive(Default)]
pub struct Padded {
    bytes: Vec<u8>,
    /// Where each message starts, and its length in blocks (padding included).
    messages: Vec<(usize, usize)>,
}

impl Padded {
    /// The bytes this buffer holds room for.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.messages.clear();
    }

    /// Appends the message `write` appends to the buffer, and its padding. A writer that
    /// fails must leave the buffer as it was (the message is then not added).
    pub fn push<E>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<(), E> {
        let start = self.bytes.len();
        write(&mut self.bytes)?;
        let len = self.bytes.len() - start;
        key::push_padding(&mut self.bytes, len);
        self.messages
            .push((start, (self.bytes.len() - start) / BLOCK));
        Ok(())
    }

    /// The keys of the messages, in the order they were pushed.
    pub fn keys(&self) -> Vec<Key> {
        let mut keys = vec![0; self.messages.len()];
        #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
        if self.messages.len() > 1 && has_avx512() {
            // SAFETY: the CPU has AVX-512F and BW; every message lies within `bytes` and is a
            // whole number of blocks long (`push` pads each to a block boundary).
            unsafe { lanes::keys(&self.bytes, &self.messages, &mut keys) };
            return keys;
        }
        self.keys_one_by_one(&mut keys);
        keys
    }

    fn keys_one_by_one(&self, keys: &mut [Key]) {
        for (key, &(start, blocks)) in keys.iter_mut().zip(&self.messages) {
            let mut state = SHA256_INITIAL;
            key::compress(&mut state, &self.bytes[start..start + blocks * BLOCK]);
            *key = key::key_of_state(&state);
        }
    }
}

/// True when this CPU has the AVX-512 instructions the lanes use (`std` caches the answer).
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
}

#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
mod lanes {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_broadcast_i32x4, _mm512_castsi256_si512,
        _mm512_i64gather_epi32, _mm512_inserti64x4, _mm512_loadu_si512, _mm512_mask_add_epi32,
        _mm512_mask_mov_epi32, _mm512_ror_epi32, _mm512_set1_epi32, _mm512_setzero_si512,
        _mm512_shuffle_epi8, _mm512_srli_epi32, _mm512_storeu_si512, _mm512_ternarylogic_epi32,
        _mm_set_epi64x,
    };

    use crate::key::{key_of_words, Key, BLOCK, SHA256_INITIAL};

    /// SHA-256's round constants (FIPS 180-4, 4.2.2).
    const ROUND_CONSTANTS: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    /// Sixteen SHA-256 states, transposed: lane j of `words[k]` is word k of state j.
    type States = [__m512i; 8];

    /// Hashes `messages` (start, blocks) of `bytes` sixteen at a time into `keys`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX-512BW; each message must lie within `bytes` and
    /// hold at least one block.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn keys(bytes: &[u8], messages: &[(usize, usize)], keys: &mut [Key]) {
        let base = bytes.as_ptr();
        let mut states: States = SHA256_INITIAL.map(|word| _mm512_set1_epi32(word as i32));
        // Per lane: the message it hashes, where its next block is, how many are left.
        let mut owner = [0usize; 16];
        let mut next_block = [0usize; 16];
        let mut left = [0usize; 16];
        let mut queued = messages.iter().enumerate();
        loop {
            let (mut fresh, mut busy) = (0u16, 0u16);
            for lane in 0..16 {
                if left[lane] == 0 {
                    if let Some((index, &(start, blocks))) = queued.next() {
                        (owner[lane], next_block[lane], left[lane]) = (index, start, blocks);
                        fresh |= 1 << lane;
                    }
                }
                if left[lane] > 0 {
                    busy |= 1 << lane;
                }
            }
            if busy == 0 {
                return;
            }
            for (word, initial) in states.iter_mut().zip(SHA256_INITIAL) {
                *word = _mm512_mask_mov_epi32(*word, fresh, _mm512_set1_epi32(initial as i32));
            }
            // An idle lane reads the first block again, and keeps its state.
            let blocks: [*const u8; 16] = std::array::from_fn(|lane| {
                // SAFETY: a busy lane's next block lies within `bytes` (the caller's
                // guarantee); an idle lane's is the first block, which the first message,
                // at least one block long, holds.
                unsafe {
                    base.add(if busy & 1 << lane != 0 {
                        next_block[lane]
                    } else {
                        0
                    })
                }
            });
            // SAFETY: the features are the caller's guarantee; each pointer has a block.
            unsafe { compress(&mut states, &blocks, busy) };
            let mut finished = 0u16;
            for lane in 0..16 {
                if busy & 1 << lane != 0 {
                    next_block[lane] += BLOCK;
                    left[lane] -= 1;
                    if left[lane] == 0 {
                        finished |= 1 << lane;
                    }
                }
            }
            if finished != 0 {
                let (mut high, mut low) = ([0u32; 16], [0u32; 16]);
                // SAFETY: each store writes the 64 bytes of its array.
                unsafe {
                    _mm512_storeu_si512(high.as_mut_ptr().cast(), states[0]);
                    _mm512_storeu_si512(low.as_mut_ptr().cast(), states[1]);
                }
                for lane in (0..16).filter(|lane| finished & 1 << lane != 0) {
                    keys[owner[lane]] = key_of_words(high[lane], low[lane]);
                }
            }
        }
    }

    /// Compresses `blocks[j]` into state j for each lane j set in `busy`; the others keep
    /// their state.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX-512BW; each pointer must have 64 bytes to read.
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn compress(states: &mut States, blocks: &[*const u8; 16], busy: u16) {
        // SAFETY: the caller's guarantees; the pointer loads read the 128 bytes of
        // `blocks`, and each gather reads one 4-byte word of each lane's block.
        let mut w = unsafe {
            let pointers = [
                _mm512_loadu_si512(blocks.as_ptr().cast()),
                _mm512_loadu_si512(blocks.as_ptr().add(8).cast()),
            ];
            let big_endian = _mm512_broadcast_i32x4(_mm_set_epi64x(
                0x0c0d_0e0f_0809_0a0b,
                0x0405_0607_0001_0203,
            ));
            let mut w = [_mm512_setzero_si512(); 16];
            for (t, word) in w.iter_mut().enumerate() {
                // Word t of each lane's block: pointer + 4t, gathered eight lanes at a time.
                let offset = (4 * t) as *const i32;
                let low = _mm512_i64gather_epi32::<1>(pointers[0], offset);
                let high = _mm512_i64gather_epi32::<1>(pointers[1], offset);
                let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high);
                *word = _mm512_shuffle_epi8(both, big_endian);
            }
            w
        };
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *states;
        for (i, &k) in ROUND_CONSTANTS.iter().enumerate() {
            if i >= 16 {
                // The message schedule, sixteen words kept: w[i % 16] is w[i - 16] until
                // replaced by w[i].
                let (w15, w2) = (w[(i + 1) % 16], w[(i + 14) % 16]);
                let sigma0 = _mm512_ternarylogic_epi32::<0x96>(
                    _mm512_ror_epi32::<7>(w15),
                    _mm512_ror_epi32::<18>(w15),
                    _mm512_srli_epi32::<3>(w15),
                );
                let sigma1 = _mm512_ternarylogic_epi32::<0x96>(
                    _mm512_ror_epi32::<17>(w2),
                    _mm512_ror_epi32::<19>(w2),
                    _mm512_srli_epi32::<10>(w2),
                );
                w[i % 16] = _mm512_add_epi32(
                    _mm512_add_epi32(w[i % 16], sigma0),
                    _mm512_add_epi32(w[(i + 9) % 16], sigma1),
                );
            }
            let big_sigma1 = _mm512_ternarylogic_epi32::<0x96>(
                _mm512_ror_epi32::<6>(e),
                _mm512_ror_epi32::<11>(e),
                _mm512_ror_epi32::<25>(e),
            );
            // 0xca: e ? f : g (choose); 0xe8: the majority of a, b, c; 0x96: three-way xor.
            let choose = _mm512_ternarylogic_epi32::<0xca>(e, f, g);
            let word = _mm512_add_epi32(w[i % 16], _mm512_set1_epi32(k as i32));
            let t1 = _mm512_add_epi32(
                _mm512_add_epi32(h, big_sigma1),
                _mm512_add_epi32(choose, word),
            );
            let big_sigma0 = _mm512_ternarylogic_epi32::<0x96>(
                _mm512_ror_epi32::<2>(a),
                _mm512_ror_epi32::<13>(a),
                _mm512_ror_epi32::<22>(a),
            );
            let t2 = _mm512_add_epi32(big_sigma0, _mm512_ternarylogic_epi32::<0xe8>(a, b, c));
            (h, g, f, e) = (g, f, e, _mm512_add_epi32(d, t1));
            (d, c, b, a) = (c, b, a, _mm512_add_epi32(t1, t2));
        }
        let rounds = [a, b, c, d, e, f, g, h];
        for (state, added) in states.iter_mut().zip(rounds) {
            *state = _mm512_mask_add_epi32(*state, busy, *state, added);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_digest_prefixes_in_order() {
        let mut next = crate::test_rng::xorshift(0x5eed);
        let text: Vec<u8> = (0..2000).map(|_| next() as u8).collect();
        // Lengths across block boundaries (55, 56, 64), long ones among short ones (lanes
        // refill at different times), and fewer messages than lanes.
        for count in [0, 1, 2, 15, 16, 17, 100] {
            let mut padded = Padded::default();
            let mut want = Vec::new();
            for m in 0..count {
                let len = match m % 7 {
                    0 => 55,
                    1 => 56,
                    2 => 64,
                    3 => 1200 + m,
                    _ => (next() % 300) as usize,
                };
                let message = &text[m..m + len];
                padded
                    .push(|bytes| {
                        bytes.extend_from_slice(message);
                        Ok::<(), ()>(())
                    })
                    .unwrap();
                want.push(key::key_of(message));
            }
            // A failed write adds nothing.
            assert_eq!(padded.push(|_| Err("no")), Err("no"));
            assert_eq!(padded.keys(), want, "{count}");
            let mut one_by_one = vec![0; count];
            padded.keys_one_by_one(&mut one_by_one);
            assert_eq!(one_by_one, want, "{count}");
        }
    }
}
