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

#![cfg(all(target_arch = "x86_64", not(feature = "portable")))]

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
    let wide = bytes.len() >= 64 && has_avx512_compress();
    // SAFETY: SSSE3 and POPCNT as the caller promises, AVX-512 where `wide`.
    unsafe { write_collapsed_bytes_with::<WTF8>(out, bytes, wide) }
}

/// [`write_collapsed_bytes`], 64 bytes at a time with AVX-512 where `wide`.
///
/// # Safety
/// The processor must support SSSE3 and POPCNT, and what [`has_avx512_compress`] checks
/// where `wide`.
#[target_feature(enable = "ssse3,popcnt")]
unsafe fn write_collapsed_bytes_with<const WTF8: bool>(
    out: &mut Vec<u8>,
    bytes: &[u8],
    wide: bool,
) {
    let n = bytes.len();
    let mut i = 0;
    let mut state = Collapse::default();
    while i < n {
        if wide {
            // SAFETY: the processor has what it needs, as the caller promises.
            i = unsafe { collapse_plain_blocks(out, bytes, i, &mut state) };
        }
        // With AVX-512, 16 bytes at a time only through the 64 where it stopped.
        let end = if wide { n.min(i + 64) } else { n };
        i = collapse_plain_chunks(out, bytes, i, end, &mut state);
        if i < n {
            // A chunk with something to escape, or the last few bytes.
            let masks = canon::chunk_masks(bytes, i);
            i = canon::collapse_chunk::<WTF8>(out, bytes, i, masks, &mut state);
        }
    }
}

/// Collapses the whole 16-byte chunks of `bytes[i..end]` for as long as they hold only
/// printable ASCII and ASCII whitespace (`"` and `\` escaped), and returns where it stopped.
#[target_feature(enable = "ssse3,popcnt")]
fn collapse_plain_chunks(
    out: &mut Vec<u8>,
    bytes: &[u8],
    mut i: usize,
    end: usize,
    state: &mut Collapse,
) -> usize {
    let mut in_word = state.in_word;
    let mut after_white = u32::from(enter_eager(out, state));
    while let Some(Ok(chunk)) = bytes[..end].get(i..i + 16).map(<&[u8; 16]>::try_from) {
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
    leave_eager(out, state, in_word, after_white == 1);
    i
}

/// The chunk loops write a whitespace run as one space, eagerly, at its first byte, and
/// drop one that follows no word yet; `state` keeps a trailing run's space pending instead
/// (it is written only if a word follows). Entering a loop, a pending space is written, and
/// the answer is whether the next byte follows whitespace or no word yet.
fn enter_eager(out: &mut Vec<u8>, state: &Collapse) -> bool {
    if state.pending_space {
        out.push(b' ');
        return true;
    }
    !state.in_word
}

/// Leaving a chunk loop: a word came, and the last byte was whitespace, so its run's space
/// is the last byte out; it is taken back and kept pending.
fn leave_eager(out: &mut Vec<u8>, state: &mut Collapse, in_word: bool, after_white: bool) {
    state.in_word = in_word;
    state.pending_space = in_word && after_white;
    if state.pending_space {
        out.pop();
    }
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

/// Whether the processor can run [`collapse_plain_blocks`] (AVX-512 with VBMI2's byte
/// compress, and BMI2). Checked once per string; the check reads a cached word.
pub fn has_avx512_compress() -> bool {
    std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vbmi2")
        && std::is_x86_feature_detected!("bmi2")
        && std::is_x86_feature_detected!("popcnt")
}

/// [`collapse_plain_chunks`] 64 bytes at a time, with AVX-512: the bytes to keep are packed
/// by one `vpcompressb` instead of two table shuffles per 16 (the 53 KB source file of the
/// 100 KB benchmark call went from 16 to 4.4 µs). Chunks holding `"` or `\` are packed as
/// (backslash, byte) pairs, half a chunk at a time.
///
/// # Safety
/// The processor must support AVX-512BW, AVX-512VBMI2, BMI2 and POPCNT
/// ([`has_avx512_compress`]).
#[target_feature(enable = "avx512bw,avx512vbmi2,bmi2,popcnt")]
pub unsafe fn collapse_plain_blocks(
    out: &mut Vec<u8>,
    bytes: &[u8],
    mut i: usize,
    state: &mut Collapse,
) -> usize {
    use std::arch::x86_64::{
        _mm512_castsi512_si256, _mm512_cmpeq_epi8_mask, _mm512_cmple_epu8_mask,
        _mm512_cmplt_epi8_mask, _mm512_cvtepu8_epi16, _mm512_extracti64x4_epi64,
        _mm512_loadu_si512, _mm512_mask_blend_epi8, _mm512_maskz_compress_epi8,
        _mm512_maskz_mov_epi16, _mm512_or_si512, _mm512_set1_epi16, _mm512_set1_epi8,
        _mm512_slli_epi16, _mm512_storeu_si512, _mm512_sub_epi8, _pdep_u64,
    };
    // The same bookkeeping as `collapse_plain_chunks`, on 64-bit masks.
    let mut in_word = state.in_word;
    let mut after_white = u64::from(enter_eager(out, state));
    let set1 = |b: u8| _mm512_set1_epi8(b as i8);
    while let Some(Ok(chunk)) = bytes.get(i..i + 64).map(<&[u8; 64]>::try_from) {
        // SAFETY: the load reads exactly the 64 bytes of `chunk`.
        let v = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
        // Signed: below 0x21 are the controls and the space, and every byte from 0x80 up.
        let low_or_high = _mm512_cmplt_epi8_mask(v, set1(0x21));
        let quoted = _mm512_cmpeq_epi8_mask(v, set1(b'"')) | _mm512_cmpeq_epi8_mask(v, set1(b'\\'));
        let del = _mm512_cmpeq_epi8_mask(v, set1(0x7f));
        let white = _mm512_cmple_epu8_mask(_mm512_sub_epi8(v, set1(0x09)), set1(4))
            | _mm512_cmple_epu8_mask(_mm512_sub_epi8(v, set1(0x1c)), set1(4));
        if (low_or_high | del) & !white != 0 {
            break;
        }
        let kept = !(white & ((white << 1) | after_white));
        let spaced = _mm512_mask_blend_epi8(white, v, set1(b' '));
        out.reserve(128);
        let len = out.len();
        // SAFETY: 128 bytes of spare capacity were reserved; each store writes 64 bytes, the
        // second at most 64 bytes in. Only the kept bytes, all written by the stores, are
        // counted into the length.
        unsafe {
            let end = out.as_mut_ptr().add(len);
            let written = if quoted == 0 {
                _mm512_storeu_si512(end.cast(), _mm512_maskz_compress_epi8(kept, spaced));
                kept.count_ones()
            } else {
                // Each byte widened to a (backslash-or-zero, byte) pair; the backslash is kept
                // before a quote or backslash only.
                let mut written = 0;
                for half in 0..2 {
                    let (quoted, kept) =
                        ((quoted >> (32 * half)) as u32, (kept >> (32 * half)) as u32);
                    let bytes32 = if half == 0 {
                        _mm512_castsi512_si256(spaced)
                    } else {
                        _mm512_extracti64x4_epi64::<1>(spaced)
                    };
                    let pairs = _mm512_or_si512(
                        _mm512_slli_epi16::<8>(_mm512_cvtepu8_epi16(bytes32)),
                        _mm512_maskz_mov_epi16(quoted, _mm512_set1_epi16(i16::from(b'\\'))),
                    );
                    let pair_kept = _pdep_u64(u64::from(quoted), 0x5555_5555_5555_5555)
                        | _pdep_u64(u64::from(kept), 0xaaaa_aaaa_aaaa_aaaa);
                    _mm512_storeu_si512(
                        end.add(written as usize).cast(),
                        _mm512_maskz_compress_epi8(pair_kept, pairs),
                    );
                    written += pair_kept.count_ones();
                }
                written
            };
            out.set_len(len + written as usize);
        }
        in_word |= white != u64::MAX;
        after_white = (white >> 63) | u64::from(!in_word);
        i += 64;
    }
    leave_eager(out, state, in_word, after_white == 1);
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings of 0..300 bytes from an alphabet heavy in what the chunk paths treat
    /// specially (whitespace runs, quotes, backslashes, controls, non-ASCII), so that each
    /// lands at every offset of a 16- and a 64-byte chunk.
    fn cases() -> Vec<Vec<u8>> {
        let alphabet: &[u8] = b"ab  \t\n\"\\\x1c\x7f\x00\xe9\xa0xyz0    ";
        let mut next = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1d);
        let mut cases = Vec::new();
        for len in 0..300 {
            for plain_share in [0, 90, 99] {
                let case = (0..len)
                    .map(|_| {
                        let r = next();
                        if r % 100 < plain_share {
                            b"abcdefgh  "[(r >> 8) as usize % 10]
                        } else {
                            alphabet[(r >> 8) as usize % alphabet.len()]
                        }
                    })
                    .collect();
                cases.push(case);
            }
        }
        cases
    }

    #[test]
    fn wide_and_narrow_collapsing_agree_with_the_scalar_path() {
        if !(std::is_x86_feature_detected!("ssse3") && std::is_x86_feature_detected!("popcnt")) {
            return;
        }
        let modes: &[bool] = if has_avx512_compress() {
            &[false, true]
        } else {
            &[false]
        };
        for case in cases() {
            let mut scalar = Vec::new();
            canon::scalar::write_latin1_collapsed(&mut scalar, &case);
            for &wide in modes {
                let mut fast = Vec::new();
                // SAFETY: SSSE3 and POPCNT checked above, AVX-512 where `wide`.
                unsafe { write_collapsed_bytes_with::<false>(&mut fast, &case, wide) };
                assert_eq!(fast, scalar, "wide={wide} {case:?}");
            }
        }
    }
}
