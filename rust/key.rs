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
    fn hex_round_trips() {
        assert_eq!(parse_key_hex("ba7816bf8f01cfea"), Some(0xba7816bf8f01cfea));
        assert_eq!(parse_key_hex("BA7816BF8F01CFEA"), None);
        assert_eq!(parse_key_hex("ba78"), None);
    }
}
