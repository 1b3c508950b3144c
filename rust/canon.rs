//! Canonical JSON text, byte for byte as CPython's `json.dumps(..., sort_keys=True,
//! separators=(",", ":"))` writes it (with `ensure_ascii`), for the pieces that do not need
//! Python: strings, escaped and optionally whitespace-collapsed as `" ".join(s.split())`
//! (numbers are in `numbers.rs`).
//!
//! Strings arrive in the representations a caller may hold: CPython's 1-, 2- and 4-byte
//! code unit arrays, or "WTF-8" bytes (UTF-8 that may also encode lone surrogates, which a
//! Python `str` can contain and JSON text can spell as `\ud800`).

/// Nesting deeper than this many dicts or lists raises RecursionError in both
/// implementations (`tripwire._keys.MAX_DEPTH`; a test checks that they agree).
pub const MAX_DEPTH: usize = 256;

/// One string, in whatever code units its owner stores. No variant needs decoding
/// errors handled: every one of them is a valid sequence of code points.
#[derive(Clone, Copy, Debug)]
pub enum Text<'a> {
    /// Code points below 256, one byte each (CPython's compact Latin-1 and ASCII strings).
    Latin1(&'a [u8]),
    /// Code points below 65536, lone surrogates included (CPython's UCS-2 strings).
    Ucs2(&'a [u16]),
    /// Any code points (CPython's UCS-4 strings).
    Ucs4(&'a [u32]),
    /// UTF-8 in which surrogate code points may also appear, encoded as three bytes.
    Wtf8(&'a [u8]),
}

impl<'a> Text<'a> {
    /// The number of code points.
    pub fn len(self) -> usize {
        match self {
            Text::Latin1(units) => units.len(),
            Text::Ucs2(units) => units.len(),
            Text::Ucs4(units) => units.len(),
            Text::Wtf8(bytes) => bytes.iter().filter(|&&b| (b & 0xc0) != 0x80).count(),
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The code points, in order.
    pub fn code_points(self) -> CodePoints<'a> {
        CodePoints { text: self, pos: 0 }
    }

    /// Calls `f` with each code point in order (a tighter loop than the iterator).
    #[inline]
    fn for_each_code_point(self, mut f: impl FnMut(u32)) {
        match self {
            Text::Latin1(units) => units.iter().for_each(|&u| f(u32::from(u))),
            Text::Ucs2(units) => units.iter().for_each(|&u| f(u32::from(u))),
            Text::Ucs4(units) => units.iter().for_each(|&u| f(u)),
            Text::Wtf8(_) => self.code_points().for_each(f),
        }
    }

    /// Compares two texts in code-point order, which is how Python orders `str` keys
    /// (and equals UTF-8 byte order, but not the UTF-16 order of RFC 8785).
    pub fn cmp_code_points(self, other: Text<'_>) -> std::cmp::Ordering {
        match (self, other) {
            (Text::Latin1(a), Text::Latin1(b)) | (Text::Wtf8(a), Text::Wtf8(b)) => cmp_short(a, b),
            _ => self.code_points().cmp(other.code_points()),
        }
    }

    /// True when both spell the same code points.
    pub fn same_as(self, other: Text<'_>) -> bool {
        match (self, other) {
            (Text::Latin1(a), Text::Latin1(b)) | (Text::Wtf8(a), Text::Wtf8(b)) => a == b,
            (Text::Latin1(a), Text::Wtf8(b)) | (Text::Wtf8(b), Text::Latin1(a)) if a.is_ascii() => {
                a == b
            }
            _ => self.code_points().eq(other.code_points()),
        }
    }

    /// True when the text spells exactly `word`.
    pub fn equals_str(self, word: &str) -> bool {
        self.same_as(Text::Wtf8(word.as_bytes()))
    }
}

/// Equality of two short byte strings (keys), inline: a `memcmp` call costs more.
#[inline]
pub fn same_short(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && cmp_short(a, b).is_eq()
}

/// Byte-wise order, inline: keys are short and usually differ early, where a call to
/// `memcmp` would cost more than the comparison.
#[inline]
pub fn cmp_short(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// Iterator over the code points of a [`Text`].
pub struct CodePoints<'a> {
    text: Text<'a>,
    pos: usize,
}

impl Iterator for CodePoints<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        let i = self.pos;
        let (c, len) = match self.text {
            Text::Latin1(units) => (u32::from(*units.get(i)?), 1),
            Text::Ucs2(units) => (u32::from(*units.get(i)?), 1),
            Text::Ucs4(units) => (*units.get(i)?, 1),
            Text::Wtf8(bytes) => decode_wtf8(bytes, i)?,
        };
        self.pos = i + len;
        Some(c)
    }
}

/// Decodes the code point at `i` of WTF-8 (generalised UTF-8) that the caller has already
/// validated; returns it with its length in bytes.
#[inline]
fn decode_wtf8(bytes: &[u8], i: usize) -> Option<(u32, usize)> {
    let lead = *bytes.get(i)?;
    let (len, initial) = match lead {
        0x00..=0x7f => return Some((u32::from(lead), 1)),
        0xc0..=0xdf => (2, u32::from(lead & 0x1f)),
        0xe0..=0xef => (3, u32::from(lead & 0x0f)),
        _ => (4, u32::from(lead & 0x07)),
    };
    let end = (i + len).min(bytes.len());
    let c = bytes[i + 1..end]
        .iter()
        .fold(initial, |acc, &b| (acc << 6) | u32::from(b & 0x3f));
    Some((c, end - i))
}

/// Appends code point `c` as WTF-8 (surrogates encoded like any other code point).
pub fn push_wtf8(out: &mut Vec<u8>, c: u32) {
    match c {
        0..=0x7f => out.push(c as u8),
        0x80..=0x7ff => out.extend_from_slice(&[0xc0 | (c >> 6) as u8, 0x80 | (c & 0x3f) as u8]),
        0x800..=0xffff => out.extend_from_slice(&[
            0xe0 | (c >> 12) as u8,
            0x80 | (c >> 6 & 0x3f) as u8,
            0x80 | (c & 0x3f) as u8,
        ]),
        _ => out.extend_from_slice(&[
            0xf0 | (c >> 18) as u8,
            0x80 | (c >> 12 & 0x3f) as u8,
            0x80 | (c >> 6 & 0x3f) as u8,
            0x80 | (c & 0x3f) as u8,
        ]),
    }
}

/// The 29 code points on which Python's `str.split()` splits (`Py_UNICODE_ISSPACE`).
/// Rust's `char::is_whitespace` differs: it lacks U+001C..U+001F and has U+0085 only by
/// another rule, so it must not be used here.
#[inline]
pub fn is_python_whitespace(c: u32) -> bool {
    matches!(
        c,
        0x09..=0x0d
            | 0x1c..=0x20
            | 0x85
            | 0xa0
            | 0x1680
            | 0x2000..=0x200a
            | 0x2028
            | 0x2029
            | 0x202f
            | 0x205f
            | 0x3000
    )
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[inline]
fn push_u_escape(out: &mut Vec<u8>, unit: u32) {
    let hex = |shift: u32| u64::from(HEX[(unit >> shift & 0xf) as usize]);
    // `\uXXXX` as one 8-byte store (of which the length takes 6): escapes come in runs in
    // text that is not Latin, one for every character.
    let escape = u64::from(b'\\')
        | u64::from(b'u') << 8
        | hex(12) << 16
        | hex(8) << 24
        | hex(4) << 32
        | hex(0) << 40;
    out.reserve(8);
    let len = out.len();
    // SAFETY: 8 bytes of spare capacity were reserved and are written; the length covers
    // the first 6.
    unsafe {
        out.as_mut_ptr()
            .add(len)
            .cast::<[u8; 8]>()
            .write_unaligned(escape.to_le_bytes());
        out.set_len(len + 6);
    }
}

/// Writes one code point as `json.dumps` with `ensure_ascii=True` does.
#[inline]
fn push_escaped(out: &mut Vec<u8>, c: u32) {
    match c {
        0x22 => out.extend_from_slice(b"\\\""),
        0x5c => out.extend_from_slice(b"\\\\"),
        0x0a => out.extend_from_slice(b"\\n"),
        0x0d => out.extend_from_slice(b"\\r"),
        0x09 => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        0x20..=0x7e => out.push(c as u8),
        0x10000.. => {
            let v = c - 0x10000;
            push_u_escape(out, 0xd800 | (v >> 10));
            push_u_escape(out, 0xdc00 | (v & 0x3ff));
        }
        _ => push_u_escape(out, c),
    }
}

/// Byte classes for the ASCII fast path.
const PLAIN: u8 = 0; // printable, written as is
const SPACE: u8 = 1; // one of Python's whitespace characters
const ESCAPE: u8 = 2; // needs a backslash escape (non-ASCII ones as \u00XX)

/// Classes of the Latin-1 code points (one byte each in CPython's compact strings; the
/// ASCII half also serves UTF-8 text that is all ASCII).
const fn latin1_classes() -> [u8; 256] {
    let mut table = [ESCAPE; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = if (b >= 0x09 && b <= 0x0d) || (b >= 0x1c && b <= 0x20) || b == 0x85 || b == 0xa0
        {
            SPACE
        } else if b < 0x20 || b == 0x22 || b == 0x5c || b >= 0x7f {
            ESCAPE
        } else {
            PLAIN
        };
        b += 1;
    }
    table
}

static CLASS: [u8; 256] = latin1_classes();

/// Masks of 16 bytes: bit k is set when byte k is...
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Masks {
    /// ...not [`PLAIN`] (spaces included), or past the end of the string;
    pub(crate) special: u32,
    /// ...a space (U+0020);
    pub(crate) space: u32,
    /// ...one of the ASCII whitespace characters Python splits on (U+0009..U+000D,
    /// U+001C..U+0020);
    pub(crate) white: u32,
    /// ...0x80 or above (also special).
    pub(crate) high: u32,
}

/// [`Masks`] of the 16 bytes from `bytes[i]`, for `bytes` of at least 16 bytes. Near the end
/// the last 16 bytes are read and the masks shifted, so nothing is copied and nothing past
/// the end is read.
#[inline(always)]
pub(crate) fn chunk_masks(bytes: &[u8], i: usize) -> Masks {
    if let Some(Ok(chunk)) = bytes.get(i..i + 16).map(<&[u8; 16]>::try_from) {
        return raw_masks(chunk);
    }
    let start = bytes.len().saturating_sub(16).min(i);
    let shift = i - start;
    let Some(Ok(chunk)) = bytes.get(start..start + 16).map(<&[u8; 16]>::try_from) else {
        // Only for a caller's bug (fewer than 16 bytes): every byte reads as special.
        return Masks {
            special: u32::MAX,
            space: 0,
            white: 0,
            high: 0,
        };
    };
    let m = raw_masks(chunk);
    Masks {
        special: (m.special >> shift) | (u32::MAX << (16 - shift)),
        space: m.space >> shift,
        white: m.white >> shift,
        high: m.high >> shift,
    }
}

/// [`Masks`] of exactly 16 bytes, with SSE2 (part of the x86_64 baseline).
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[inline(always)]
fn raw_masks(chunk: &[u8; 16]) -> Masks {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128};
    // SAFETY: SSE2 is always available on x86_64; the unaligned load reads exactly the 16
    // bytes of `chunk`.
    vector_masks(unsafe { _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>()) }).0
}

/// [`Masks`] of the 16 bytes in `v`, and its ASCII whitespace bytes as a vector (0xff where
/// set), with SSE2.
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[inline(always)]
pub(crate) fn vector_masks(v: std::arch::x86_64::__m128i) -> (Masks, std::arch::x86_64::__m128i) {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_sub_epi8,
    };
    // SAFETY: SSE2 is always available on x86_64; these only compute on registers.
    unsafe {
        // Signed compare: below 0x21 catches the controls and the space, and also every
        // byte from 0x80 up (negative as i8), all of which are special.
        let low_or_high = _mm_cmplt_epi8(v, _mm_set1_epi8(0x21));
        let del = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f));
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        let special = _mm_or_si128(
            _mm_or_si128(low_or_high, del),
            _mm_or_si128(quote, backslash),
        );
        let space = _mm_cmpeq_epi8(v, _mm_set1_epi8(b' ' as i8));
        // `v - lo <= 4` (unsigned) tests `lo <= v <= lo + 4`: min(x, 4) == x.
        let in_range = |lo: i8| {
            let x = _mm_sub_epi8(v, _mm_set1_epi8(lo));
            _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(4)), x)
        };
        let white = _mm_or_si128(in_range(0x09), in_range(0x1c));
        let masks = Masks {
            special: _mm_movemask_epi8(special) as u32,
            space: _mm_movemask_epi8(space) as u32,
            white: _mm_movemask_epi8(white) as u32,
            high: _mm_movemask_epi8(v) as u32,
        };
        (masks, white)
    }
}

#[cfg(not(all(target_arch = "x86_64", not(feature = "portable"))))]
use raw_masks_portable as raw_masks;

/// The portable twin of the SSE2 [`raw_masks`], one byte at a time.
#[cfg(any(test, not(all(target_arch = "x86_64", not(feature = "portable")))))]
#[inline]
fn raw_masks_portable(chunk: &[u8; 16]) -> Masks {
    let mut m = Masks {
        special: 0,
        space: 0,
        white: 0,
        high: 0,
    };
    for (k, &b) in chunk.iter().enumerate() {
        m.special |= u32::from(CLASS[b as usize] != PLAIN) << k;
        m.space |= u32::from(b == b' ') << k;
        m.white |= u32::from(b < 0x80 && CLASS[b as usize] == SPACE) << k;
        m.high |= u32::from(b >= 0x80) << k;
    }
    m
}

/// Appends `bytes`, short ones (4 to 32 bytes: keys, numbers, most words) with two
/// overlapping copies of a fixed size rather than a `memcpy` call of a variable length.
#[inline(always)]
pub fn push_small(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    out.reserve(n);
    let len = out.len();
    // SAFETY: `n` bytes of spare capacity were reserved, which `bytes` (not part of `out`,
    // which is borrowed mutably) cannot overlap; the new length covers exactly them.
    unsafe {
        copy_small(bytes.as_ptr(), out.as_mut_ptr().add(len), n);
        out.set_len(len + n);
    }
}

/// Copies `n` bytes: from 4 to 32 with two overlapping copies of a fixed size, else with
/// `memcpy`.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `n` bytes, not overlapping.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, n: usize) {
    let width = match n {
        16..=32 => 16,
        8..=15 => 8,
        4..=7 => 4,
        _ => {
            // SAFETY: the caller's guarantee.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
            return;
        }
    };
    // SAFETY: `width` <= `n`, so both copies read inside `src` (at 0 and at `n - width`)
    // and write inside `dst`'s `n` bytes, which together they fill.
    unsafe {
        match width {
            16 => {
                std::ptr::copy_nonoverlapping(src, dst, 16);
                std::ptr::copy_nonoverlapping(src.add(n - 16), dst.add(n - 16), 16);
            }
            8 => {
                std::ptr::copy_nonoverlapping(src, dst, 8);
                std::ptr::copy_nonoverlapping(src.add(n - 8), dst.add(n - 8), 8);
            }
            _ => {
                std::ptr::copy_nonoverlapping(src, dst, 4);
                std::ptr::copy_nonoverlapping(src.add(n - 4), dst.add(n - 4), 4);
            }
        }
    }
}

/// Appends the first `run` bytes of `bytes[i..]`: with one 16-byte copy when 16 bytes are
/// there (cheaper than a `memcpy` call of a variable length), else as a slice.
#[inline(always)]
fn push_run(out: &mut Vec<u8>, bytes: &[u8], i: usize, run: usize) {
    match bytes.get(i..i + 16) {
        Some(chunk) if run <= 16 => {
            out.reserve(16);
            let len = out.len();
            let spare = &mut out.spare_capacity_mut()[..16];
            for (slot, &b) in spare.iter_mut().zip(chunk) {
                slot.write(b);
            }
            // SAFETY: `run` ≤ 16 bytes of the spare capacity were just written.
            unsafe { out.set_len(len + run) };
        }
        _ => push_small(out, &bytes[i..i + run]),
    }
}

/// Writes `text` as a JSON string literal, quotes included, without changing its content.
pub fn write_str(out: &mut Vec<u8>, text: Text<'_>) {
    out.push(b'"');
    match text {
        Text::Latin1(bytes) => write_escaped_bytes::<false>(out, bytes),
        Text::Wtf8(bytes) => write_escaped_bytes::<true>(out, bytes),
        _ => text.for_each_code_point(|c| push_escaped(out, c)),
    }
    out.push(b'"');
}

/// The code point at `bytes[i]` (which is `b`) and its length in bytes: WTF-8 when `WTF8`,
/// else one byte per code point (CPython's Latin-1 strings).
#[inline(always)]
fn code_point_at<const WTF8: bool>(bytes: &[u8], i: usize, b: u8) -> (u32, usize) {
    if WTF8 && b >= 0x80 {
        decode_wtf8(bytes, i).unwrap_or((u32::from(b), 1))
    } else {
        (u32::from(b), 1)
    }
}

/// Copies runs that need no escape in one go: for nearly every key, the whole key.
fn write_escaped_bytes<const WTF8: bool>(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    let mut i = 0;
    if n < 16 {
        // Most short strings (tool names, keys) need no escape: copied in one go.
        let words = short_words(bytes);
        let m = word_masks(words);
        if m.special & !m.space & !(u32::MAX << n) == 0 {
            push_words(out, words, n);
            return;
        }
        while i < n {
            let run = bytes[i..]
                .iter()
                .position(|&b| CLASS[b as usize] != PLAIN && b != b' ')
                .unwrap_or(n - i);
            out.extend_from_slice(&bytes[i..i + run]);
            i += run;
            if let Some(&b) = bytes.get(i) {
                let (c, len) = code_point_at::<WTF8>(bytes, i, b);
                push_escaped(out, c);
                i += len;
            }
        }
        return;
    }
    while i < n {
        let m = chunk_masks(bytes, i);
        let width = (n - i).min(16);
        let mut bad = m.special & !m.space & !(u32::MAX << width);
        // The runs between the bad bytes, and each bad byte escaped.
        let mut k = 0;
        loop {
            let next = (bad.trailing_zeros() as usize).min(width);
            if next > k {
                push_run(out, bytes, i + k, next - k);
            }
            let Some(&b) = bytes.get(i + next).filter(|_| next < width) else {
                i += width;
                break;
            };
            let (c, len) = code_point_at::<WTF8>(bytes, i + next, b);
            push_escaped(out, c);
            k = next + len;
            if k >= width {
                i += k;
                break;
            }
            // Continuation bytes of a multi-byte code point are bad bits too: skip them.
            bad &= u32::MAX << k;
        }
    }
}

/// Writes `" ".join(text.split())` as a JSON string literal, quotes included.
pub fn write_collapsed_str(out: &mut Vec<u8>, text: Text<'_>) {
    out.push(b'"');
    match text {
        Text::Latin1(bytes) => write_collapsed_bytes::<false>(out, bytes),
        Text::Wtf8(bytes) => write_collapsed_bytes::<true>(out, bytes),
        Text::Ucs2(units) => write_collapsed_ucs2(out, units),
        Text::Ucs4(_) => {
            let mut state = Collapse::default();
            text.for_each_code_point(|c| state.push(out, c));
        }
    }
    out.push(b'"');
}

/// [`write_collapsed_str`] of UCS-2 code units (CPython's two-byte strings: text with a
/// character past U+00FF, as CJK, Greek or Cyrillic text is): ASCII classed by table, and
/// every other unit escaped as it is (a lone surrogate too, as `json.dumps` does) unless it
/// is whitespace.
fn write_collapsed_ucs2(out: &mut Vec<u8>, units: &[u16]) {
    let mut state = Collapse::default();
    out.reserve(units.len() * 6);
    for &unit in units {
        let c = u32::from(unit);
        let class = if c < 0x80 { CLASS[c as usize] } else { ESCAPE };
        if class == SPACE || (c >= 0x80 && is_python_whitespace(c)) {
            state.pending_space = state.in_word;
            continue;
        }
        state.start_word(out);
        if class == PLAIN {
            out.push(c as u8);
        } else if c < 0x80 {
            push_escaped(out, c);
        } else {
            push_u_escape(out, c);
        }
    }
}

/// The state of `" ".join(s.split())` between two code points.
#[derive(Default)]
pub(crate) struct Collapse {
    /// Whitespace seen since the last word: written only if another word follows, so
    /// leading and trailing whitespace disappear.
    pub(crate) pending_space: bool,
    pub(crate) in_word: bool,
}

impl Collapse {
    #[inline]
    fn push(&mut self, out: &mut Vec<u8>, c: u32) {
        if is_python_whitespace(c) {
            self.pending_space = self.in_word;
        } else {
            self.start_word(out);
            push_escaped(out, c);
        }
    }

    #[inline]
    fn start_word(&mut self, out: &mut Vec<u8>) {
        if self.pending_space {
            out.push(b' ');
            self.pending_space = false;
        }
        self.in_word = true;
    }
}

/// Writes `" ".join(content.split())` as a JSON string literal, for printable ASCII
/// `content` under 32 bytes whose spaces are the bits of `spaces` (its only whitespace:
/// JSON text holds no raw control character in a string): the runs of bytes kept are
/// copied whole.
#[inline(never)]
pub(crate) fn write_short_ascii_collapsed(out: &mut Vec<u8>, content: &[u8], spaces: u32) {
    let within = !(u64::MAX << content.len().min(63));
    let spaces = u64::from(spaces) & within;
    let words = within & !spaces;
    // A space stays when a word character is just before it and another one comes later.
    let keep = match words.checked_ilog2() {
        None => 0,
        Some(last) => words | spaces & words << 1 & !(u64::MAX << last),
    };
    out.reserve(content.len() + 2);
    out.push(b'"');
    let mut rest = keep;
    while rest != 0 {
        let at = rest.trailing_zeros() as usize;
        let run = (!(rest >> at)).trailing_zeros() as usize;
        push_small(out, &content[at..at + run]);
        rest &= u64::MAX.checked_shl((at + run) as u32).unwrap_or(0);
    }
    out.push(b'"');
}

/// Writes `" ".join(content.split())` as a JSON string literal, for WTF-8 `content` under
/// 32 bytes with no control character, quote, backslash or DEL in it, whose ASCII spaces
/// the caller has checked (none to drop or merge) and whose bytes from 0x80 up are the bits
/// of `high`: ASCII runs copied, every other code point escaped. A non-ASCII whitespace
/// character gives up: nothing written, `false` returned, for the general path to collapse.
#[inline(never)]
pub(crate) fn write_short_escaped(out: &mut Vec<u8>, content: &[u8], mut high: u32) -> bool {
    let mark = out.len();
    // Each byte becomes at most 3 (a 2-byte character is a 6-byte escape; a 4-byte one two).
    out.reserve(3 * content.len() + 2);
    out.push(b'"');
    // `k` never passes the next bit of `high` (those below it are cleared) nor the end of
    // `content` (a decoded character lies within it).
    let mut k = 0;
    while high != 0 {
        let at = high.trailing_zeros() as usize;
        push_small(out, &content[k..at]);
        let Some((c, len)) = decode_wtf8(content, at).filter(|&(c, _)| !is_python_whitespace(c))
        else {
            out.truncate(mark);
            return false;
        };
        push_escaped(out, c);
        k = at + len;
        high &= u32::MAX.checked_shl(k as u32).unwrap_or(0);
    }
    push_small(out, &content[k..]);
    out.push(b'"');
    true
}

/// The one-byte-unit case of [`write_collapsed_str`]: with SSSE3 where the processor has
/// it (nearly every x86_64 one), else 16 bytes at a time with SSE2 or portable code; short
/// strings (most values) in one go when they need nothing but copying.
fn write_collapsed_bytes<const WTF8: bool>(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() < 16 {
        write_short_collapsed::<WTF8>(out, bytes);
        return;
    }
    #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
    if std::is_x86_feature_detected!("ssse3") && std::is_x86_feature_detected!("popcnt") {
        // SAFETY: the processor has SSSE3 and POPCNT, checked just above.
        unsafe { crate::pack::write_collapsed_bytes::<WTF8>(out, bytes) };
        return;
    }
    write_collapsed_bytes_portable::<WTF8>(out, bytes);
}

/// [`write_collapsed_bytes`] without SSSE3. Runs of printable ASCII, single spaces between
/// printable characters included, are copied whole (that is most of any prose or code),
/// found 16 bytes at a time; runs of ASCII whitespace are skipped whole; characters to
/// escape go one by one.
fn write_collapsed_bytes_portable<const WTF8: bool>(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() < 16 {
        write_short_collapsed::<WTF8>(out, bytes);
        return;
    }
    let (n, mut i) = (bytes.len(), 0);
    let mut state = Collapse::default();
    while i < n {
        i = collapse_chunk::<WTF8>(out, bytes, i, chunk_masks(bytes, i), &mut state);
    }
}

/// [`write_collapsed_bytes`] of fewer than 16 bytes: in one go when they are printable
/// ASCII with single spaces between words (most short values), else as one chunk of a long
/// string.
fn write_short_collapsed<const WTF8: bool>(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    let words = short_words(bytes);
    let mut m = word_masks(words);
    let in_chunk = !(u32::MAX << n);
    m.special |= !in_chunk & 0xffff;
    // Spaces are kept only with plain neighbours (not at either end).
    let lonely_space = m.space & ((m.special << 1 | 1) | (m.special >> 1));
    if (m.special & !m.space | lonely_space) & in_chunk == 0 {
        push_words(out, words, n);
    } else {
        // From the string itself: a copy put together from the words would be read back
        // before its stores are done (a store-forwarding stall).
        collapse_chunk::<WTF8>(out, bytes, 0, m, &mut Collapse::default());
    }
}

/// Eight plain bytes, the padding of short strings.
const PAD: u64 = u64::from_le_bytes([b'a'; 8]);

/// `bytes` (fewer than 16 of them) followed by plain bytes up to 16, as two little-endian
/// words. Put together in registers from two overlapping loads: a string copied to the stack
/// in pieces and read back whole would stall the read until the pieces are stored.
#[inline(always)]
fn short_words(bytes: &[u8]) -> (u64, u64) {
    let n = bytes.len();
    let word = |at: usize| bytes.get(at..).and_then(<[u8]>::first_chunk::<8>);
    let half = |at: usize| bytes.get(at..).and_then(<[u8]>::first_chunk::<4>);
    match (
        n,
        word(0),
        word(n.saturating_sub(8)),
        half(0),
        half(n.saturating_sub(4)),
    ) {
        (8, Some(head), ..) => (u64::from_le_bytes(*head), PAD),
        (9..16, Some(head), Some(tail), ..) => {
            // The tail's last n - 8 bytes follow the head's 8; the first 16 - n are overlap.
            let rest = u64::from_le_bytes(*tail) >> (8 * (16 - n));
            (u64::from_le_bytes(*head), rest | PAD << (8 * (n - 8)))
        }
        (4..8, _, _, Some(head), Some(tail)) => {
            let rest = u64::from(u32::from_le_bytes(*tail)) >> (8 * (8 - n));
            let low = u64::from(u32::from_le_bytes(*head)) | rest << 32 | PAD << (8 * n);
            (low, PAD)
        }
        _ => {
            let low = bytes
                .iter()
                .take(8)
                .rev()
                .fold(0, |w, &b| w << 8 | u64::from(b));
            (low | PAD.checked_shl(8 * n as u32).unwrap_or(0), PAD)
        }
    }
}

/// The [`Masks`] of the 16 bytes in two little-endian words.
#[inline(always)]
fn word_masks((low, high): (u64, u64)) -> Masks {
    #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
    {
        use std::arch::x86_64::_mm_set_epi64x;
        // SAFETY: SSE2 is always available on x86_64; this only moves registers.
        vector_masks(unsafe { _mm_set_epi64x(high as i64, low as i64) }).0
    }
    #[cfg(not(all(target_arch = "x86_64", not(feature = "portable"))))]
    {
        let mut chunk = [0; 16];
        chunk[..8].copy_from_slice(&low.to_le_bytes());
        chunk[8..].copy_from_slice(&high.to_le_bytes());
        raw_masks(&chunk)
    }
}

/// Appends the first `n` (at most 16) bytes of two little-endian words.
#[inline(always)]
fn push_words(out: &mut Vec<u8>, (low, high): (u64, u64), n: usize) {
    out.reserve(16);
    let len = out.len();
    // SAFETY: 16 bytes of spare capacity were reserved and are written by the two stores;
    // the length then covers the first `n` <= 16 of them.
    unsafe {
        let end = out.as_mut_ptr().add(len);
        end.cast::<[u8; 8]>().write_unaligned(low.to_le_bytes());
        end.add(8)
            .cast::<[u8; 8]>()
            .write_unaligned(high.to_le_bytes());
        out.set_len(len + n.min(16));
    }
}

/// Collapses the (up to) 16 bytes from `bytes[i]`, whose masks are `m` (bits past the end
/// set in `m.special`), and returns where the next chunk starts: past this one, or past the
/// multi-byte code point that straddles its end.
#[inline(always)]
pub(crate) fn collapse_chunk<const WTF8: bool>(
    out: &mut Vec<u8>,
    bytes: &[u8],
    i: usize,
    m: Masks,
    state: &mut Collapse,
) -> usize {
    // A space is copied as it is only between two plain characters. For bit 0 the left
    // neighbour is what came before the chunk; for bit 15 the right one is not in the
    // chunk, so such a space goes the slow way (it may start a run of whitespace).
    let after_word = state.in_word && !state.pending_space;
    let left_special = (m.special << 1) | u32::from(!after_word);
    let right_special = (m.special >> 1) | (1 << 15);
    let width = (bytes.len() - i).min(16);
    let in_chunk = !(u32::MAX << width);
    let mut bad = ((m.special & !m.space) | (m.space & (left_special | right_special))) & in_chunk;
    let white = m.white & in_chunk;
    let mut k = 0;
    loop {
        let next = (bad.trailing_zeros() as usize).min(width);
        if next > k {
            // A run never starts with a space (one after a plain character would be in
            // the run before it), so a pending space is due now.
            state.start_word(out);
            push_run(out, bytes, i + k, next - k);
        }
        let Some(&b) = bytes.get(i + next).filter(|_| next < width) else {
            return i + width;
        };
        if white >> next & 1 != 0 {
            // A run of ASCII whitespace: all of it is one pending space.
            state.pending_space = state.in_word;
            k = next + (!(white >> next)).trailing_zeros() as usize;
        } else if !WTF8 && b >= 0x80 {
            // A Latin-1 letter (or U+0085, U+00A0, whitespace): classed by table. Here rather
            // than in `Collapse::push`, which every code point goes through: there, even
            // with the table, accented text measured 7% slower.
            if CLASS[b as usize] == SPACE {
                state.pending_space = state.in_word;
            } else {
                state.start_word(out);
                push_u_escape(out, u32::from(b));
            }
            k = next + 1;
        } else {
            let (c, len) = code_point_at::<WTF8>(bytes, i + next, b);
            state.push(out, c);
            k = next + len;
        }
        if k >= width {
            return i + k;
        }
        // Bits already handled (whitespace runs, continuation bytes) are done with.
        bad &= u32::MAX << k;
    }
}

/// The byte-at-a-time originals of the two functions above, kept as the reference the fast
/// paths are tested against.
#[cfg(test)]
pub(crate) mod scalar {
    use super::*;

    fn needs_escape(b: u8) -> bool {
        !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\'
    }

    pub fn write_latin1_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let plain = rest
                .iter()
                .position(|&b| needs_escape(b))
                .unwrap_or(rest.len());
            out.extend_from_slice(&rest[..plain]);
            if let Some(&b) = rest.get(plain) {
                push_escaped(out, u32::from(b));
                rest = &rest[plain + 1..];
            } else {
                rest = &[];
            }
        }
    }

    pub fn write_latin1_collapsed(out: &mut Vec<u8>, bytes: &[u8]) {
        let mut pending_space = false;
        let mut in_word = false;
        for &b in bytes {
            match CLASS[b as usize] {
                SPACE => pending_space = in_word,
                _ => {
                    if pending_space {
                        out.push(b' ');
                        pending_space = false;
                    }
                    in_word = true;
                    push_escaped(out, u32::from(b));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collapsed(text: Text<'_>) -> String {
        let mut out = Vec::new();
        write_collapsed_str(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    fn escaped(text: Text<'_>) -> String {
        let mut out = Vec::new();
        write_str(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn small_pushes_append_exactly_the_bytes() {
        let source: Vec<u8> = (0..40).collect();
        for n in 0..=40 {
            for start in [0, 7] {
                let mut out = b"head".to_vec();
                push_small(&mut out, &source[..n]);
                assert_eq!(&out[..4], b"head");
                assert_eq!(&out[4..], &source[..n], "{n}");
                out.truncate(start.min(out.len()));
                let before = out.clone();
                push_small(&mut out, &source[40 - n..]);
                assert_eq!(out[..before.len()], before[..]);
                assert_eq!(&out[before.len()..], &source[40 - n..], "{n}");
            }
        }
    }

    #[test]
    fn python_whitespace_has_29_code_points() {
        let count = (0..=0x10ffff).filter(|&c| is_python_whitespace(c)).count();
        assert_eq!(count, 29);
        assert!(is_python_whitespace(0x1c));
        assert!(!char::from_u32(0x1c).unwrap().is_whitespace());
    }

    #[test]
    fn collapsing_matches_split_and_join() {
        assert_eq!(collapsed(Text::Latin1(b"  checkout \t\n ")), "\"checkout\"");
        assert_eq!(collapsed(Text::Latin1(b"a  b\x1cc")), "\"a b c\"");
        assert_eq!(collapsed(Text::Latin1(b" \x0b\x0c ")), "\"\"");
        assert_eq!(collapsed(Text::Latin1(b"a\xa0b\x85")), "\"a b\"");
        assert_eq!(
            collapsed(Text::Ucs2(&[0x3000, 0x41, 0x2028, 0x42])),
            "\"A B\""
        );
        assert_eq!(
            collapsed(Text::Latin1(b"say \"hi\"\\ ")),
            "\"say \\\"hi\\\"\\\\\""
        );
    }

    #[test]
    fn escaping_matches_ensure_ascii() {
        assert_eq!(
            escaped(Text::Latin1(b"\x7f\x00\x08\x0c\x1f")),
            "\"\\u007f\\u0000\\b\\f\\u001f\""
        );
        assert_eq!(escaped(Text::Latin1(b"\t\n\r ")), "\"\\t\\n\\r \"");
        assert_eq!(escaped(Text::Latin1(b"\xe9")), "\"\\u00e9\"");
        assert_eq!(escaped(Text::Ucs2(&[0xd800])), "\"\\ud800\"");
        assert_eq!(escaped(Text::Ucs4(&[0x1f600])), "\"\\ud83d\\ude00\"");
        assert_eq!(
            escaped(Text::Wtf8("é😀".as_bytes())),
            "\"\\u00e9\\ud83d\\ude00\""
        );
        assert_eq!(escaped(Text::Wtf8(&[0xed, 0xa0, 0x80])), "\"\\ud800\"");
    }

    /// Strings of every length up to 40 with one or two interesting bytes at every position
    /// (and runs of them), so that each lands on every offset of a 16-byte chunk.
    fn chunk_boundary_cases() -> Vec<Vec<u8>> {
        let fillers: [&[u8]; 3] = [
            b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH",
            b"a b c d e f g h i j k l m n o p q r s t u v",
            b"                                            ",
        ];
        let specials: [&[u8]; 14] = [
            b" ", b"  ", b"\t", b"\n", b"\x1c", b"\x85", b"\xa0", b"\"", b"\\", b"\x7f", b"\x00",
            b"\xe9", b" \t ", b"\xff",
        ];
        let mut cases = Vec::new();
        for len in 0..=40 {
            for filler in fillers {
                let base = filler[..len].to_vec();
                cases.push(base.clone());
                for at in 0..=len {
                    for special in specials {
                        let mut case = base.clone();
                        case.splice(at..at, special.iter().copied());
                        cases.push(case.clone());
                        // A second one further on, for pairs straddling a chunk boundary.
                        let second = (at + 15).min(case.len());
                        case.splice(second..second, b"  ".iter().copied());
                        cases.push(case);
                    }
                }
            }
        }
        cases
    }

    #[test]
    fn chunked_latin1_writers_match_the_scalar_ones() {
        for case in chunk_boundary_cases() {
            let mut slow = Vec::new();
            scalar::write_latin1_collapsed(&mut slow, &case);
            let mut fast = Vec::new();
            write_collapsed_bytes_portable::<false>(&mut fast, &case);
            assert_eq!(fast, slow, "collapsed {case:?}");
            // The dispatching writer: the SSSE3 path where the processor has it.
            let mut fast = Vec::new();
            write_collapsed_bytes::<false>(&mut fast, &case);
            assert_eq!(fast, slow, "collapsed {case:?}");
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            write_escaped_bytes::<false>(&mut fast, &case);
            scalar::write_latin1_escaped(&mut slow, &case);
            assert_eq!(fast, slow, "escaped {case:?}");
        }
    }

    #[test]
    fn chunk_masks_match_the_portable_ones() {
        let all: Vec<u8> = (0..=255).collect();
        for case in chunk_boundary_cases().iter().chain([&all]) {
            for window in case.windows(16) {
                let chunk: &[u8; 16] = window.try_into().unwrap();
                assert_eq!(raw_masks(chunk), raw_masks_portable(chunk), "{window:?}");
            }
        }
    }

    #[test]
    fn chunked_wtf8_writers_match_the_code_point_path() {
        // The same cases read as code points, with multi-byte ones mixed in (U+3000 and
        // U+2028 are whitespace, U+00E9, U+1F600 and a lone surrogate are not).
        let extras: [&[u32]; 5] = [&[0x3000], &[0x2028, 0x20], &[0xe9], &[0x1f600], &[0xd800]];
        for case in chunk_boundary_cases() {
            let latin1: Vec<u32> = case.iter().map(|&b| u32::from(b)).collect();
            let mut variants = vec![latin1.clone()];
            for (n, extra) in extras.iter().enumerate() {
                let mut v = latin1.clone();
                let at = (n * 7) % (v.len() + 1);
                v.splice(at..at, extra.iter().copied());
                variants.push(v);
            }
            for code_points in variants {
                let mut wtf8 = Vec::new();
                code_points.iter().for_each(|&c| push_wtf8(&mut wtf8, c));
                assert_eq!(
                    collapsed(Text::Wtf8(&wtf8)),
                    collapsed(Text::Ucs4(&code_points)),
                    "{code_points:x?}"
                );
                assert_eq!(
                    escaped(Text::Wtf8(&wtf8)),
                    escaped(Text::Ucs4(&code_points)),
                    "{code_points:x?}"
                );
                let mut portable = b"\"".to_vec();
                write_collapsed_bytes_portable::<true>(&mut portable, &wtf8);
                portable.push(b'"');
                assert_eq!(
                    String::from_utf8(portable).unwrap(),
                    collapsed(Text::Ucs4(&code_points)),
                    "{code_points:x?}"
                );
            }
        }
    }

    #[test]
    fn short_string_writers_match_the_general_ones() {
        // Random short strings over a small alphabet: spaces (runs, at either end), ASCII,
        // two- to four-byte characters, a lone surrogate, and U+00A0 / U+3000 (whitespace).
        let alphabet: [&str; 9] = [" ", " ", "a", "b", "é", "東", "😀", "\u{a0}", "\u{3000}"];
        let mut next = crate::test_rng::xorshift(0x5eed_1234);
        for _ in 0..20_000 {
            let mut wtf8 = Vec::new();
            while wtf8.len() < (next() % 32) as usize {
                let pick = (next() % 10) as usize;
                match alphabet.get(pick) {
                    Some(s) => wtf8.extend_from_slice(s.as_bytes()),
                    None => push_wtf8(&mut wtf8, 0xd800),
                }
            }
            if wtf8.len() >= 32 {
                continue;
            }
            let mask = |f: &dyn Fn(u8) -> bool| {
                wtf8.iter()
                    .enumerate()
                    .fold(0u32, |m, (k, &b)| m | u32::from(f(b)) << k)
            };
            let (spaces, high) = (mask(&|b| b == b' '), mask(&|b| b >= 0x80));
            let general = collapsed(Text::Wtf8(&wtf8));
            if high == 0 {
                let mut fast = Vec::new();
                write_short_ascii_collapsed(&mut fast, &wtf8, spaces);
                assert_eq!(String::from_utf8(fast).unwrap(), general, "{wtf8:x?}");
            }
            // It gives up on non-ASCII whitespace and writes nothing; the caller has checked
            // the spaces, so compare only where none needs collapsing.
            let spaces_stay = wtf8.first() != Some(&b' ')
                && wtf8.last() != Some(&b' ')
                && !wtf8.windows(2).any(|w| w == b"  ");
            let non_ascii_white = ["\u{a0}", "\u{3000}"]
                .iter()
                .any(|w| wtf8.windows(w.len()).any(|x| x == w.as_bytes()));
            let mut fast = b"x".to_vec();
            let written = write_short_escaped(&mut fast, &wtf8, high);
            assert_eq!(written, !non_ascii_white, "{wtf8:x?}");
            if written && spaces_stay {
                assert_eq!(String::from_utf8(fast).unwrap(), format!("x{general}"));
            } else if !written {
                assert_eq!(fast, b"x", "{wtf8:x?}");
            }
        }
    }

    #[test]
    fn ucs2_collapsing_matches_the_code_point_path() {
        let extras: [u16; 8] = [
            0x3000, 0x2028, 0x1680, 0xd800, 0xdfff, 0x6771, 0x0391, 0xfeff,
        ];
        for case in chunk_boundary_cases() {
            let units: Vec<u16> = case.iter().map(|&b| u16::from(b)).collect();
            for (n, &extra) in extras.iter().enumerate() {
                let mut v = units.clone();
                let at = (n * 5) % (v.len() + 1);
                v.insert(at, extra);
                let mut fast = Vec::new();
                write_collapsed_ucs2(&mut fast, &v);
                let mut slow = Vec::new();
                let mut state = Collapse::default();
                Text::Ucs2(&v).for_each_code_point(|c| state.push(&mut slow, c));
                assert_eq!(fast, slow, "{v:x?}");
            }
        }
    }

    #[test]
    fn keys_compare_in_code_point_order() {
        use std::cmp::Ordering::*;
        // U+FF61 sorts after U+1F600 in UTF-16 order but before it in code-point order.
        assert_eq!(
            Text::Ucs2(&[0xff61]).cmp_code_points(Text::Ucs4(&[0x1f600])),
            Less
        );
        assert_eq!(
            Text::Latin1(b"ab").cmp_code_points(Text::Latin1(b"b")),
            Less
        );
        assert_eq!(
            Text::Latin1(b"\xe9").cmp_code_points(Text::Ucs2(&[0xe9])),
            Equal
        );
        assert!(Text::Latin1(b"nonce").equals_str("nonce"));
        assert!(!Text::Latin1(b"nonc").equals_str("nonce"));
        assert!(Text::Ucs2(&[0xe9]).equals_str("é"));
    }
}
