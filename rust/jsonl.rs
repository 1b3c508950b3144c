//! Lines of the events format (`tripwire/replay/formats/events.py`) read natively: a JSONL
//! line's top-level members found without building its value, each value's raw text and
//! kind, strings unescaped on demand.
//!
//! The scanner validates the whole line as `json.loads` would (`files.decode_line`): the
//! grammar of CPython's `_json` scanner (NaN, Infinity, lone `\ud800` escapes, duplicate keys
//! with the last one winning), strict strings (no raw control characters), and nothing but
//! JSON whitespace between tokens. What it refuses is not an error here: the caller sends
//! the whole file to the per-call path, which reports it as it always has. It also refuses
//! what it could read but the native replay does not (deeper than [`DEPTH_LIMIT`], integers
//! longer than [`INT_DIGITS`]), so that nothing it accepts reads differently there.

use crate::canon::is_python_whitespace;
use crate::json::{self, char_index, string_stop, string_stops, JsonError, MIN_INT_DIGIT_LIMIT};

/// Containers nested deeper than this are left to the per-call path: far below the key
/// contract's 256 (so no call is refused for its depth) and Python's recursion limit.
pub const DEPTH_LIMIT: usize = 200;
/// Integer literals longer than this are left to the per-call path (Python converts them
/// only up to its `int_max_str_digits`, and the line decoder keeps longer ones as text).
pub const INT_DIGITS: usize = MIN_INT_DIGIT_LIMIT;

/// Why a line is not read natively (the per-call path reads the file).
pub type Why = &'static str;

/// What a JSON value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Str,
    Object,
    Array,
    /// An integer literal (`-?(0|[1-9][0-9]*)`).
    Int,
    /// Any other number (a fraction or an exponent), `NaN`, `Infinity`, `-Infinity`.
    Float,
    True,
    False,
    Null,
}

/// A value in a line: its kind and its text (a string's without its quotes).
#[derive(Clone, Copy, Debug)]
pub struct Value<'a> {
    pub kind: Kind,
    pub raw: &'a [u8],
    /// A string with a backslash in it: to be unescaped.
    pub escaped: bool,
    /// A string with a `\u` escape in it (which may spell a lone surrogate).
    pub unicode: bool,
    /// A string whose content was unescaped into its member's [`Decoded`] buffer.
    pub decoded: bool,
}

impl Value<'_> {
    pub fn is_null(&self) -> bool {
        self.kind == Kind::Null
    }
}

/// The members of a line the events format reads (the last of duplicates, as `json.loads`
/// keeps it); `others`: whether it has members of any other name.
#[derive(Default, Clone, Copy, Debug)]
pub struct Fields<'a> {
    pub run: Option<Value<'a>>,
    pub run_id: Option<Value<'a>>,
    pub tool: Option<Value<'a>>,
    pub args: Option<Value<'a>>,
    pub arguments: Option<Value<'a>>,
    pub input: Option<Value<'a>>,
    pub result: Option<Value<'a>>,
    pub call_id: Option<Value<'a>>,
    pub model: Option<Value<'a>>,
    pub turn: Option<Value<'a>>,
    pub usage: Option<Value<'a>>,
    pub result_of: Option<Value<'a>>,
}

impl<'a> Fields<'a> {
    fn slot(&mut self, name: &[u8]) -> Option<&mut Option<Value<'a>>> {
        Some(match name {
            b"run" => &mut self.run,
            b"run_id" => &mut self.run_id,
            b"tool" => &mut self.tool,
            b"args" => &mut self.args,
            b"arguments" => &mut self.arguments,
            b"input" => &mut self.input,
            b"result" => &mut self.result,
            b"call_id" => &mut self.call_id,
            b"model" => &mut self.model,
            b"turn" => &mut self.turn,
            b"usage" => &mut self.usage,
            b"result_of" => &mut self.result_of,
            _ => return None,
        })
    }
}

/// Whitespace `str.strip()` removes around a line that is also ASCII and not a line's end:
/// what may surround the object (the newline is the caller's).
#[inline]
fn edge_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)
}

/// A blank line (`decode_line` skips it): nothing but ASCII whitespace `bytes.strip()` and
/// `str.strip()` both remove.
pub fn blank(line: &[u8]) -> bool {
    line.iter().all(|&b| edge_space(b) || b == b'\n')
}

/// The strings of the members that are the long ones of a line (a call's arguments and
/// result, often JSON text held in a string), unescaped as they are scanned.
#[derive(Default)]
pub struct Decoded {
    pub args: Vec<u8>,
    pub arguments: Vec<u8>,
    pub input: Vec<u8>,
    pub result: Vec<u8>,
}

impl Decoded {
    fn buffer(&mut self, name: &[u8]) -> Option<&mut Vec<u8>> {
        Some(match name {
            b"args" => &mut self.args,
            b"arguments" => &mut self.arguments,
            b"input" => &mut self.input,
            b"result" => &mut self.result,
            _ => return None,
        })
    }
}

/// What the per-call path makes of a line [`scan`] refuses (`files.decode_line`).
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Blank once `str.strip()` has removed Python's whitespace: skipped, no problem.
    Blank,
    /// Not UTF-8, or not JSON: reported with this message, the line skipped.
    Problem(String),
    /// JSON after all (a value that is no object, a line the native replay does not read):
    /// the per-call path reads the file.
    Unsupported,
}

/// The problem `files.decode_line` reports for a line (its newline removed), as it words it:
/// the byte where UTF-8 fails, or the message and column `json.JSONDecodeError` gives on the
/// line's text stripped of Python's whitespace.
pub fn refused(line: &[u8]) -> Refused {
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(err) => {
            return Refused::Problem(format!("not UTF-8 text (byte {})", err.valid_up_to()))
        }
    };
    let text = text.trim_matches(|c: char| is_python_whitespace(c as u32));
    if text.is_empty() {
        return Refused::Blank;
    }
    let bytes = text.as_bytes();
    match json::value_end(bytes) {
        Err(JsonError::Syntax { msg, pos }) => Refused::Problem(format!(
            "not JSON ({msg} at column {})",
            char_index(bytes, pos) + 1
        )),
        Ok(end) if end < bytes.len() => Refused::Problem(format!(
            "not JSON (extra data at column {})",
            char_index(bytes, end) + 1
        )),
        _ => Refused::Unsupported,
    }
}

/// The top-level members of a line holding one JSON object (its newline removed) into
/// `fields`; `Err`: not such a line, or not one read natively.
pub fn scan<'a>(line: &'a [u8], fields: &mut Fields<'a>) -> Result<(), Why> {
    scan_decoding(line, fields, None)
}

/// [`scan`], the strings of the members [`Decoded`] holds unescaped into it as they are met
/// (one pass over them rather than two); a lone surrogate in one is an `Err`.
pub fn scan_decoding<'a>(
    line: &'a [u8],
    fields: &mut Fields<'a>,
    mut decoded: Option<&mut Decoded>,
) -> Result<(), Why> {
    *fields = Fields::default();
    let mut start = 0;
    while start < line.len() && edge_space(line[start]) {
        start += 1;
    }
    let mut end = line.len();
    while end > start && edge_space(line[end - 1]) {
        end -= 1;
    }
    let s = &line[..end];
    if s.get(start) != Some(&b'{') {
        return Err("a line that is not a JSON object");
    }
    let scanner = Scanner { s };
    let mut i = scanner.ws(start + 1);
    if s.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            if s.get(i) != Some(&b'"') {
                return Err("a line that is not JSON");
            }
            let (key_end, key_escapes) = scanner.string(i + 1)?;
            let key = &s[i + 1..key_end];
            i = scanner.ws(key_end + 1);
            if s.get(i) != Some(&b':') {
                return Err("a line that is not JSON");
            }
            i = scanner.ws(i + 1);
            let buffer = match &mut decoded {
                Some(decoded) if s.get(i) == Some(&b'"') && key_escapes == Escapes::None => {
                    decoded.buffer(key)
                }
                _ => None,
            };
            let (value, after) = match buffer {
                Some(buffer) => {
                    let (end, escapes) = scanner.string_into(i + 1, buffer)?;
                    let value = Value {
                        kind: Kind::Str,
                        raw: &s[i + 1..end],
                        escaped: escapes != Escapes::None,
                        unicode: escapes == Escapes::Unicode,
                        decoded: true,
                    };
                    (value, end + 1)
                }
                None => scanner.value(i, 1)?,
            };
            let slot = if key_escapes != Escapes::None {
                let mut name = Vec::new();
                unescape(key, &mut name);
                // Any name that is one of ours is ASCII: a key spelling one with escapes
                // is rare enough to be read by the per-call path.
                if fields.slot(&name).is_some() {
                    return Err("a member name with escapes");
                }
                None
            } else {
                fields.slot(key)
            };
            if let Some(slot) = slot {
                *slot = Some(value);
            }
            i = scanner.ws(after);
            match s.get(i) {
                Some(b'}') => {
                    i += 1;
                    break;
                }
                Some(b',') => i = scanner.ws(i + 1),
                _ => return Err("a line that is not JSON"),
            }
        }
    }
    if i != s.len() {
        return Err("a line that is not JSON");
    }
    Ok(())
}

/// The escapes a string holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Escapes {
    None,
    Plain,
    Unicode,
}

struct Scanner<'a> {
    s: &'a [u8],
}

impl<'a> Scanner<'a> {
    #[inline(always)]
    fn ws(&self, mut i: usize) -> usize {
        while i < self.s.len() && matches!(self.s[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    }

    /// The value at `i`, and the offset after it.
    fn value(&self, i: usize, depth: usize) -> Result<(Value<'a>, usize), Why> {
        let s = self.s;
        let Some(&c) = s.get(i) else {
            return Err("a line that is not JSON");
        };
        let rest = &s[i..];
        let literal = |kind: Kind, len: usize| {
            Ok((
                Value {
                    kind,
                    raw: &s[i..i + len],
                    escaped: false,
                    unicode: false,
                    decoded: false,
                },
                i + len,
            ))
        };
        match c {
            b'"' => {
                let (end, escapes) = self.string(i + 1)?;
                Ok((
                    Value {
                        kind: Kind::Str,
                        raw: &s[i + 1..end],
                        escaped: escapes != Escapes::None,
                        unicode: escapes == Escapes::Unicode,
                        decoded: false,
                    },
                    end + 1,
                ))
            }
            b'{' | b'[' => {
                if depth >= DEPTH_LIMIT {
                    return Err("JSON nested deeper than the native replay reads");
                }
                let end = if c == b'{' {
                    self.object(i + 1, depth + 1)?
                } else {
                    self.array(i + 1, depth + 1)?
                };
                let kind = if c == b'{' { Kind::Object } else { Kind::Array };
                literal(kind, end - i)
            }
            b'n' if rest.starts_with(b"null") => literal(Kind::Null, 4),
            b't' if rest.starts_with(b"true") => literal(Kind::True, 4),
            b'f' if rest.starts_with(b"false") => literal(Kind::False, 5),
            b'N' if rest.starts_with(b"NaN") => literal(Kind::Float, 3),
            b'I' if rest.starts_with(b"Infinity") => literal(Kind::Float, 8),
            b'-' if rest.starts_with(b"-Infinity") => literal(Kind::Float, 9),
            _ => {
                let (end, int) = self.number(i)?;
                literal(if int { Kind::Int } else { Kind::Float }, end - i)
            }
        }
    }

    fn object(&self, start: usize, depth: usize) -> Result<usize, Why> {
        let s = self.s;
        let mut i = self.ws(start);
        if s.get(i) == Some(&b'}') {
            return Ok(i + 1);
        }
        loop {
            if s.get(i) != Some(&b'"') {
                return Err("a line that is not JSON");
            }
            let (key_end, _) = self.string(i + 1)?;
            i = self.ws(key_end + 1);
            if s.get(i) != Some(&b':') {
                return Err("a line that is not JSON");
            }
            let (_, after) = self.value(self.ws(i + 1), depth)?;
            i = self.ws(after);
            match s.get(i) {
                Some(b'}') => return Ok(i + 1),
                Some(b',') => i = self.ws(i + 1),
                _ => return Err("a line that is not JSON"),
            }
        }
    }

    fn array(&self, start: usize, depth: usize) -> Result<usize, Why> {
        let s = self.s;
        let mut i = self.ws(start);
        if s.get(i) == Some(&b']') {
            return Ok(i + 1);
        }
        loop {
            let (_, after) = self.value(i, depth)?;
            i = self.ws(after);
            match s.get(i) {
                Some(b']') => return Ok(i + 1),
                Some(b',') => i = self.ws(i + 1),
                _ => return Err("a line that is not JSON"),
            }
        }
    }

    /// A number at `start` (CPython's `_match_number`): the offset after it, and whether it
    /// is an integer literal.
    fn number(&self, start: usize) -> Result<(usize, bool), Why> {
        let s = self.s;
        let digit = |i: usize| s.get(i).is_some_and(u8::is_ascii_digit);
        let mut i = start;
        if s[i] == b'-' {
            i += 1;
        }
        match s.get(i) {
            Some(b'1'..=b'9') => {
                i += 1;
                while digit(i) {
                    i += 1;
                }
            }
            Some(b'0') => i += 1,
            _ => return Err("a line that is not JSON"),
        }
        let int_end = i;
        let mut int = true;
        if s.get(i) == Some(&b'.') && digit(i + 1) {
            int = false;
            i += 2;
            while digit(i) {
                i += 1;
            }
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(s.get(j), Some(b'-' | b'+')) {
                j += 1;
            }
            if digit(j) {
                while digit(j) {
                    j += 1;
                }
                int = false;
                i = j;
            }
        }
        if int && int_end - start - usize::from(s[start] == b'-') > INT_DIGITS {
            return Err("an integer longer than the native replay reads");
        }
        Ok((i, int))
    }

    /// The escape whose backslash is at `at`: its length, and its kind.
    #[inline(always)]
    fn escape(&self, at: usize) -> Result<(usize, Escapes), Why> {
        let s = self.s;
        match s.get(at + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok((2, Escapes::Plain)),
            Some(b'u') => {
                let hex = s.get(at + 2..at + 6);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return Err("a line that is not JSON");
                }
                Ok((6, Escapes::Unicode))
            }
            _ => Err("a line that is not JSON"),
        }
    }

    /// The escape whose backslash is at `at`, decoded into `out`: the bytes written, the
    /// bytes read (never fewer), and its kind; a lone surrogate is an `Err`.
    #[inline(always)]
    fn decode_escape(&self, at: usize, out: &mut [u8; 4]) -> Result<(usize, usize, Escapes), Why> {
        let s = self.s;
        let (len, kind) = self.escape(at)?;
        let (code, consumed) = escaped(&s[at..]);
        if kind == Escapes::Plain {
            out[0] = code as u8;
            return Ok((1, len, kind));
        }
        let Some(c) = char::from_u32(code) else {
            return Err("a lone surrogate in a string");
        };
        Ok((c.encode_utf8(out).len(), consumed, kind))
    }

    /// [`string`](Self::string), its content unescaped into `out` (replaced) as it is
    /// scanned: each 16 bytes are stored whole, then each escape in them decoded in place
    /// and what follows it stored again after it (one load and store an escape; JSON text
    /// held in a string has one every few bytes). `Err` for a lone surrogate too.
    fn string_into(&self, start: usize, out: &mut Vec<u8>) -> Result<(usize, Escapes), Why> {
        let s = self.s;
        out.clear();
        // Unescaping never lengthens text, so `written <= i - start` throughout (and `dst <=
        // src - start`): with this room, every 16-byte store below fits.
        out.reserve(s.len() - start + 16);
        let base = out.as_mut_ptr();
        let mut written = 0usize;
        let mut i = start;
        let mut escapes = Escapes::None;
        let mut decoded = [0u8; 4];
        while let Some(Ok(chunk)) = s.get(i..i + 16).map(<&[u8; 16]>::try_from) {
            // SAFETY: `written + 16 <= (i - start) + 16 <= capacity` (see above); the source
            // is the line, which does not overlap `out`.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), base.add(written), 16) };
            let mut stops = string_stops(chunk);
            if stops == 0 {
                i += 16;
                written += 16;
                continue;
            }
            // The chunk's stops in turn: bytes from `src` to the chunk's end stand stored
            // from `dst` on.
            let chunk_end = i + 16;
            let (mut src, mut dst) = (i, written);
            let mut reload = false;
            while stops != 0 {
                let at = i + stops.trailing_zeros() as usize;
                dst += at - src;
                match s[at] {
                    b'"' => {
                        // SAFETY: the first `dst` bytes were stored above, within capacity.
                        unsafe { out.set_len(dst) };
                        return Ok((at, escapes));
                    }
                    b'\\' => {
                        let (len, consumed, kind) = self.decode_escape(at, &mut decoded)?;
                        escapes = escapes.max(kind);
                        // SAFETY: `dst <= at - start` and `at < s.len()`, so 4 bytes from `dst`
                        // fit in the 16 reserved past `s.len() - start`; the 4 - `len` bytes
                        // past what is kept are overwritten or left past the length. (A copy
                        // of `len` bytes was a call to memcpy.)
                        unsafe {
                            std::ptr::copy_nonoverlapping(decoded.as_ptr(), base.add(dst), 4)
                        };
                        dst += len;
                        src = at + consumed;
                        match s.get(src..src + 16) {
                            Some(next) if src < chunk_end => {
                                // SAFETY: `dst + 16 <= (src - start) + 16 <= capacity`.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(next.as_ptr(), base.add(dst), 16)
                                };
                                stops &= u32::MAX << (src - i);
                            }
                            _ => {
                                reload = true;
                                break;
                            }
                        }
                    }
                    _ => return Err("a line that is not JSON"),
                }
            }
            if reload {
                (i, written) = (src, dst);
            } else {
                (i, written) = (chunk_end, dst + (chunk_end - src));
            }
        }
        // The tail (under 16 bytes to the line's end), byte by byte.
        loop {
            match s.get(i) {
                Some(b'"') => {
                    // SAFETY: as above.
                    unsafe { out.set_len(written) };
                    return Ok((i, escapes));
                }
                Some(b'\\') => {
                    let (len, consumed, kind) = self.decode_escape(i, &mut decoded)?;
                    escapes = escapes.max(kind);
                    // SAFETY: as above (`written <= i - start`, `i < s.len()`).
                    unsafe {
                        std::ptr::copy_nonoverlapping(decoded.as_ptr(), base.add(written), 4)
                    };
                    written += len;
                    i += consumed;
                }
                Some(&b) if b >= 0x20 => {
                    // SAFETY: as above, `written < capacity`.
                    unsafe { *base.add(written) = b };
                    written += 1;
                    i += 1;
                }
                _ => return Err("a line that is not JSON"),
            }
        }
    }

    /// A string whose content starts at `start`: the offset of its closing quote, and
    /// what escapes it holds. Each 16 bytes are loaded once and their stops walked in turn,
    /// escapes too (a string of JSON text has one every few bytes).
    #[inline]
    fn string(&self, start: usize) -> Result<(usize, Escapes), Why> {
        let s = self.s;
        let mut i = start;
        let mut escapes = Escapes::None;
        while let Some(Ok(chunk)) = s.get(i..i + 16).map(<&[u8; 16]>::try_from) {
            let mut stops = string_stops(chunk);
            let mut advance = 16;
            while stops != 0 {
                let k = stops.trailing_zeros() as usize;
                match chunk[k] {
                    b'"' => return Ok((i + k, escapes)),
                    // The commonest escape of JSON text in a string, inside the chunk.
                    b'\\' if k < 15 && chunk[k + 1] == b'"' => {
                        escapes = escapes.max(Escapes::Plain);
                        stops &= u32::MAX << (k + 2);
                    }
                    b'\\' => {
                        let (len, kind) = self.escape(i + k)?;
                        escapes = escapes.max(kind);
                        if k + len >= 16 {
                            advance = k + len;
                            break;
                        }
                        stops &= u32::MAX << (k + len);
                    }
                    _ => return Err("a line that is not JSON"),
                }
            }
            i += advance;
        }
        self.string_scalar(i, escapes)
    }

    /// [`string`](Self::string) from `i` on, a stop at a time: its tail, and its twin.
    fn string_scalar(&self, mut i: usize, mut escapes: Escapes) -> Result<(usize, Escapes), Why> {
        let s = self.s;
        loop {
            i = string_stop(s, i);
            match s.get(i) {
                Some(b'"') => return Ok((i, escapes)),
                Some(b'\\') => {
                    let (len, kind) = self.escape(i)?;
                    escapes = escapes.max(kind);
                    i += len;
                }
                // A control character, or the end of the line.
                _ => return Err("a line that is not JSON"),
            }
        }
    }
}

/// The offset of the first `needle` in `haystack` (a `memchr`).
#[inline]
pub fn find(needle: u8, haystack: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(Ok(chunk)) = haystack.get(i..i + 16).map(<&[u8; 16]>::try_from) {
        let found = equal_mask(chunk, needle);
        if found != 0 {
            return Some(i + found.trailing_zeros() as usize);
        }
        i += 16;
    }
    haystack[i..]
        .iter()
        .position(|&b| b == needle)
        .map(|at| i + at)
}

/// Bit k set when byte k of `chunk` is `needle`.
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[inline(always)]
fn equal_mask(chunk: &[u8; 16], needle: u8) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is always available on x86_64; the load reads exactly `chunk`.
    unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
        _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(needle as i8))) as u32
    }
}

#[cfg(not(all(target_arch = "x86_64", not(feature = "portable"))))]
fn equal_mask(chunk: &[u8; 16], needle: u8) -> u32 {
    chunk
        .iter()
        .enumerate()
        .fold(0, |mask, (k, &b)| mask | u32::from(b == needle) << k)
}

/// The code point of the escape `raw` begins with (its backslash; an escape the scanner
/// accepted) and the bytes it spans. An escaped high surrogate followed by an escaped low one
/// is one character, as in CPython; any other surrogate is itself.
#[inline(always)]
fn escaped(raw: &[u8]) -> (u32, usize) {
    let code = match raw[1] {
        b'u' => json::hex4(&raw[2..6]).unwrap_or(0),
        b'b' => return (0x08, 2),
        b'f' => return (0x0c, 2),
        b'n' => return (u32::from(b'\n'), 2),
        b'r' => return (u32::from(b'\r'), 2),
        b't' => return (u32::from(b'\t'), 2),
        other => return (u32::from(other), 2), // '"', '\\', '/'
    };
    if (0xd800..=0xdbff).contains(&code) && raw.get(6..8) == Some(b"\\u") {
        if let Some(low) = raw.get(8..12).and_then(json::hex4) {
            if (0xdc00..=0xdfff).contains(&low) {
                return (0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00), 12);
            }
        }
    }
    (code, 6)
}

/// Appends the content of a string the scanner accepted (`raw`: between its quotes),
/// unescaped as `json.loads` does; `false` when that leaves a lone surrogate (WTF-8, not
/// UTF-8: text the native replay leaves to the per-call path).
pub fn unescape(raw: &[u8], out: &mut Vec<u8>) -> bool {
    let mut utf8 = true;
    let mut i = 0;
    while i < raw.len() {
        let Some(at) = find(b'\\', &raw[i..]) else {
            out.extend_from_slice(&raw[i..]);
            break;
        };
        push_short(out, &raw[i..i + at]);
        let (code, consumed) = escaped(&raw[i + at..]);
        i += at + consumed;
        if code < 0x80 {
            out.push(code as u8); // '\"', '\\', '\n'...: most escapes in JSON text
            continue;
        }
        match char::from_u32(code) {
            Some(c) => {
                let mut buffer = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            }
            None => {
                utf8 = false; // a lone surrogate
                crate::canon::push_wtf8(out, code);
            }
        }
    }
    utf8
}

/// `out.extend_from_slice(bytes)`, for the short runs between escapes of JSON text held in
/// a string (a call to `memcpy` each cost more than the copy).
#[inline(always)]
fn push_short(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() > 32 {
        out.extend_from_slice(bytes);
        return;
    }
    out.reserve(bytes.len());
    for &b in bytes {
        out.push(b);
    }
}

/// `str(int(literal))` of an integer literal: the literal, but `-0` is `0`.
pub fn int_text(literal: &[u8]) -> &[u8] {
    if literal == b"-0" {
        b"0"
    } else {
        literal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(line: &str) -> Result<Fields<'_>, Why> {
        let mut found = Fields::default();
        scan(line.as_bytes(), &mut found).map(|()| found)
    }

    #[test]
    fn members_are_found_the_last_of_duplicates_kept() {
        let line = r#" {"run": "a", "tool":"t", "args": {"q": [1, 2.5, null]}, "tool": "u", "x": {"tool": 1}}"#;
        let found = fields(line).expect("read");
        assert_eq!(found.run.map(|v| v.raw), Some(&b"a"[..]));
        assert_eq!(found.tool.map(|v| v.raw), Some(&b"u"[..]));
        let args = found.args.expect("args");
        assert_eq!(
            (args.kind, args.raw),
            (Kind::Object, &br#"{"q": [1, 2.5, null]}"#[..])
        );
        assert!(found.result.is_none());
    }

    #[test]
    fn what_json_loads_refuses_is_refused() {
        for bad in [
            "{",
            "{}}",
            r#"{"a": 01}"#,
            r#"{"a": 1.}"#,
            r#"{"a": -}"#,
            r#"{"a": [1,]}"#,
            r#"{"a": 1,}"#,
            "{\"a\": \"tab\there\"}",
            r#"{"a": "\x"}"#,
            r#"{"a": "\u12"}"#,
            r#"{"a": tru}"#,
            r#"{'a': 1}"#,
            r#"{"a" 1}"#,
            "[1]",
            "{\"a\": 1}\u{a0}",
        ] {
            assert!(fields(bad).is_err(), "{bad}");
        }
        for good in [
            "{}",
            r#"{"a": NaN, "b": -Infinity, "c": 1e5, "d": -0, "e": 1.5E+3, "f": "\ud800"}"#,
            "\t{\"a\" : [ ] , \"b\":{ }}\r",
        ] {
            assert!(fields(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn numbers_have_kinds_and_long_integers_are_refused() {
        let found = fields(r#"{"run": -0, "call_id": 1e2, "model": 12}"#).expect("read");
        assert_eq!(found.run.map(|v| v.kind), Some(Kind::Int));
        assert_eq!(found.call_id.map(|v| v.kind), Some(Kind::Float));
        assert_eq!(int_text(found.run.expect("run").raw), b"0");
        let long = format!("{{\"a\": {}}}", "9".repeat(INT_DIGITS + 1));
        assert!(fields(&long).is_err());
        let deep = format!(
            "{{\"a\": {}{}}}",
            "[".repeat(DEPTH_LIMIT),
            "]".repeat(DEPTH_LIMIT)
        );
        assert!(fields(&deep).is_err());
    }

    #[test]
    fn decoding_while_scanning_is_unescaping_after() {
        let mut next = crate::test_rng::xorshift(0xdec0);
        let pieces: [&str; 9] = [
            "a",
            "é",
            "\\\"",
            "\\\\",
            "\\n",
            "\\u00e9",
            "\\ud83d\\ude00",
            "\\u0041",
            " ",
        ];
        for _ in 0..3000 {
            let len = (next() % 60) as usize;
            let content: String = (0..len).map(|_| pieces[(next() % 9) as usize]).collect();
            let line = format!(
                "{{\"x\": 1, \"result\": \"{content}\", \"args\": {{\"a\": \"{content}\"}}}}"
            );
            let mut fields = Fields::default();
            let mut decoded = Decoded::default();
            scan_decoding(line.as_bytes(), &mut fields, Some(&mut decoded)).expect("read");
            let mut expected = Vec::new();
            assert!(unescape(content.as_bytes(), &mut expected));
            assert_eq!(decoded.result, expected, "{content}");
            let result = fields.result.expect("result");
            assert!(result.decoded && result.raw == content.as_bytes());
            assert!(!fields.args.expect("args").decoded);
        }
        let mut fields = Fields::default();
        let lone = scan_decoding(
            br#"{"result": "a\ud800b"}"#,
            &mut fields,
            Some(&mut Decoded::default()),
        );
        assert!(lone.is_err());
    }

    #[test]
    fn string_scans_as_its_scalar_twin() {
        let mut next = crate::test_rng::xorshift(0x57a7);
        let pieces: [&[u8]; 12] = [
            b"a",
            b"\xc3\xa9",
            b"\\\"",
            b"\\\\",
            b"\\n",
            b"\\u00e9",
            b"\\ud800",
            b"\"",
            b"\\x",
            b"\\u12",
            b"\x01",
            b"abcdefghijklmno",
        ];
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let mut text: Vec<u8> = (0..len)
                .flat_map(|_| pieces[(next() % 12) as usize].iter().copied())
                .collect();
            if !next().is_multiple_of(4) {
                text.push(b'"');
            }
            let scanner = Scanner { s: &text };
            let expected = scanner.string_scalar(0, Escapes::None);
            assert_eq!(
                scanner.string(0),
                expected,
                "{:?}",
                String::from_utf8_lossy(&text)
            );
            let mut out = Vec::new();
            let decoded = scanner.string_into(0, &mut out);
            match expected {
                Ok((end, _)) => {
                    let mut reference = Vec::new();
                    let utf8 = unescape(&text[..end], &mut reference);
                    match decoded {
                        Ok(found) => {
                            assert!(utf8);
                            assert_eq!((found, &out), (expected.expect("ok"), &reference));
                        }
                        Err(_) => assert!(!utf8, "{:?}", String::from_utf8_lossy(&text)),
                    }
                }
                Err(_) => assert!(decoded.is_err()),
            }
        }
    }

    #[test]
    fn refused_lines_are_worded_as_decode_line_words_them() {
        let problem = |line: &[u8]| match refused(line) {
            Refused::Problem(message) => message,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            problem(b"not json"),
            "not JSON (Expecting value at column 1)"
        );
        assert_eq!(
            problem(b"  {\"run\": \"a\", \"tool\": \"x\""),
            "not JSON (Expecting ',' delimiter at column 25)"
        );
        assert_eq!(problem(b"{} {}"), "not JSON (extra data at column 3)");
        assert_eq!(
            problem("\u{3000}{\"é\": tru}".as_bytes()),
            "not JSON (Expecting value at column 7)"
        );
        assert_eq!(problem(b"{\"a\": \"\xff\"}"), "not UTF-8 text (byte 7)");
        assert_eq!(refused("\u{a0} \u{2028}".as_bytes()), Refused::Blank);
        assert_eq!(refused(b"[1, 2]"), Refused::Unsupported);
        assert_eq!(
            refused("\u{a0}{\"tool\": \"x\"}".as_bytes()),
            Refused::Unsupported
        );
    }

    #[test]
    fn find_is_the_first_position() {
        let mut next = crate::test_rng::xorshift(0x5eed);
        for _ in 0..2000 {
            let len = (next() % 80) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| [b'a', b'\n', 0xff][(next() % 3) as usize])
                .collect();
            for needle in [b'\n', 0xff, b'z'] {
                let scalar = bytes.iter().position(|&b| b == needle);
                assert_eq!(find(needle, &bytes), scalar, "{bytes:?}");
            }
        }
    }

    #[test]
    fn strings_unescape_as_json_loads_does() {
        let mut out = Vec::new();
        assert!(unescape(br#"a\"b\\c\/\n\u00e9\ud83d\ude00"#, &mut out));
        assert_eq!(out, "a\"b\\c/\né😀".as_bytes());
        out.clear();
        assert!(!unescape(br#"x\ud800y"#, &mut out));
        assert!(blank(b" \t\r\n"));
        assert!(!blank(b" x\n"));
    }
}
