//! The call key: the first 64 bits of SHA-256 over the canonical bytes. Stored natively as
//! a `u64`, so windows compare integers and never call back into Python.

use sha2::{Digest, Sha256};

pub type Key = u64;

/// Hashes canonical bytes. `sha2` picks the SHA-NI instructions at run time where the CPU
/// has them, which is what makes hashing 100 KB cheaper than walking it.
pub fn key_of(canonical: &[u8]) -> Key {
    let digest = Sha256::digest(canonical);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// SHA-256's block size in bytes.
pub const BLOCK: usize = 64;

/// SHA-256's initial state (FIPS 180-4, 5.3.3).
pub const SHA256_INITIAL: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// SHA-256 over a buffer that is still being written: blocks already complete can be
/// compressed while the rest is written ([`Progress::absorb_block`]), so that part of the
/// hashing overlaps the writer's own work instead of following it (measured in
/// `Walker::absorb`).
pub struct Progress {
    state: [u32; 8],
    /// How many bytes from the buffer's start are in `state` (a multiple of 64).
    hashed: usize,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            state: SHA256_INITIAL,
            hashed: 0,
        }
    }
}

impl Progress {
    /// How many bytes from the buffer's start are hashed.
    pub fn hashed(&self) -> usize {
        self.hashed
    }

    /// Compresses the next block of `buffer`, if it is complete. `buffer` must start with
    /// the bytes hashed so far, unchanged.
    #[inline]
    pub fn absorb_block(&mut self, buffer: &[u8]) {
        if let Some(block) = buffer.get(self.hashed..self.hashed + BLOCK) {
            compress(&mut self.state, block);
            self.hashed += BLOCK;
        }
    }

    /// The key of all of `buffer`, which is left as it was. SHA-256's padding is appended
    /// to the buffer itself and the remaining blocks compressed in one call: for the short
    /// canonical texts of most calls this saves a fifth of the hashing (the hasher would
    /// copy the tail into a block of its own and compress it separately).
    pub fn finish(mut self, buffer: &mut Vec<u8>) -> Key {
        let len = buffer.len();
        push_padding(buffer, len);
        compress(&mut self.state, &buffer[self.hashed..]);
        buffer.truncate(len);
        key_of_state(&self.state)
    }
}

/// The key in a final SHA-256 state: the digest's first 64 bits.
pub fn key_of_state(state: &[u32; 8]) -> Key {
    key_of_words(state[0], state[1])
}

/// The key from the first two words of a final SHA-256 state.
#[inline]
pub fn key_of_words(first: u32, second: u32) -> Key {
    u64::from(first) << 32 | u64::from(second)
}

/// Appends SHA-256's padding for the message of `len` bytes that ends the buffer and starts
/// on a block boundary: a 1 bit, zeros up to 8 bytes short of a block boundary, the length
/// in bits. The message then ends on a block boundary too.
pub fn push_padding(buffer: &mut Vec<u8>, len: usize) {
    let zeros = (119 - len % 64) % 64;
    let end = buffer.len();
    buffer.reserve(72);
    // SAFETY: 72 bytes of spare capacity were reserved: the fixed-size writes (a 0x80 and
    // 64 zeros, then the length at `1 + zeros` <= 64) stay within them, and the new
    // length covers exactly the bytes written.
    unsafe {
        let tail = buffer.as_mut_ptr().add(end);
        tail.write(0x80);
        tail.add(1).cast::<[u8; 64]>().write_unaligned([0; 64]);
        let bits = (len as u64).wrapping_mul(8).to_be_bytes();
        tail.add(1 + zeros).cast::<[u8; 8]>().write_unaligned(bits);
        buffer.set_len(end + 1 + zeros + 8);
    }
}

/// Compresses `bytes`, a whole number of blocks, into `state`.
#[inline]
pub fn compress(state: &mut [u32; 8], bytes: &[u8]) {
    debug_assert_eq!(bytes.len() % BLOCK, 0);
    // SAFETY: `GenericArray<u8, U64>` is a `repr(transparent)` wrapper of 64 bytes
    // (alignment 1), so `bytes`, a whole number of blocks long, is that many blocks; the
    // slice borrows `bytes` for the call only.
    let blocks = unsafe {
        std::slice::from_raw_parts(
            bytes
                .as_ptr()
                .cast::<sha2::digest::generic_array::GenericArray<u8, sha2::digest::consts::U64>>(),
            bytes.len() / BLOCK,
        )
    };
    sha2::compress256(state, blocks);
}

/// [`key_of`] the bytes in `buffer`, which is left as it was (see [`Progress::finish`]).
pub fn key_of_buffer(buffer: &mut Vec<u8>) -> Key {
    Progress::default().finish(buffer)
}

/// The key as users see it: 16 lowercase hex digits, the prefix of the SHA-256 hexdigest.
pub fn key_hex(key: Key) -> String {
    key_hex_digits(key).iter().map(|&d| char::from(d)).collect()
}

/// The key's 16 hex digits as ASCII bytes, without allocating.
pub fn key_hex_digits(key: Key) -> [u8; 16] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    for (i, digit) in digits.iter_mut().enumerate() {
        *digit = HEX[(key >> (60 - 4 * i) & 0xf) as usize];
    }
    digits
}

pub fn parse_key_hex(text: &str) -> Option<Key> {
    if text.len() == 16
        && text
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        u64::from_str_radix(text, 16).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_the_hexdigest_prefix() {
        // hashlib.sha256(b"abc").hexdigest()[:16]
        assert_eq!(key_hex(key_of(b"abc")), "ba7816bf8f01cfea");
        assert_eq!(key_hex(key_of(b"")), "e3b0c44298fc1c14");
        assert_eq!(key_hex(1), "0000000000000001");
    }

    #[test]
    fn hashing_the_padded_buffer_is_sha256() {
        let text: Vec<u8> = (0..300u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in 0..text.len() {
            let mut buffer = text[..len].to_vec();
            assert_eq!(key_of_buffer(&mut buffer), key_of(&text[..len]), "{len}");
            assert_eq!(buffer, text[..len]);
        }
    }

    #[test]
    fn hashing_blocks_as_they_fill_is_sha256() {
        let text: Vec<u8> = (0..400u32).map(|i| (i * 13 % 251) as u8).collect();
        for len in (0..text.len()).step_by(7) {
            // Written a few bytes at a time, with a block hashed whenever one is complete.
            for step in [1, 5, 64, 100] {
                let (mut buffer, mut progress) = (Vec::new(), Progress::default());
                for piece in text[..len].chunks(step) {
                    buffer.extend_from_slice(piece);
                    progress.absorb_block(&buffer);
                }
                assert_eq!(
                    progress.finish(&mut buffer),
                    key_of(&text[..len]),
                    "{len} {step}"
                );
                assert_eq!(buffer, text[..len]);
            }
        }
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(parse_key_hex("ba7816bf8f01cfea"), Some(0xba7816bf8f01cfea));
        assert_eq!(parse_key_hex("BA7816BF8F01CFEA"), None);
        assert_eq!(parse_key_hex("ba78"), None);
    }
}
