//! Canonical JSON text, byte for byte as CPython's `json.dumps(..., sort_keys=True,
//! separators=(",", ":"))` writes it (with `ensure_ascii`), for the pieces that do not need
//! Python: strings (escaped, optionally whitespace-collapsed as `" ".join(s.split())`),
//! floats (Python's `repr`, integral floats as exact integers) and integers.
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

/// Byte-wise order, inline: keys are short and usually differ early, where a call to
/// `memcmp` would cost more than the comparison.
#[inline]
fn cmp_short(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
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
    out.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[(unit >> 12 & 0xf) as usize],
        HEX[(unit >> 8 & 0xf) as usize],
        HEX[(unit >> 4 & 0xf) as usize],
        HEX[(unit & 0xf) as usize],
    ]);
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

/// True for the Latin-1 code points `ensure_ascii` writes as something other than themselves.
#[inline]
fn needs_escape(b: u8) -> bool {
    !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\'
}

/// Writes `text` as a JSON string literal, quotes included, without changing its content.
pub fn write_str(out: &mut Vec<u8>, text: Text<'_>) {
    out.push(b'"');
    match text {
        Text::Latin1(bytes) => write_latin1_escaped(out, bytes),
        Text::Wtf8(bytes) if bytes.is_ascii() => write_latin1_escaped(out, bytes),
        _ => text.for_each_code_point(|c| push_escaped(out, c)),
    }
    out.push(b'"');
}

/// Copies runs that need no escape in one go: for nearly every key, the whole key.
fn write_latin1_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
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

/// Writes `" ".join(text.split())` as a JSON string literal, quotes included.
pub fn write_collapsed_str(out: &mut Vec<u8>, text: Text<'_>) {
    out.push(b'"');
    match text {
        Text::Latin1(bytes) => write_latin1_collapsed(out, bytes),
        Text::Wtf8(bytes) if bytes.is_ascii() => write_latin1_collapsed(out, bytes),
        _ => {
            // `pending_space`: whitespace seen since the last word; written only if another
            // word follows, so leading and trailing whitespace disappear.
            let mut pending_space = false;
            let mut in_word = false;
            text.for_each_code_point(|c| {
                if is_python_whitespace(c) {
                    pending_space = in_word;
                } else {
                    if pending_space {
                        out.push(b' ');
                        pending_space = false;
                    }
                    in_word = true;
                    push_escaped(out, c);
                }
            });
        }
    }
    out.push(b'"');
}

/// The one-byte case of [`write_collapsed_str`]: copies runs of printable ASCII (single
/// spaces between them included) in one go, which is most of any prose or code.
fn write_latin1_collapsed(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    let mut i = 0;
    let mut pending_space = false;
    let mut in_word = false;
    while i < n {
        match CLASS[bytes[i] as usize] {
            SPACE => {
                pending_space = in_word;
                i += 1;
            }
            ESCAPE => {
                if pending_space {
                    out.push(b' ');
                    pending_space = false;
                }
                in_word = true;
                push_escaped(out, u32::from(bytes[i]));
                i += 1;
            }
            _ => {
                if pending_space {
                    out.push(b' ');
                    pending_space = false;
                }
                in_word = true;
                let start = i;
                i += 1;
                while i < n {
                    if CLASS[bytes[i] as usize] == PLAIN {
                        i += 1;
                    } else if bytes[i] == b' ' && i + 1 < n && CLASS[bytes[i + 1] as usize] == PLAIN
                    {
                        i += 2;
                    } else {
                        break;
                    }
                }
                out.extend_from_slice(&bytes[start..i]);
            }
        }
    }
}

/// Writes a float as `json.dumps(normalise(f))` does: integral floats as exact integers
/// (`-0.0` as `0`, `1e23` as `99999999999999991611392`), others as Python's `repr`, and
/// the non-finite ones as `NaN`, `Infinity`, `-Infinity`.
pub fn write_float(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else if f.fract() == 0.0 {
        write_integral_float(out, f);
    } else {
        write_float_repr(out, f);
    }
}

/// Python's `repr` of a finite float (`float_repr_style == 'short'`): the shortest digits
/// that round-trip, in positional notation when the decimal exponent is in [-4, 16),
/// otherwise as `d.ddde±XX` with at least two exponent digits.
pub fn write_float_repr(out: &mut Vec<u8>, f: f64) {
    let mut buffer = zmij::Buffer::new();
    let shortest = buffer.format_finite(f);
    // Between 1e-4 and 1e16 (where every non-integral float lies above 1e-4) Python writes
    // positional notation, and so does zmij when it writes no exponent: same digits, same
    // layout, nothing to redo.
    if f.abs() >= 1e-4 && !shortest.contains(['e', 'E']) {
        out.extend_from_slice(shortest.as_bytes());
        return;
    }
    let (negative, digits, point) = split_decimal(shortest);
    if negative {
        out.push(b'-');
    }
    let digits = digits.as_slice();
    let n = digits.len() as i32;
    if point <= -4 || point > 16 {
        out.push(digits[0]);
        if n > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        let exponent = point - 1;
        out.push(b'e');
        out.push(if exponent < 0 { b'-' } else { b'+' });
        let magnitude = exponent.unsigned_abs();
        if magnitude < 10 {
            out.push(b'0');
        }
        out.extend_from_slice(itoa::Buffer::new().format(magnitude).as_bytes());
    } else if point <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-point) as usize));
        out.extend_from_slice(digits);
    } else if point >= n {
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', (point - n) as usize));
        out.extend_from_slice(b".0");
    } else {
        out.extend_from_slice(&digits[..point as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[point as usize..]);
    }
}

/// Splits a shortest-digit rendering such as `-0.000025`, `1.5e-7` or `1e+16` into its
/// sign, its significant digits (no leading or trailing zeros) and the position of the
/// decimal point relative to the first significant digit (value = 0.DIGITS × 10^point).
fn split_decimal(text: &str) -> (bool, Digits, i32) {
    let bytes = text.as_bytes();
    let negative = bytes.first() == Some(&b'-');
    let unsigned = if negative { &bytes[1..] } else { bytes };
    let (mantissa, exponent) = match unsigned.iter().position(|&b| b == b'e' || b == b'E') {
        Some(e) => (&unsigned[..e], parse_exponent(&unsigned[e + 1..])),
        None => (unsigned, 0),
    };
    let integer_len = mantissa
        .iter()
        .position(|&b| b == b'.')
        .unwrap_or(mantissa.len()) as i32;
    let mut digits = Digits::default();
    let mut leading_zeros = 0i32;
    for &b in mantissa.iter().filter(|&&b| b != b'.') {
        if b == b'0' && digits.len == 0 {
            leading_zeros += 1;
        } else {
            digits.push(b);
        }
    }
    digits.trim_trailing_zeros();
    (negative, digits, integer_len - leading_zeros + exponent)
}

fn parse_exponent(text: &[u8]) -> i32 {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = digits
        .iter()
        .fold(0i32, |acc, &b| acc * 10 + i32::from(b - b'0'));
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// Up to 17 significant digits (all a shortest round-trip f64 rendering can have), on the stack.
#[derive(Default)]
struct Digits {
    bytes: [u8; 24],
    len: usize,
}

impl Digits {
    fn push(&mut self, b: u8) {
        if self.len < self.bytes.len() {
            self.bytes[self.len] = b;
            self.len += 1;
        }
    }
    fn trim_trailing_zeros(&mut self) {
        while self.len > 1 && self.bytes[self.len - 1] == b'0' {
            self.len -= 1;
        }
    }
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Writes an integral finite float as the exact integer `int(f)` is.
fn write_integral_float(out: &mut Vec<u8>, f: f64) {
    if f.abs() < 18446744073709551616.0 {
        // |f| < 2^64: the conversion is exact.
        if f <= -1.0 {
            out.push(b'-');
        }
        out.extend_from_slice(itoa::Buffer::new().format(f.abs() as u64).as_bytes());
        return;
    }
    if f < 0.0 {
        out.push(b'-');
    }
    write_big_integral(out, f.abs());
}

/// Exact decimal of a float ≥ 2^64, which is mantissa × 2^exponent with exponent > 11.
fn write_big_integral(out: &mut Vec<u8>, f: f64) {
    let bits = f.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let mantissa = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    // Little-endian limbs in base 10^9, multiplied up by 2^exponent a few bits at a time.
    const BASE: u64 = 1_000_000_000;
    let mut limbs: Vec<u64> = vec![
        mantissa % BASE,
        mantissa / BASE % BASE,
        mantissa / BASE / BASE,
    ];
    let mut remaining = exponent;
    while remaining > 0 {
        let step = remaining.min(29);
        remaining -= step;
        let mut carry = 0u64;
        for limb in limbs.iter_mut() {
            let value = (*limb << step) + carry;
            *limb = value % BASE;
            carry = value / BASE;
        }
        while carry > 0 {
            limbs.push(carry % BASE);
            carry /= BASE;
        }
    }
    while limbs.len() > 1 && limbs.last() == Some(&0) {
        limbs.pop();
    }
    let mut itoa_buffer = itoa::Buffer::new();
    let mut iter = limbs.iter().rev();
    if let Some(first) = iter.next() {
        out.extend_from_slice(itoa_buffer.format(*first).as_bytes());
    }
    for limb in iter {
        let text = itoa_buffer.format(*limb);
        out.extend(std::iter::repeat_n(b'0', 9 - text.len()));
        out.extend_from_slice(text.as_bytes());
    }
}

pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(f: f64) -> String {
        let mut out = Vec::new();
        write_float(&mut out, f);
        String::from_utf8(out).unwrap()
    }

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
    fn floats_follow_python_repr() {
        let cases = [
            (1e-5, "1e-05"),
            (2.5e-5, "2.5e-05"),
            (1e-4, "0.0001"),
            (0.00012345, "0.00012345"),
            (5e-324, "5e-324"),
            (0.1, "0.1"),
            (0.3, "0.3"),
            (-1.5, "-1.5"),
            (123.25, "123.25"),
            (1e15 + 0.5, "1000000000000000.5"),
            (1.7976931348623157e-300, "1.7976931348623157e-300"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (1e-7, "1e-07"),
            (-1.234e-100, "-1.234e-100"),
        ];
        for (value, expected) in cases {
            assert_eq!(float(value), expected, "{value:e}");
        }
    }

    #[test]
    fn integral_floats_are_exact_integers() {
        assert_eq!(float(-0.0), "0");
        assert_eq!(float(0.0), "0");
        assert_eq!(float(3.0), "3");
        assert_eq!(float(-3.0), "-3");
        assert_eq!(float(1e16), "10000000000000000");
        assert_eq!(float(1e23), "99999999999999991611392");
        assert_eq!(float(-1e23), "-99999999999999991611392");
        assert_eq!(float(18446744073709551616.0), "18446744073709551616");
        assert_eq!(
            float(1e308),
            "1000000000000000010979063629440455417404923096773118463368106829031575854049114915371633289784946888990\
             6124966972117251561159028374314008832830700919814604603127166450293302718569748969958855904333838446616\
             5001178426897626212945177628091195786707458122783970171784415105291802893207873272974885715430223118336"
        );
    }

    #[test]
    fn non_finite_floats_are_spelled_like_python() {
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(f64::INFINITY), "Infinity");
        assert_eq!(float(f64::NEG_INFINITY), "-Infinity");
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
