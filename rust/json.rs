//! Canonical bytes straight from JSON text, equal to what `json.loads` followed by the key
//! contract would give, without building Python objects (DESIGN.md §1, `call_key_json`).
//!
//! The parser follows CPython's `_json` scanner step for step, so it accepts exactly what
//! `json.loads` accepts (NaN and Infinity, lone `\ud800` escapes, duplicate keys with the last
//! one winning) and reports the same message at the same position where it does not.
//! Input is WTF-8: UTF-8 that may also encode lone surrogates, as a Python `str` can hold.

use std::borrow::Cow;

use crate::canon::{self, Text};

/// Open containers the parser accepts before giving up with [`JsonError::TooDeep`]. About
/// where `json.loads` hits Python's recursion limit; far more than the key contract's
/// 256 levels, so texts with a syntax error below that still report the syntax error.
pub const PARSE_DEPTH_LIMIT: usize = 1000;

/// The smallest non-zero value of Python's `sys.get_int_max_str_digits()`. Integers longer
/// than this are reported, so the caller can check them against the limit in force.
pub const MIN_INT_DIGIT_LIMIT: usize = 640;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// What `json.JSONDecodeError` says, at a byte offset (convert with [`char_index`]).
    Syntax { msg: &'static str, pos: usize },
    /// Nesting too deep: while parsing, or deeper than the key contract's limit.
    TooDeep,
    /// An integer with more digits than the caller's limit (Python's int/str conversion limit).
    IntTooLong { digits: usize },
}

/// The character index of byte offset `pos` in WTF-8 text, as Python counts positions.
pub fn char_index(text: &[u8], pos: usize) -> usize {
    text[..pos.min(text.len())]
        .iter()
        .filter(|&&b| (b & 0xc0) != 0x80)
        .count()
}

/// True when `bytes` is UTF-8 in which encoded surrogates may also appear (what Python's
/// `bytes.decode("utf-8", "surrogatepass")` accepts).
pub fn is_wtf8(bytes: &[u8]) -> bool {
    if std::str::from_utf8(bytes).is_ok() {
        return true;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (len, min, max) = match b {
            0x00..=0x7f => {
                i += 1;
                continue;
            }
            0xc2..=0xdf => (2, 0x80, 0x7ff),
            0xe0..=0xef => (3, 0x800, 0xffff),
            0xf0..=0xf4 => (4, 0x10000, 0x10ffff),
            _ => return false,
        };
        let Some(tail) = bytes.get(i + 1..i + len) else {
            return false;
        };
        if tail.iter().any(|&t| (t & 0xc0) != 0x80) {
            return false;
        }
        let lead_bits = u32::from(b) & (0x7f >> len);
        let c = tail
            .iter()
            .fold(lead_bits, |acc, &t| (acc << 6) | u32::from(t & 0x3f));
        if c < min || c > max {
            return false;
        }
        i += len;
    }
    true
}

enum Value<'a> {
    Null,
    Bool(bool),
    /// The literal's text (`-?(0|[1-9][0-9]*)`), which Python's int() and str() preserve
    /// except for `-0`.
    Int(&'a [u8]),
    Float(f64),
    Str(Cow<'a, [u8]>),
    Array(Vec<Value<'a>>),
    Object(Vec<(Cow<'a, [u8]>, Value<'a>)>),
}

struct Parser<'a> {
    s: &'a [u8],
    int_digit_limit: usize,
}

type Parsed<'a> = Result<(Value<'a>, usize), JsonError>;

fn syntax<T>(msg: &'static str, pos: usize) -> Result<T, JsonError> {
    Err(JsonError::Syntax { msg, pos })
}

impl<'a> Parser<'a> {
    fn skip_ws(&self, mut i: usize) -> usize {
        while i < self.s.len() && matches!(self.s[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    }

    fn document(&self) -> Result<Value<'a>, JsonError> {
        let start = self.skip_ws(0);
        let (value, end) = self.value(start, 0)?;
        let end = self.skip_ws(end);
        if end != self.s.len() {
            return syntax("Extra data", end);
        }
        Ok(value)
    }

    fn value(&self, i: usize, depth: usize) -> Parsed<'a> {
        let s = self.s;
        let Some(&c) = s.get(i) else {
            return syntax("Expecting value", i);
        };
        let rest = &s[i..];
        match c {
            b'"' => self
                .string(i + 1)
                .map(|(text, end)| (Value::Str(text), end)),
            b'{' | b'[' => {
                if depth >= PARSE_DEPTH_LIMIT {
                    return Err(JsonError::TooDeep);
                }
                if c == b'{' {
                    self.object(i + 1, depth + 1)
                } else {
                    self.array(i + 1, depth + 1)
                }
            }
            b'n' if rest.starts_with(b"null") => Ok((Value::Null, i + 4)),
            b't' if rest.starts_with(b"true") => Ok((Value::Bool(true), i + 4)),
            b'f' if rest.starts_with(b"false") => Ok((Value::Bool(false), i + 5)),
            b'N' if rest.starts_with(b"NaN") => Ok((Value::Float(f64::NAN), i + 3)),
            b'I' if rest.starts_with(b"Infinity") => Ok((Value::Float(f64::INFINITY), i + 8)),
            b'-' if rest.starts_with(b"-Infinity") => Ok((Value::Float(f64::NEG_INFINITY), i + 9)),
            _ => self.number(i),
        }
    }

    fn number(&self, start: usize) -> Parsed<'a> {
        let s = self.s;
        let len = s.len();
        let digit = |i: usize| s.get(i).is_some_and(u8::is_ascii_digit);
        let mut i = start;
        if s[i] == b'-' {
            i += 1;
            if i >= len {
                return syntax("Expecting value", start);
            }
        }
        match s[i] {
            b'1'..=b'9' => {
                i += 1;
                while digit(i) {
                    i += 1;
                }
            }
            b'0' => i += 1,
            _ => return syntax("Expecting value", start),
        }
        let int_end = i;
        let mut is_float = false;
        if i + 1 < len && s[i] == b'.' && digit(i + 1) {
            is_float = true;
            i += 2;
            while digit(i) {
                i += 1;
            }
        }
        if i + 1 < len && (s[i] == b'e' || s[i] == b'E') {
            let e_start = i;
            i += 1;
            if i + 1 < len && (s[i] == b'-' || s[i] == b'+') {
                i += 1;
            }
            while digit(i) {
                i += 1;
            }
            if digit(i - 1) {
                is_float = true;
            } else {
                i = e_start;
            }
        }
        let literal = &s[start..i];
        if is_float {
            // The literal is ASCII by construction, and Rust's parse rounds correctly, as
            // Python's float() does; huge exponents give ±inf and tiny ones 0, as in Python.
            let text = std::str::from_utf8(literal).unwrap_or("nan");
            let value = text.parse::<f64>().unwrap_or(f64::NAN);
            return Ok((Value::Float(value), i));
        }
        let digits = int_end - start - usize::from(s[start] == b'-');
        if digits > self.int_digit_limit {
            return Err(JsonError::IntTooLong { digits });
        }
        Ok((Value::Int(literal), i))
    }

    /// A string whose opening quote is at `start - 1`; returns its WTF-8 content and the
    /// offset after the closing quote.
    fn string(&self, start: usize) -> Result<(Cow<'a, [u8]>, usize), JsonError> {
        let s = self.s;
        let len = s.len();
        let begin = start - 1;
        let mut owned: Option<Vec<u8>> = None;
        let mut chunk = start;
        let mut i = start;
        loop {
            while i < len && s[i] != b'"' && s[i] != b'\\' && s[i] >= 0x20 {
                i += 1;
            }
            if i >= len {
                return syntax("Unterminated string starting at", begin);
            }
            match s[i] {
                b'"' => {
                    let text = match owned {
                        None => Cow::Borrowed(&s[start..i]),
                        Some(mut buffer) => {
                            buffer.extend_from_slice(&s[chunk..i]);
                            Cow::Owned(buffer)
                        }
                    };
                    return Ok((text, i + 1));
                }
                b'\\' => {}
                _ => return syntax("Invalid control character at", i),
            }
            let buffer = owned.get_or_insert_with(Vec::new);
            buffer.extend_from_slice(&s[chunk..i]);
            i += 1;
            let Some(&escape) = s.get(i) else {
                return syntax("Unterminated string starting at", begin);
            };
            if escape != b'u' {
                buffer.push(match escape {
                    b'"' | b'\\' | b'/' => escape,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    _ => return syntax("Invalid \\escape", i - 1),
                });
                i += 1;
            } else {
                let first = i + 1;
                let end = first + 4;
                if end >= len {
                    return syntax("Invalid \\uXXXX escape", i);
                }
                let mut code = hex4(&s[first..end]).ok_or(JsonError::Syntax {
                    msg: "Invalid \\uXXXX escape",
                    pos: i,
                })?;
                i = end;
                // A high surrogate followed by an escaped low one is one character; any other
                // surrogate stays as it is, as in Python.
                if (0xd800..=0xdbff).contains(&code)
                    && end + 6 < len
                    && s[end] == b'\\'
                    && s[end + 1] == b'u'
                {
                    let low = hex4(&s[end + 2..end + 6]).ok_or(JsonError::Syntax {
                        msg: "Invalid \\uXXXX escape",
                        pos: end + 1,
                    })?;
                    if (0xdc00..=0xdfff).contains(&low) {
                        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                        i = end + 6;
                    }
                }
                canon::push_wtf8(buffer, code);
            }
            chunk = i;
        }
    }

    fn object(&self, start: usize, depth: usize) -> Parsed<'a> {
        let s = self.s;
        let mut entries = Vec::new();
        let mut i = self.skip_ws(start);
        if s.get(i) != Some(&b'}') {
            loop {
                if s.get(i) != Some(&b'"') {
                    return syntax("Expecting property name enclosed in double quotes", i);
                }
                let (key, after_key) = self.string(i + 1)?;
                i = self.skip_ws(after_key);
                if s.get(i) != Some(&b':') {
                    return syntax("Expecting ':' delimiter", i);
                }
                i = self.skip_ws(i + 1);
                let (value, after_value) = self.value(i, depth)?;
                entries.push((key, value));
                i = self.skip_ws(after_value);
                if s.get(i) == Some(&b'}') {
                    break;
                }
                if s.get(i) != Some(&b',') {
                    return syntax("Expecting ',' delimiter", i);
                }
                i = self.skip_ws(i + 1);
            }
        }
        Ok((Value::Object(entries), i + 1))
    }

    fn array(&self, start: usize, depth: usize) -> Parsed<'a> {
        let s = self.s;
        let mut items = Vec::new();
        let mut i = self.skip_ws(start);
        if s.get(i) != Some(&b']') {
            loop {
                let (value, after) = self.value(i, depth)?;
                items.push(value);
                i = self.skip_ws(after);
                if s.get(i) == Some(&b']') {
                    break;
                }
                if s.get(i) != Some(&b',') {
                    return syntax("Expecting ',' delimiter", i);
                }
                i = self.skip_ws(i + 1);
            }
        }
        Ok((Value::Array(items), i + 1))
    }
}

fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = (d as char).to_digit(16)?;
        Some(acc << 4 | v)
    })
}

/// Writes the normalised form of a parsed value (DESIGN.md §1).
struct Writer<'v> {
    volatile: &'v [Vec<u8>],
    out: Vec<u8>,
}

impl Writer<'_> {
    fn value(&mut self, value: &mut Value<'_>, depth: usize) -> Result<(), JsonError> {
        match value {
            Value::Null => self.out.extend_from_slice(b"null"),
            Value::Bool(true) => self.out.extend_from_slice(b"true"),
            Value::Bool(false) => self.out.extend_from_slice(b"false"),
            Value::Int(literal) => {
                let literal: &[u8] = if *literal == b"-0" { b"0" } else { literal };
                self.out.extend_from_slice(literal);
            }
            Value::Float(f) => canon::write_float(&mut self.out, *f),
            Value::Str(text) => canon::write_collapsed_str(&mut self.out, Text::Wtf8(text)),
            Value::Array(items) => {
                if depth >= canon::MAX_DEPTH {
                    return Err(JsonError::TooDeep);
                }
                self.out.push(b'[');
                for (n, item) in items.iter_mut().enumerate() {
                    if n > 0 {
                        self.out.push(b',');
                    }
                    self.value(item, depth + 1)?;
                }
                self.out.push(b']');
            }
            Value::Object(entries) => {
                if depth >= canon::MAX_DEPTH {
                    return Err(JsonError::TooDeep);
                }
                // Stable, so that among duplicate keys the last one written stays last: it is
                // the one `json.loads` keeps. WTF-8 byte order is code-point order.
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                self.out.push(b'{');
                let mut first = true;
                for i in 0..entries.len() {
                    let is_last_of_key =
                        entries.get(i + 1).is_none_or(|next| next.0 != entries[i].0);
                    let (key, value) = &mut entries[i];
                    if !is_last_of_key
                        || matches!(value, Value::Null)
                        || self.volatile.iter().any(|v| v.as_slice() == &**key)
                    {
                        continue;
                    }
                    if !first {
                        self.out.push(b',');
                    }
                    first = false;
                    canon::write_str(&mut self.out, Text::Wtf8(key));
                    self.out.push(b':');
                    self.value(value, depth + 1)?;
                }
                self.out.push(b'}');
            }
        }
        Ok(())
    }
}

/// The canonical bytes of `{"tool": name, "args": json.loads(text)}` after normalising.
///
/// `text` must be WTF-8 (the caller decodes and checks bytes as `json.loads` would);
/// `volatile` holds the WTF-8 names of the keys to drop; integers longer than
/// `int_digit_limit` digits are refused as Python refuses them.
pub fn canonical_call(
    name: Text<'_>,
    text: &[u8],
    volatile: &[Vec<u8>],
    int_digit_limit: usize,
) -> Result<Vec<u8>, JsonError> {
    let parser = Parser {
        s: text,
        int_digit_limit,
    };
    let mut value = parser.document()?;
    let mut writer = Writer {
        volatile,
        out: Vec::with_capacity(text.len() + 32),
    };
    writer.out.extend_from_slice(b"{\"args\":");
    writer.value(&mut value, 0)?;
    writer.out.extend_from_slice(b",\"tool\":");
    canon::write_str(&mut writer.out, name);
    writer.out.push(b'}');
    Ok(writer.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> Result<String, JsonError> {
        let volatile = vec![b"request_id".to_vec()];
        canonical_call(Text::Latin1(b"t"), text.as_bytes(), &volatile, 4300)
            .map(|bytes| String::from_utf8(bytes).unwrap())
    }

    fn error_at(text: &str) -> (&'static str, usize) {
        match canonical(text) {
            Err(JsonError::Syntax { msg, pos }) => (msg, char_index(text.as_bytes(), pos)),
            other => panic!("expected a syntax error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn normalises_like_the_contract() {
        assert_eq!(
            canonical(r#" {"since":"15m", "service" : "checkout ", "level":"error", "x": null, "request_id": 7} "#)
                .unwrap(),
            r#"{"args":{"level":"error","service":"checkout","since":"15m"},"tool":"t"}"#
        );
        assert_eq!(
            canonical(r#"[1.0, 1e2, -0, -0.0, 2.5, 1e-5, NaN, -Infinity, 1e400, true, null]"#)
                .unwrap(),
            r#"{"args":[1,100,0,0,2.5,1e-05,NaN,-Infinity,Infinity,true,null],"tool":"t"}"#
        );
    }

    #[test]
    fn duplicate_keys_keep_the_last_value() {
        assert_eq!(
            canonical(r#"{"a":1,"a":2}"#).unwrap(),
            r#"{"args":{"a":2},"tool":"t"}"#
        );
        assert_eq!(
            canonical(r#"{"a":1,"a":null}"#).unwrap(),
            r#"{"args":{},"tool":"t"}"#
        );
    }

    #[test]
    fn escapes_and_surrogates() {
        assert_eq!(
            canonical(r#""\ud83d\ude00 \ud800 \u00e9\t\/""#).unwrap(),
            r#"{"args":"\ud83d\ude00 \ud800 \u00e9 /","tool":"t"}"#
        );
    }

    #[test]
    fn errors_match_json_loads() {
        let cases = [
            (r#""\x""#, "Invalid \\escape", 1),
            (r#""\u12G4""#, "Invalid \\uXXXX escape", 2),
            (r#""\u12"#, "Invalid \\uXXXX escape", 2),
            (r#""abc"#, "Unterminated string starting at", 0),
            ("\"a\u{1}\"", "Invalid control character at", 2),
            ("[", "Expecting value", 1),
            ("[1,", "Expecting value", 3),
            ("{", "Expecting property name enclosed in double quotes", 1),
            (r#"{"a""#, "Expecting ':' delimiter", 4),
            (
                r#"{"a":1,}"#,
                "Expecting property name enclosed in double quotes",
                7,
            ),
            ("[1 2]", "Expecting ',' delimiter", 3),
            ("1.", "Extra data", 1),
            ("-", "Expecting value", 0),
            ("01", "Extra data", 1),
            ("nul", "Expecting value", 0),
            (r#""\ud800\u12x4""#, "Invalid \\uXXXX escape", 8),
            (r#""\ud800\x""#, "Invalid \\escape", 7),
            (r#""\ud800\u""#, "Invalid \\uXXXX escape", 8),
            ("", "Expecting value", 0),
            (" ", "Expecting value", 1),
            ("[1]x", "Extra data", 3),
            ("\"é\" x", "Extra data", 4),
        ];
        for (text, msg, pos) in cases {
            assert_eq!(error_at(text), (msg, pos), "{text:?}");
        }
    }

    #[test]
    fn depth_and_int_limits() {
        let deep = "[".repeat(PARSE_DEPTH_LIMIT + 1);
        assert_eq!(canonical(&deep), Err(JsonError::TooDeep));
        let ok = format!("{}{}", "[".repeat(256), "]".repeat(256));
        assert!(canonical(&ok).is_ok());
        let too_deep = format!("{}{}", "[".repeat(257), "]".repeat(257));
        assert_eq!(canonical(&too_deep), Err(JsonError::TooDeep));
        let invalid_deep = format!("{}x", "[".repeat(300));
        assert!(matches!(
            canonical(&invalid_deep),
            Err(JsonError::Syntax { .. })
        ));
        let long = "9".repeat(4301);
        assert_eq!(
            canonical(&long),
            Err(JsonError::IntTooLong { digits: 4301 })
        );
    }

    #[test]
    fn wtf8_validation_accepts_surrogates_only() {
        assert!(is_wtf8("é😀".as_bytes()));
        assert!(is_wtf8(&[0xed, 0xa0, 0x80]));
        assert!(!is_wtf8(&[0xc0, 0x80]));
        assert!(!is_wtf8(&[0xe0, 0x80, 0x80]));
        assert!(!is_wtf8(&[0xff]));
        assert!(!is_wtf8(&[0xe2, 0x82]));
    }
}
