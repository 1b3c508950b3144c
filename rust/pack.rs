//! Whitespace collapsing without branches per word: the SSSE3 path of
//! [`canon::write_collapsed_str`] for one-byte code units.
//!
//! Code and prose change between words and whitespace every few bytes, and the portable
//! path pays a branch and a copy for each change. Here a 16-byte chunk that holds only
//! printable ASCII and ASCII whitespace (nearly every chunk of such text) costs the same
//! whatever is in it: whitespace becomes spaces, a mask says which bytes stay (not the
//! second and later bytes of a whitespace run, nor leading ones), and one shuffle per half
//! packs them to the left ("left-packing"). Quotes and backslashes, common in code, are
//! escaped in place: each byte is paired with a backslash that is kept only before them,
//! and the pairs are packed the same way. Chunks with other bytes to escape (controls,
//! non-ASCII), and the last few bytes of a string, go the portable way.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::{
    __m128i, _mm_and_si128, _mm_andnot_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8,
    _mm_or_si128, _mm_set1_epi8, _mm_set_epi64x, _mm_shuffle_epi8, _mm_srli_si128,
    _mm_storel_epi64, _mm_unpackhi_epi8, _mm_unpacklo_epi8,
};

use crate::canon::{self, Collapse};

/// For each 8-bit mask, the positions of its set bits, lowest first: a `pshufb` control
/// that moves the bytes a mask keeps to the front (the rest of the control selects zeros).
static PACK: [[u8; 8]; 256] = pack_table();

const fn pack_table() -> [[u8; 8]; 256] {
    let mut table = [[0x80; 8]; 256];
    let mut mask = 0;
    while mask < 256 {
        let (mut bit, mut kept) = (0, 0);
        while bit < 8 {
            if mask >> bit & 1 != 0 {
                table[mask][kept] = bit as u8;
                kept += 1;
            }
            bit += 1;
        }
        mask += 1;
    }
    table
}

/// Each 8-bit mask with its bits moved to the even positions of 16.
static SPREAD: [u32; 256] = spread_table();

const fn spread_table() -> [u32; 256] {
    let mut table = [0; 256];
    let mut mask = 0;
    while mask < 256 {
        let mut bit = 0;
        while bit < 8 {
            table[mask] |= ((mask as u32 >> bit) & 1) << (2 * bit);
            bit += 1;
        }
        mask += 1;
    }
    table
}

/// Writes `" ".join(s.split())` of the one-byte code units `bytes` (Latin-1, or WTF-8 when
/// `WTF8`), without quotes.
///
/// # Safety
/// The processor must support SSSE3 and POPCNT.
#[target_feature(enable = "ssse3,popcnt")]
pub unsafe fn write_collapsed_bytes<const WTF8: bool>(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    let mut i = 0;
    let mut state = Collapse::default();
    while i < n {
        i = collapse_plain_chunks(out, bytes, i, &mut state);
        if i < n {
            // A chunk with something to escape, or the last few bytes.
            let masks = canon::chunk_masks(bytes, i);
            i = canon::collapse_chunk::<WTF8>(out, bytes, i, masks, &mut state);
        }
    }
}

/// Collapses the whole 16-byte chunks from `bytes[i]` on for as long as they hold only
/// printable ASCII and ASCII whitespace (`"` and `\` escaped), and returns where it stopped.
#[target_feature(enable = "ssse3,popcnt")]
fn collapse_plain_chunks(
    out: &mut Vec<u8>,
    bytes: &[u8],
    mut i: usize,
    state: &mut Collapse,
) -> usize {
    // Here a whitespace run is written as one space, eagerly, at its first byte, and one
    // that follows no word yet is dropped: `after_white` is 1 when the byte before is
    // whitespace or no word came yet. `state` keeps a trailing run's space pending instead
    // (it is written only if a word follows): written on the way in, taken back on the way
    // out.
    let mut in_word = state.in_word;
    let mut after_white = if state.pending_space {
        out.push(b' ');
        1
    } else {
        u32::from(!in_word)
    };
    while let Some(Ok(chunk)) = bytes.get(i..i + 16).map(<&[u8; 16]>::try_from) {
        // SAFETY: the load reads exactly the 16 bytes of `chunk`.
        let v = unsafe { _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>()) };
        let (m, white_v) = canon::vector_masks(v);
        let quoted_v = _mm_or_si128(
            _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)),
            _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
        );
        let quoted = _mm_movemask_epi8(quoted_v) as u32;
        if m.special & !m.white & !quoted != 0 {
            break;
        }
        // The second and later bytes of each whitespace run go, and so does a run at the
        // start of the text; the rest stay, whitespace written as a space.
        let kept = !(m.white & ((m.white << 1) | after_white)) & 0xffff;
        let spaced = _mm_or_si128(
            _mm_andnot_si128(white_v, v),
            _mm_and_si128(white_v, _mm_set1_epi8(b' ' as i8)),
        );
        if quoted == 0 {
            left_pack(out, spaced, kept);
        } else {
            // Each byte paired with the backslash before it (where it is `"` or `\`; the
            // other pairs keep only their byte): two vectors of 8 pairs, packed in turn.
            let backslashes = _mm_and_si128(quoted_v, _mm_set1_epi8(b'\\' as i8));
            let pairs = |quoted: u32, kept: u32| {
                SPREAD[(quoted & 0xff) as usize] | SPREAD[(kept & 0xff) as usize] << 1
            };
            left_pack(
                out,
                _mm_unpacklo_epi8(backslashes, spaced),
                pairs(quoted, kept),
            );
            left_pack(
                out,
                _mm_unpackhi_epi8(backslashes, spaced),
                pairs(quoted >> 8, kept >> 8),
            );
        }
        in_word |= m.white != 0xffff;
        after_white = (m.white >> 15) | u32::from(!in_word);
        i += 16;
    }
    state.in_word = in_word;
    // A word came, and the last byte was whitespace: its run's space is the last byte out.
    state.pending_space = in_word && after_white == 1;
    if state.pending_space {
        out.pop();
    }
    i
}

/// Appends the bytes of `v` whose bits are set in `kept` (16 bits), in order.
#[target_feature(enable = "ssse3,popcnt")]
fn left_pack(out: &mut Vec<u8>, v: __m128i, kept: u32) {
    let (low, high) = ((kept & 0xff) as usize, (kept >> 8 & 0xff) as usize);
    let low_count = low.count_ones() as usize;
    // The high half's positions are 8..16: each control byte + 8 (0x80, "zero", stays >= 0x80).
    let high_control = u64::from_le_bytes(PACK[high]) + 0x0808_0808_0808_0808;
    let control = _mm_set_epi64x(high_control as i64, u64::from_le_bytes(PACK[low]) as i64);
    let packed = _mm_shuffle_epi8(v, control);
    out.reserve(16);
    let len = out.len();
    // SAFETY: 16 bytes of spare capacity were reserved; the two 8-byte stores write at
    // offsets 0 and `low_count` <= 8, so within them. Only the kept bytes, all written by
    // the stores, are counted into the length.
    unsafe {
        let end = out.as_mut_ptr().add(len);
        _mm_storel_epi64(end.cast::<__m128i>(), packed);
        _mm_storel_epi64(
            end.add(low_count).cast::<__m128i>(),
            _mm_srli_si128::<8>(packed),
        );
        out.set_len(len + low_count + high.count_ones() as usize);
    }
}
