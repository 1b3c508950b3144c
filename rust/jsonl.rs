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

use crate::json::MIN_INT_DIGIT_LIMIT;

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

/// The top-level members of a line holding one JSON object (its newline removed) into
/// `fields`; `Err`: not such a line, or not one read natively.
pub fn scan<'a>(line: &'a [u8], fields: &mut Fields<'a>) -> Result<(), Why> {
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
            let (key_end, key_escaped) = scanner.string(i + 1)?;
            let key = &s[i + 1..key_end];
            i = scanner.ws(key_end + 1);
            if s.get(i) != Some(&b':') {
                return Err("a line that is not JSON");
            }
            i = scanner.ws(i + 1);
            let (value, after) = scanner.value(i, 1)?;
            let slot = if key_escaped {
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
                },
                i + len,
            ))
        };
        match c {
            b'"' => {
                let (end, escaped) = self.string(i + 1)?;
                Ok((
                    Value {
                        kind: Kind::Str,
                        raw: &s[i + 1..end],
                        escaped,
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

    /// A string whose content starts at `start`: the offset of its closing quote, and
    /// whether it holds an escape.
    #[inline]
    fn string(&self, start: usize) -> Result<(usize, bool), Why> {
        let s = self.s;
        let mut i = start;
        let mut escaped = false;
        loop {
            i = string_stop(s, i);
            match s.get(i) {
                Some(b'"') => return Ok((i, escaped)),
                Some(b'\\') => {
                    escaped = true;
                    match s.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            let hex = s.get(i + 2..i + 6);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return Err("a line that is not JSON");
                            }
                            i += 6;
                        }
                        _ => return Err("a line that is not JSON"),
                    }
                }
                // A control character, or the end of the line.
                _ => return Err("a line that is not JSON"),
            }
        }
    }
}

/// The first offset from `i` on that ends a run of a string's plain characters: a quote,
/// a backslash, a control character, or the end of the text.
#[inline(always)]
fn string_stop(s: &[u8], mut i: usize) -> usize {
    while let Some(Ok(chunk)) = s.get(i..i + 16).map(<&[u8; 16]>::try_from) {
        let stops = string_stops(chunk);
        if stops != 0 {
            return i + stops.trailing_zeros() as usize;
        }
        i += 16;
    }
    while i < s.len() && s[i] != b'"' && s[i] != b'\\' && s[i] >= 0x20 {
        i += 1;
    }
    i
}

/// Bit k set when byte k of `chunk` is a quote, a backslash or a control character.
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[inline(always)]
fn string_stops(chunk: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: SSE2 is always available on x86_64; the load reads exactly `chunk`.
    unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
        // Unsigned `v < 0x20` is `min(v, 0x1f) == v`.
        let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        _mm_movemask_epi8(_mm_or_si128(control, _mm_or_si128(quote, backslash))) as u32
    }
}

#[cfg(not(all(target_arch = "x86_64", not(feature = "portable"))))]
fn string_stops(chunk: &[u8; 16]) -> u32 {
    chunk.iter().enumerate().fold(0, |mask, (k, &b)| {
        mask | u32::from(b == b'"' || b == b'\\' || b < 0x20) << k
    })
}

fn hex4(digits: &[u8]) -> u32 {
    digits.iter().fold(0u32, |acc, &d| {
        acc << 4 | (d as char).to_digit(16).unwrap_or(0)
    })
}

/// Appends the content of a string the scanner accepted (`raw`: between its quotes),
/// unescaped as `json.loads` does; `false` when that leaves a lone surrogate (WTF-8, not
/// UTF-8: text the native replay leaves to the per-call path).
pub fn unescape(raw: &[u8], out: &mut Vec<u8>) -> bool {
    let mut utf8 = true;
    let mut i = 0;
    while i < raw.len() {
        let Some(at) = raw[i..].iter().position(|&b| b == b'\\') else {
            out.extend_from_slice(&raw[i..]);
            break;
        };
        out.extend_from_slice(&raw[i..i + at]);
        i += at + 1;
        let escape = raw[i];
        if escape != b'u' {
            out.push(match escape {
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                other => other, // '"', '\\', '/'
            });
            i += 1;
            continue;
        }
        let mut code = hex4(&raw[i + 1..i + 5]);
        i += 5;
        // A high surrogate followed by an escaped low one is one character (as in CPython).
        if (0xd800..=0xdbff).contains(&code)
            && raw.get(i..i + 2) == Some(b"\\u")
            && i + 6 <= raw.len()
        {
            let low = hex4(&raw[i + 2..i + 6]);
            if (0xdc00..=0xdfff).contains(&low) {
                code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                i += 6;
            }
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
