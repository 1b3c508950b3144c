//! Canonical bytes straight from JSON text, equal to what `json.loads` followed by the key
//! contract would give, without building Python objects (docs/design/key.md, `call_key_json`).
//!
//! The parser follows CPython's `_json` scanner step for step, so it accepts exactly what
//! `json.loads` accepts (NaN and Infinity, lone `\ud800` escapes, duplicate keys with the last
//! one winning) and reports the same message at the same position where it does not.
//! Input is WTF-8: UTF-8 that may also encode lone surrogates, as a Python `str` can hold.

use smallvec::SmallVec;

use crate::canon::{self, Text};
use crate::numbers;

/// Opening a container deeper than this stops the parse with [`JsonError::TooDeep`], the key
/// contract's RecursionError, even under a volatile key and whatever follows (the
/// reference's `_keys.loads` applies the same rule, so neither ever asks `json.loads` to go
/// as deep as Python's recursion limit, which depends on the caller's stack). The parser
/// never recurses deeper than this.
pub const PARSE_DEPTH_LIMIT: usize = canon::MAX_DEPTH;

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

/// Where a decoded string lives: in the input (no escapes) or in the scratch arena.
#[derive(Clone, Copy)]
enum Str {
    Input(usize, usize),
    Arena(usize, usize),
}

/// One member of an object being written: its key, and where its `"key":value` text sits
/// in the output (`start == end` for a member dropped because its value is null, which
/// still counts when a later duplicate key is resolved).
#[derive(Clone, Copy)]
struct Member {
    key: Str,
    /// The key's first 8 bytes, big-endian, zero-padded ([`key_prefix`]).
    prefix: u64,
    start: usize,
    end: usize,
}

/// The first 8 bytes of `key` as a big-endian number, zeros past its end: keys whose
/// prefixes differ are in the order of their prefixes (a key that ends early pads with the
/// smallest byte), so most comparisons of keys are one comparison of numbers.
#[inline]
fn key_prefix(key: &[u8]) -> u64 {
    if let Some(first) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*first);
    }
    // Byte by byte: a variable-length copy into a zeroed array was a call to memcpy.
    key.iter()
        .enumerate()
        .fold(0, |prefix, (i, &b)| prefix | u64::from(b) << (56 - 8 * i))
}

/// [`key_prefix`] of the `len` bytes of `text` from `at`: one load where 8 bytes can be
/// read from there (a key in the text is followed by its closing quote at least).
#[inline]
fn prefix_at(text: &[u8], at: usize, len: usize) -> u64 {
    match text.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        Some(first) if len > 0 => {
            let bytes = u64::from_be_bytes(*first);
            bytes & !(u64::MAX.checked_shr(8 * len as u32).unwrap_or(0))
        }
        _ => key_prefix(&text[at..at + len]),
    }
}

/// Parses JSON text and writes its normalised form in the same pass, with no value tree:
/// each object's members are written as they come and reordered only when they are not
/// already in key order (or have duplicate keys or null values to drop).
struct Canon<'a, 'v> {
    s: &'a [u8],
    volatile: &'v VolatileNames,
    int_digit_limit: usize,
    out: Vec<u8>,
    /// Decoded strings that had escapes; objects free theirs when they are done.
    arena: Vec<u8>,
}

/// The names of the volatile keys to drop, as WTF-8, ready for the parser: most keys are
/// ruled out by one bit test on their length and first byte, the rest by their first 8
/// bytes, before any bytes are compared; a big set is looked up by hash, not scanned.
#[derive(Clone, Debug)]
pub struct VolatileNames {
    names: Vec<Vec<u8>>,
    /// The names' [`filter_bit`]s.
    filter: u64,
    /// Each name's [`key_prefix`], in the order of `names`.
    prefixes: Vec<u64>,
    /// The same names, for a set bigger than [`SCANNED_NAMES`] and for [`Self::has`].
    lookup: crate::guard::NameMap<()>,
}

/// One of 64 bits for a key of `len` bytes whose [`key_prefix`] is `prefix`, from its length
/// and first byte: in the default set (six names) a key's bit is one of six, and keys
/// as common as `since`, `limit` or `query` share a length with `nonce` but not its bit.
#[inline(always)]
fn filter_bit(len: usize, prefix: u64) -> u64 {
    1 << (((prefix >> 56) as usize).wrapping_add(len.wrapping_mul(23)) % 64)
}

/// Up to this many volatile names are compared one by one, by prefix first, rather than
/// the key hashed. Measured on the benchmark batch with sets whose names every key got
/// past the filter for: six names cost 10-20 ns a text scanned, 65 hashed; sixteen names
/// 25-30 scanned, 65-70 hashed.
const SCANNED_NAMES: usize = 16;

impl VolatileNames {
    pub fn new(names: Vec<Vec<u8>>) -> Self {
        let prefixes: Vec<u64> = names.iter().map(|n| key_prefix(n)).collect();
        let filter = names
            .iter()
            .zip(&prefixes)
            .fold(0, |m, (name, &p)| m | filter_bit(name.len(), p));
        let lookup = names
            .iter()
            .map(|n| (n.clone().into_boxed_slice(), ()))
            .collect();
        VolatileNames {
            names,
            filter,
            prefixes,
            lookup,
        }
    }

    /// True when `key`, whose [`key_prefix`] is `prefix`, is one of the names.
    #[inline(always)]
    fn contains(&self, key: &[u8], prefix: u64) -> bool {
        if self.filter & filter_bit(key.len(), prefix) == 0 {
            return false;
        }
        if self.names.len() > SCANNED_NAMES {
            return self.lookup.contains_key(key);
        }
        self.prefixes
            .iter()
            .zip(&self.names)
            .any(|(&p, name)| p == prefix && canon::same_short(name, key))
    }

    /// True when the WTF-8 `name` is one of the names.
    pub fn has(&self, name: &[u8]) -> bool {
        self.lookup.contains_key(name)
    }
}

fn str_bytes<'x>(input: &'x [u8], arena: &'x [u8], text: Str) -> &'x [u8] {
    match text {
        Str::Input(a, b) => &input[a..b],
        Str::Arena(a, b) => &arena[a..b],
    }
}

fn syntax<T>(msg: &'static str, pos: usize) -> Result<T, JsonError> {
    Err(JsonError::Syntax { msg, pos })
}

impl Canon<'_, '_> {
    fn skip_ws(&self, mut i: usize) -> usize {
        while i < self.s.len() && matches!(self.s[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    }

    fn bytes(&self, text: Str) -> &[u8] {
        str_bytes(self.s, &self.arena, text)
    }

    /// `{"args":<the document>,"tool":<name>}`.
    fn call(&mut self, name: ToolName<'_>) -> Result<(), JsonError> {
        self.out.extend_from_slice(b"{\"args\":");
        self.document()?;
        self.out.extend_from_slice(b",\"tool\":");
        match name {
            ToolName::Text(name) => canon::write_str(&mut self.out, name),
            ToolName::Literal(literal) => canon::push_small(&mut self.out, literal),
        }
        self.out.push(b'}');
        Ok(())
    }

    fn document(&mut self) -> Result<(), JsonError> {
        let start = self.skip_ws(0);
        let (_, end) = self.value(start, 0)?;
        let end = self.skip_ws(end);
        if end != self.s.len() {
            return syntax("Extra data", end);
        }
        Ok(())
    }

    /// Writes the value at `i`; returns whether it was `null`, and the offset after it.
    #[inline(always)]
    fn value(&mut self, i: usize, depth: usize) -> Result<(bool, usize), JsonError> {
        let s = self.s;
        let Some(&c) = s.get(i) else {
            return syntax("Expecting value", i);
        };
        let rest = &s[i..];
        let literal: (&[u8], usize) = match c {
            b'"' => {
                if let Some(after) = self.short_string_value(i) {
                    return Ok((false, after));
                }
                let mark = self.arena.len();
                let (text, end) = self.string(i + 1)?;
                let bytes = str_bytes(s, &self.arena, text);
                canon::write_collapsed_str(&mut self.out, Text::Wtf8(bytes));
                self.arena.truncate(mark);
                return Ok((false, end));
            }
            b'{' | b'[' => {
                if depth >= PARSE_DEPTH_LIMIT {
                    return Err(JsonError::TooDeep);
                }
                let end = if c == b'{' {
                    self.object(i + 1, depth + 1)?
                } else {
                    self.array(i + 1, depth + 1)?
                };
                return Ok((false, end));
            }
            b'n' if rest.starts_with(b"null") => {
                self.out.extend_from_slice(b"null");
                return Ok((true, i + 4));
            }
            b't' if rest.starts_with(b"true") => (b"true", 4),
            b'f' if rest.starts_with(b"false") => (b"false", 5),
            b'N' if rest.starts_with(b"NaN") => (b"NaN", 3),
            b'I' if rest.starts_with(b"Infinity") => (b"Infinity", 8),
            b'-' if rest.starts_with(b"-Infinity") => (b"-Infinity", 9),
            _ => return self.number(i).map(|end| (false, end)),
        };
        self.out.extend_from_slice(literal.0);
        Ok((false, i + literal.1))
    }

    /// Writes the string value whose opening quote is at `i` when it is a [`ShortString`]
    /// its masks say enough about, and returns the offset after it; `None` (nothing
    /// written) leaves it to the general path.
    #[inline(always)]
    fn short_string_value(&mut self, i: usize) -> Option<usize> {
        let s = self.s;
        let short = short_string(s, i + 1)?;
        let after = i + short.len + 2;
        let content = &s[i + 1..after - 1];
        let out = &mut self.out;
        let written = match (short.high == 0, short.spaces_stay()) {
            (true, true) => {
                // Printable ASCII: the text's own literal is the canonical one.
                canon::push_small(out, &s[i..after]);
                true
            }
            (true, false) => {
                canon::write_short_ascii_collapsed(out, content, short.spaces);
                true
            }
            // Non-ASCII characters escaped, unless one is whitespace to collapse.
            (false, true) => canon::write_short_escaped(out, content, short.high),
            (false, false) => false,
        };
        written.then_some(after)
    }

    fn number(&mut self, start: usize) -> Result<usize, JsonError> {
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
        let (mut is_float, mut exponent) = (false, false);
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
                exponent = true;
            } else {
                i = e_start;
            }
        }
        let literal = &s[start..i];
        if is_float && !exponent && decimal_is_its_repr(literal) {
            canon::push_small(&mut self.out, literal);
            return Ok(i);
        }
        if is_float {
            // The literal is ASCII by construction, and Rust's parse rounds correctly, as
            // Python's float() does; huge exponents give ±inf and tiny ones 0, as in Python.
            let text = std::str::from_utf8(literal).unwrap_or("nan");
            numbers::write_float(&mut self.out, text.parse::<f64>().unwrap_or(f64::NAN));
            return Ok(i);
        }
        let digits = int_end - start - usize::from(s[start] == b'-');
        if digits > self.int_digit_limit {
            return Err(JsonError::IntTooLong { digits });
        }
        // Python's int() then str() give back the literal, except for -0.
        self.out
            .extend_from_slice(if literal == b"-0" { b"0" } else { literal });
        Ok(i)
    }

    /// A string whose opening quote is at `start - 1`; returns where its decoded WTF-8
    /// content is and the offset after the closing quote.
    fn string(&mut self, start: usize) -> Result<(Str, usize), JsonError> {
        let s = self.s;
        let len = s.len();
        let begin = start - 1;
        let mut decoded: Option<usize> = None; // arena offset, once an escape is met
        let mut chunk = start;
        let mut i = start;
        loop {
            i = string_stop(s, i);
            if i >= len {
                return syntax("Unterminated string starting at", begin);
            }
            match s[i] {
                b'"' => {
                    let text = match decoded {
                        None => Str::Input(start, i),
                        Some(from) => {
                            self.arena.extend_from_slice(&s[chunk..i]);
                            Str::Arena(from, self.arena.len())
                        }
                    };
                    return Ok((text, i + 1));
                }
                b'\\' => {}
                _ => return syntax("Invalid control character at", i),
            }
            decoded.get_or_insert(self.arena.len());
            self.arena.extend_from_slice(&s[chunk..i]);
            i += 1;
            let Some(&escape) = s.get(i) else {
                return syntax("Unterminated string starting at", begin);
            };
            if escape != b'u' {
                self.arena.push(match escape {
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
                let Some(mut code) = hex4(&s[first..end]) else {
                    return syntax("Invalid \\uXXXX escape", i);
                };
                i = end;
                // A high surrogate followed by an escaped low one is one character; any other
                // surrogate stays as it is, as in Python.
                if (0xd800..=0xdbff).contains(&code)
                    && end + 6 < len
                    && s[end] == b'\\'
                    && s[end + 1] == b'u'
                {
                    let Some(low) = hex4(&s[end + 2..end + 6]) else {
                        return syntax("Invalid \\uXXXX escape", end + 1);
                    };
                    if (0xdc00..=0xdfff).contains(&low) {
                        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                        i = end + 6;
                    }
                }
                canon::push_wtf8(&mut self.arena, code);
            }
            chunk = i;
        }
    }

    #[inline(never)]
    fn object(&mut self, start: usize, depth: usize) -> Result<usize, JsonError> {
        let s = self.s;
        let arena_mark = self.arena.len();
        self.out.push(b'{');
        let region = self.out.len();
        let mut members: SmallVec<[Member; 8]> = SmallVec::new();
        let mut in_order = true;
        let mut i = self.skip_ws(start);
        if s.get(i) != Some(&b'}') {
            loop {
                if s.get(i) != Some(&b'"') {
                    return syntax("Expecting property name enclosed in double quotes", i);
                }
                let (key, after_key, plain) = match short_string(s, i + 1) {
                    Some(short) if short.high == 0 => (
                        Str::Input(i + 1, i + 1 + short.len),
                        i + short.len + 2,
                        true,
                    ),
                    _ => {
                        let (key, after_key) = self.string(i + 1)?;
                        (key, after_key, false)
                    }
                };
                i = self.skip_ws(after_key);
                if s.get(i) != Some(&b':') {
                    return syntax("Expecting ':' delimiter", i);
                }
                i = self.skip_ws(i + 1);
                let with_comma = self.out.len();
                if with_comma > region {
                    self.out.push(b',');
                }
                let member_start = self.out.len();
                match key {
                    // Printable ASCII with nothing escaped: the text's own `"key"` is the
                    // canonical one.
                    Str::Input(a, b) if plain || s[a..b].iter().all(|&c| c < 0x7f) => {
                        canon::push_small(&mut self.out, &s[a - 1..b + 1]);
                    }
                    _ => {
                        canon::write_str(&mut self.out, Text::Wtf8(str_bytes(s, &self.arena, key)))
                    }
                }
                self.out.push(b':');
                let (null, after_value) = self.value(i, depth)?;
                let key_bytes = self.bytes(key);
                let prefix = match key {
                    Str::Input(a, b) => prefix_at(s, a, b - a),
                    Str::Arena(..) => key_prefix(key_bytes),
                };
                if self.volatile.contains(key_bytes, prefix) {
                    // Every member with this key goes, so it needs no tombstone.
                    self.out.truncate(with_comma);
                } else {
                    if null {
                        // Left out; recorded empty, since a duplicate key may follow.
                        self.out.truncate(with_comma);
                    }
                    let end = if null { member_start } else { self.out.len() };
                    // `member_order` spelled out: a `Member` built first to be compared went
                    // through the stack, and its push then stalled on reading it back.
                    if let Some(last) = members.last() {
                        in_order &= last.prefix < prefix
                            || last.prefix == prefix
                                && canon::cmp_short(self.bytes(last.key), self.bytes(key)).is_lt();
                    }
                    members.push(Member {
                        key,
                        prefix,
                        start: member_start,
                        end,
                    });
                }
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
        if !in_order {
            self.reorder(region, &mut members);
        }
        self.arena.truncate(arena_mark);
        self.out.push(b'}');
        Ok(i + 1)
    }

    /// Sorts up to 16 members into `order` (member numbers in key order; duplicates stay in
    /// text order); returns whether the keys' prefixes are distinct (then no two keys are
    /// the same).
    fn sort_short(&self, members: &[Member], order: &mut [u8; 16]) -> bool {
        // Insertion sort of member numbers, by prefixes kept beside them: most objects
        // have a handful of members (the seed call measured 4% faster than with whole
        // members moved).
        let mut prefixes = [0u64; 16];
        for (n, member) in members.iter().enumerate() {
            let mut at = n;
            while at > 0
                && (prefixes[at - 1] > member.prefix
                    || prefixes[at - 1] == member.prefix
                        && canon::cmp_short(
                            self.bytes(members[usize::from(order[at - 1])].key),
                            self.bytes(member.key),
                        )
                        .is_gt())
            {
                prefixes[at] = prefixes[at - 1];
                order[at] = order[at - 1];
                at -= 1;
            }
            prefixes[at] = member.prefix;
            order[at] = n as u8;
        }
        prefixes[..members.len()].windows(2).all(|w| w[0] < w[1])
    }

    /// The order of two members' keys: code-point order, which is WTF-8 byte order.
    #[inline]
    fn member_order(&self, a: &Member, b: &Member) -> std::cmp::Ordering {
        a.prefix
            .cmp(&b.prefix)
            .then_with(|| canon::cmp_short(self.bytes(a.key), self.bytes(b.key)))
    }

    /// Rewrites the members written from `region` on in key order (code-point order, which
    /// is WTF-8 byte order), keeping only the last of duplicate keys (as `json.loads` does)
    /// and leaving out the ones whose value is null.
    fn reorder(&mut self, region: usize, members: &mut [Member]) {
        // A stable sort keeps duplicates in text order, so the last of each run is the one
        // `json.loads` keeps.
        let mut order = [0u8; 16];
        // True when no two keys are the same, so no member is superseded by a later one.
        let mut distinct = false;
        if members.len() <= 16 {
            distinct = LAST_ORDER.with_borrow(|last| last.fits(members, &mut order));
            if !distinct {
                distinct = self.sort_short(members, &mut order);
                if distinct {
                    LAST_ORDER.with_borrow_mut(|last| last.remember(members, &order));
                }
            }
        } else {
            members.sort_by(|a, b| self.member_order(a, b));
        }
        let nth = |n: usize| {
            if members.len() <= 16 {
                members[usize::from(order[n])]
            } else {
                members[n]
            }
        };
        // The members are written again after the object's text, in order, and the result
        // moved over it: no second buffer (one on the stack spilled to the heap for big
        // objects, a malloc and a free each). Short members are copied at a fixed width,
        // and left-out ones too (not counted): against a copy of each member's own size
        // and a branch on whether it is kept, the 1 KB benchmark call took 3-4% less.
        let end = self.out.len();
        self.out.reserve(end - region + 1);
        let capacity = self.out.capacity();
        let base = self.out.as_mut_ptr();
        let mut written = 0;
        for n in 0..members.len() {
            let member = nth(n);
            let superseded = !distinct && n + 1 < members.len() && {
                let next = nth(n + 1);
                next.prefix == member.prefix
                    && canon::same_short(self.bytes(next.key), self.bytes(member.key))
            };
            let len = member.end - member.start;
            let keep = len > 0 && !superseded;
            let fits = len <= MEMBER_COPY && end + written + 1 + MEMBER_COPY <= capacity;
            // SAFETY: room for `end - region + 1` bytes was reserved after `end`: the commas
            // and members written there take no more than the object's own members and
            // commas, plus a first comma. A short member is copied with a fixed width only
            // where the capacity holds it; the copy reads from inside the allocation (a
            // member starts before `end`) and may overlap what it writes, so it is a `copy`
            // (memmove). What it reads past the member's end (possibly never written) lands
            // past what is kept: overwritten next, or left beyond the length. A member left
            // out (null, superseded) is copied too but not counted, so the loop does not
            // branch on it.
            unsafe {
                let dst = base.add(end + written);
                if fits {
                    *dst = b',';
                    std::ptr::copy(base.add(member.start), dst.add(1), MEMBER_COPY);
                } else if keep {
                    *dst = b',';
                    std::ptr::copy_nonoverlapping(base.add(member.start), dst.add(1), len);
                }
            }
            written += (len + 1) * usize::from(keep);
        }
        // The first comma is not kept.
        let kept = written.saturating_sub(1);
        // SAFETY: `end + 1 .. end + written` was written above, within the reserved room;
        // it starts after `region + kept` (the members kept and the commas between them are
        // at most the `end - region` bytes they came from), so the two do not overlap; the
        // length then covers exactly the bytes kept.
        unsafe {
            std::ptr::copy_nonoverlapping(base.add(end + 1), base.add(region), kept);
            self.out.set_len(region + kept);
        }
    }

    #[inline(never)]
    fn array(&mut self, start: usize, depth: usize) -> Result<usize, JsonError> {
        let s = self.s;
        self.out.push(b'[');
        let mut i = self.skip_ws(start);
        if s.get(i) != Some(&b']') {
            let mut first = true;
            loop {
                if !first {
                    self.out.push(b',');
                }
                first = false;
                let (_, after) = self.value(i, depth)?;
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
        self.out.push(b']');
        Ok(i + 1)
    }
}

/// Members up to this long are copied with one fixed-size copy when objects are reordered.
const MEMBER_COPY: usize = 32;

/// The key order of the last object reordered (of up to 16 members, with distinct key
/// prefixes): objects of one shape come in runs (a list of records, a batch of calls to
/// one tool), and sorting their members again cost more than checking their prefixes.
struct KeyOrder {
    len: usize,
    /// The members' key prefixes, in text order.
    prefixes: [u64; 16],
    /// Their member numbers in key order.
    order: [u8; 16],
}

impl KeyOrder {
    /// Writes the key order of `members` into `order` if they have the remembered prefixes,
    /// in the same order. Distinct prefixes order their keys on their own, so the keys
    /// beyond them need not be the same.
    #[inline]
    fn fits(&self, members: &[Member], order: &mut [u8; 16]) -> bool {
        let same = self.len == members.len()
            && members
                .iter()
                .zip(&self.prefixes)
                .all(|(member, &prefix)| member.prefix == prefix);
        if same {
            *order = self.order;
        }
        same
    }

    /// Remembers the order of `members`, whose key prefixes are distinct (two the same
    /// would leave the order to the keys beyond them, which the next object need not share).
    fn remember(&mut self, members: &[Member], order: &[u8; 16]) {
        self.len = members.len();
        for (slot, member) in self.prefixes.iter_mut().zip(members) {
            *slot = member.prefix;
        }
        self.order = *order;
    }
}

thread_local! {
    static LAST_ORDER: std::cell::RefCell<KeyOrder> = const {
        std::cell::RefCell::new(KeyOrder {
            len: 0,
            prefixes: [0; 16],
            order: [0; 16],
        })
    };
}

/// A string under 32 bytes with nothing escaped in it, whose content starts at `start`:
/// its length, and masks of its spaces and its bytes from 0x80 up (bit k for byte k).
#[derive(Clone, Copy)]
struct ShortString {
    len: usize,
    spaces: u32,
    high: u32,
}

impl ShortString {
    /// True when `" ".join(content.split())` leaves its ASCII spaces as they are: none leads,
    /// trails or follows another.
    #[inline(always)]
    fn spaces_stay(self) -> bool {
        let edges = 1 | (1u32 << self.len) >> 1;
        self.spaces & (edges | self.spaces >> 1) == 0
    }
}

/// The [`ShortString`] whose content starts at `start`; `None` for a longer string, or one
/// with an escape, a control character or DEL.
#[inline(always)]
fn short_string(s: &[u8], start: usize) -> Option<ShortString> {
    // Bytes that end a run of plain content (a quote, a backslash, a control character,
    // DEL, the end of the text: "special" bytes other than spaces and non-ASCII ones).
    let stops = |m: canon::Masks| m.special & !(m.space | m.high);
    let m = canon::chunk_masks(s, start);
    let (mut end, mut spaces, mut high) = (stops(m), m.space, m.high);
    if end == 0 {
        // Another 16 bytes: dates, paths and ids are often longer than 15.
        let next = canon::chunk_masks(s, start + 16);
        end |= stops(next) << 16;
        spaces |= next.space << 16;
        high |= next.high << 16;
    }
    let len = end.trailing_zeros() as usize;
    if len >= 32 || s.get(start + len) != Some(&b'"') {
        return None;
    }
    let within = !(u32::MAX.checked_shl(len as u32).unwrap_or(0));
    Some(ShortString {
        len,
        spaces: spaces & within,
        high: high & within,
    })
}

/// The first offset from `i` on that ends a run of a string's plain characters: a quote,
/// a backslash, a control character, or the end of the text.
#[inline(always)]
pub(crate) fn string_stop(s: &[u8], mut i: usize) -> usize {
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
pub(crate) fn string_stops(chunk: &[u8; 16]) -> u32 {
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
pub(crate) fn string_stops(chunk: &[u8; 16]) -> u32 {
    chunk.iter().enumerate().fold(0, |mask, (k, &b)| {
        mask | u32::from(b == b'"' || b == b'\\' || b < 0x20) << k
    })
}

/// True when `float(literal)` has `literal` as its `repr`, for a JSON number literal
/// without exponent: at most 15 significant digits (so no shorter decimal reads as the same
/// float, and the shortest `repr` has exactly these digits), a fraction that does not end in
/// 0 (so not integral, and nothing to trim), and at least 1e-4 (so positional, as `repr`
/// writes from 1e-4 to 1e16). Most floats in tool arguments are such literals.
fn decimal_is_its_repr(literal: &[u8]) -> bool {
    let digits = literal.strip_prefix(b"-").unwrap_or(literal);
    let Some(point) = digits.iter().position(|&b| b == b'.') else {
        return false;
    };
    let (int, fraction) = (&digits[..point], &digits[point + 1..]);
    if fraction.last().is_none_or(|&d| d == b'0') {
        return false;
    }
    let significant = if int == b"0" {
        let zeros = fraction.iter().take_while(|&&d| d == b'0').count();
        if zeros > 3 {
            return false;
        }
        fraction.len() - zeros
    } else {
        int.len() + fraction.len()
    };
    significant <= 15
}

/// The value of four hex digits, or `None` if one is not.
pub(crate) fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = (d as char).to_digit(16)?;
        Some(acc << 4 | v)
    })
}

/// The canonical bytes of `{"tool": name, "args": json.loads(text)}` after normalising,
/// appended to `out`.
///
/// `text` must be WTF-8 (the caller decodes and checks bytes as `json.loads` would);
/// `volatile` holds the WTF-8 names of the keys to drop; integers longer than
/// `int_digit_limit` digits are refused as Python refuses them.
pub fn canonical_call_into(
    mut out: Vec<u8>,
    name: Text<'_>,
    text: &[u8],
    volatile: &VolatileNames,
    int_digit_limit: usize,
) -> Result<Vec<u8>, JsonError> {
    canonical_call_append(
        &mut out,
        ToolName::Text(name),
        text,
        volatile,
        int_digit_limit,
    )?;
    Ok(out)
}

/// The tool name of a call: as text, or as the JSON string literal already written for it
/// (a batch writes each of its names once, not once a call).
#[derive(Clone, Copy)]
pub enum ToolName<'a> {
    Text(Text<'a>),
    /// Quotes included, as [`canon::write_str`] writes it.
    Literal(&'a [u8]),
}

/// [`canonical_call_into`] for a buffer that is lent: on an error it is left as it was.
pub fn canonical_call_append(
    out: &mut Vec<u8>,
    name: ToolName<'_>,
    text: &[u8],
    volatile: &VolatileNames,
    int_digit_limit: usize,
) -> Result<(), JsonError> {
    let start = out.len();
    let mut canon = Canon {
        s: text,
        volatile,
        int_digit_limit,
        out: std::mem::take(out),
        arena: Vec::new(),
    };
    let written = canon.call(name);
    *out = canon.out;
    if written.is_err() {
        out.truncate(start);
    }
    written
}

/// Where the first JSON value of `text` ends, as Python's `JSONDecoder.raw_decode(text)` reads
/// it (no whitespace skipped before it; anything may follow it), or why there is none: the
/// message and byte offset `json.JSONDecodeError` gives. Nesting deeper than
/// [`PARSE_DEPTH_LIMIT`] is [`JsonError::TooDeep`] (Python goes deeper); integers of any
/// length are read.
pub fn value_end(text: &[u8]) -> Result<usize, JsonError> {
    let volatile = VolatileNames::new(Vec::new());
    let mut canon = Canon {
        s: text,
        volatile: &volatile,
        int_digit_limit: usize::MAX,
        out: Vec::with_capacity(text.len() + 16),
        arena: Vec::new(),
    };
    canon.value(0, 0).map(|(_, end)| end)
}

/// [`canonical_call_into`] a new buffer.
pub fn canonical_call(
    name: Text<'_>,
    text: &[u8],
    volatile: &VolatileNames,
    int_digit_limit: usize,
) -> Result<Vec<u8>, JsonError> {
    canonical_call_into(
        Vec::with_capacity(text.len() + 32),
        name,
        text,
        volatile,
        int_digit_limit,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> Result<String, JsonError> {
        let volatile = VolatileNames::new(vec![b"request_id".to_vec()]);
        canonical_call(Text::Latin1(b"t"), text.as_bytes(), &volatile, 4300)
            .map(|bytes| String::from_utf8(bytes).unwrap())
    }

    #[test]
    fn key_prefixes_order_keys_as_their_bytes_do() {
        let mut next = crate::test_rng::xorshift(0x9e37);
        // Short keys over a tiny alphabet with NUL, so that prefixes often tie or differ
        // only by padding.
        let keys: Vec<Vec<u8>> = (0..400)
            .map(|_| {
                let len = (next() % 11) as usize;
                (0..len)
                    .map(|_| [0, 1, b'a', 0xff][(next() % 4) as usize])
                    .collect()
            })
            .collect();
        for a in &keys {
            for b in &keys {
                let (pa, pb) = (key_prefix(a), key_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} {b:?}");
                }
            }
            // Read from a text in which the key is followed by more bytes, or not.
            let mut text = a.clone();
            assert_eq!(prefix_at(&text, 0, a.len()), key_prefix(a), "{a:?}");
            text.extend_from_slice(b"\"ab\xff\xff\xff\xff\xff\xff\xff");
            assert_eq!(prefix_at(&text, 0, a.len()), key_prefix(a), "{a:?}");
        }
    }

    #[test]
    fn objects_of_one_shape_in_a_row_are_ordered_alike() {
        // Keys over a tiny alphabet, some longer than 8 bytes with shared prefixes, so that
        // remembered orders are met often, and sometimes must not serve (prefixes that tie,
        // keys that differ only past their prefixes, duplicates).
        let mut next = crate::test_rng::xorshift(0xbde2);
        let shapes: Vec<Vec<String>> = (0..12)
            .map(|_| {
                let len = 2 + (next() % 6) as usize;
                (0..len)
                    .map(|_| {
                        let stem = ["b", "a", "aaaaaaaa", "aaaaaaab"][(next() % 4) as usize];
                        let tail = ["", "x", "y"][(next() % 3) as usize];
                        format!("{stem}{tail}")
                    })
                    .collect()
            })
            .collect();
        // Prefixes that tie: the order of one object must not serve the next.
        let tied = [
            (
                r#"{"b":1,"aaaaaaaax":2,"aaaaaaaay":3}"#,
                r#""aaaaaaaax":2,"aaaaaaaay":3,"b":1"#,
            ),
            (
                r#"{"b":1,"aaaaaaaay":2,"aaaaaaaax":3}"#,
                r#""aaaaaaaax":3,"aaaaaaaay":2,"b":1"#,
            ),
        ];
        for (text, want) in tied.iter().chain(&tied) {
            assert_eq!(
                canonical(text).unwrap(),
                format!(r#"{{"args":{{{want}}},"tool":"t"}}"#)
            );
        }
        for round in 0..3000 {
            let keys = &shapes[(next() % 4) as usize + round % 3 * 4 % 12];
            let mut want = std::collections::BTreeMap::new();
            let members: Vec<String> = keys
                .iter()
                .enumerate()
                .map(|(n, key)| {
                    want.insert(key.clone(), n);
                    format!(r#""{key}":{n}"#)
                })
                .collect();
            let text = format!("{{{}}}", members.join(","));
            let want: Vec<String> = want.iter().map(|(k, n)| format!(r#""{k}":{n}"#)).collect();
            assert_eq!(
                canonical(&text).unwrap(),
                format!(r#"{{"args":{{{}}},"tool":"t"}}"#, want.join(",")),
                "{text}"
            );
        }
    }

    #[test]
    fn reordered_members_of_every_length_are_copied_whole() {
        // Members from 5 to ~80 bytes (either side of the fixed-width copy), nulls and
        // duplicate keys to leave out, keys in random order, and buffers of every capacity
        // from none to plenty, so that copies near the end of the capacity take the exact
        // path; against a sorted map of what `json.loads` keeps.
        let mut next = crate::test_rng::xorshift(0x5eed_c0de);
        let volatile = VolatileNames::new(vec![b"request_id".to_vec()]);
        for round in 0..3000 {
            let count = 1 + (next() % 9) as usize;
            let mut want = std::collections::BTreeMap::new();
            let members: Vec<String> = (0..count)
                .map(|_| {
                    let key =
                        ["a", "bb", "c", "dddddddddd", "e", "request_id"][(next() % 6) as usize];
                    let value = match next() % 4 {
                        0 => "null".to_string(),
                        1 => (next() % 1000).to_string(),
                        _ => format!("\"{}\"", "x".repeat((next() % 70) as usize)),
                    };
                    want.insert(key, value.clone());
                    format!("\"{key}\":{value}")
                })
                .collect();
            let text = format!("{{{}}}", members.join(","));
            let kept: Vec<String> = want
                .iter()
                .filter(|&(k, v)| *k != "request_id" && v != "null")
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            let expected = format!("{{\"args\":{{{}}},\"tool\":\"t\"}}", kept.join(","));
            let capacity = round % 160;
            let bytes = canonical_call_into(
                Vec::with_capacity(capacity),
                Text::Latin1(b"t"),
                text.as_bytes(),
                &volatile,
                4300,
            )
            .unwrap();
            assert_eq!(String::from_utf8(bytes).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn volatile_names_hold_exactly_their_names() {
        let mut next = crate::test_rng::xorshift(0x7e57);
        let mut word = |max: u64| -> Vec<u8> {
            let len = (next() % max) as usize;
            (0..len)
                .map(|_| [0, b'a', b'b', 0xff][(next() % 4) as usize])
                .collect()
        };
        // A few names (scanned) and many (looked up), against keys that share lengths and
        // prefixes with them.
        for count in [0, 1, 6, SCANNED_NAMES, SCANNED_NAMES + 1, 200] {
            let names: Vec<Vec<u8>> = (0..count).map(|_| word(14)).collect();
            let volatile = VolatileNames::new(names.clone());
            for _ in 0..2000 {
                let key = word(14);
                assert_eq!(
                    volatile.contains(&key, key_prefix(&key)),
                    names.contains(&key),
                    "{key:?} in {names:?}"
                );
            }
            for name in &names {
                assert!(volatile.contains(name, key_prefix(name)));
            }
        }
    }

    #[test]
    fn decimals_taken_as_their_own_repr_are() {
        let mut literals: Vec<String> = [
            "0.0001",
            "0.00012",
            "0.001",
            "0.5",
            "-0.5",
            "12345678901234.5",
            "0.123456789012345",
            "999999999999999.9",
            "0.1234567890123456",
            "0.00001",
            "1.10",
            "2.0",
            "-0.0",
            "4503599627370495.5",
            "9007199254740993.1",
            "0.30000000000000004",
            "1.7976931348623157",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Pseudo-random decimals of every length up to 18 digits.
        let mut next = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..200_000 {
            let state = next();
            let digits = format!("{state:020}");
            let int_len = (state % 17) as usize;
            let frac_len = 1 + (state >> 8) as usize % 17;
            let int = if int_len == 0 {
                "0"
            } else {
                digits[..int_len].trim_start_matches('0')
            };
            let int = if int.is_empty() { "0" } else { int };
            literals.push(format!("{int}.{}", &digits[20 - frac_len..]));
        }
        let mut taken = 0;
        for literal in &literals {
            if decimal_is_its_repr(literal.as_bytes()) {
                taken += 1;
                let mut repr = Vec::new();
                numbers::write_float(&mut repr, literal.parse().unwrap());
                assert_eq!(String::from_utf8(repr).unwrap(), *literal);
            }
        }
        assert!(taken > literals.len() / 4, "{taken}");
        assert!(decimal_is_its_repr(b"0.0001") && decimal_is_its_repr(b"12345678901234.5"));
        assert!(!decimal_is_its_repr(b"0.00001") && !decimal_is_its_repr(b"999999999999999.9"));
        assert!(!decimal_is_its_repr(b"1.10") && !decimal_is_its_repr(b"-0.0"));
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
        let error_first = format!("[1 {}", "[".repeat(300));
        assert!(matches!(
            canonical(&error_first),
            Err(JsonError::Syntax { pos: 3, .. })
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
        assert!(!is_wtf8(&[0xf4, 0x90, 0x80, 0x80]));
        assert!(is_wtf8(b"bad\xed\xa0\x80tool"));
    }
}
