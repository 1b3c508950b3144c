//! A trace's `usage` object read natively where it is plain (`cost.parse_usage`, the
//! reference, reads every other): its counts are non-negative integer literals, each field
//! named once. Other members are skipped, as `parse_usage` skips them, but for the details
//! objects (`prompt_tokens_details`, `input_tokens_details`), whose `cached_tokens` counts.
//! The text is a JSON value the line's scanner has already found valid.

/// What each field counts (`cost._FIELDS`).
const PROMPT: usize = 0;
const INPUT: usize = 1;
const CACHE_READ: usize = 2;
const CACHE_WRITE: usize = 3;
const OUTPUT: usize = 4;
const CACHED: usize = 5;

/// The counted fields, in `cost._FIELDS`' order: name and what it counts.
const FIELDS: [(&[u8], usize); 8] = [
    (b"prompt_tokens", PROMPT),
    (b"input_tokens", INPUT),
    (b"cache_read_input_tokens", CACHE_READ),
    (b"cache_creation_input_tokens", CACHE_WRITE),
    (b"output_tokens", OUTPUT),
    (b"completion_tokens", OUTPUT),
    (b"cached_input_tokens", CACHED),
    (b"cached_tokens", CACHED),
];

/// The objects whose `cached_tokens` counts as cached (`cost._DETAILS`).
const DETAILS: [&[u8]; 2] = [b"input_tokens_details", b"prompt_tokens_details"];

/// (input, output, cache reads, cache writes) of a plain usage object, as `parse_usage`
/// makes them; `None` for any other (a count that is not a plain integer, a name with an
/// escape, a field twice, no count at all): the reference reads it, and words its errors.
pub fn plain_usage(raw: &[u8]) -> Option<[u64; 4]> {
    let mut counts = [0u64; 6];
    let mut seen = 0u16;
    let (mut found, mut inclusive) = (false, false);
    let mut members = Members::new(raw)?;
    while let Some((name, value)) = members.next()? {
        if let Some(at) = FIELDS.iter().position(|(field, _)| *field == name) {
            if seen & (1 << at) != 0 {
                return None; // the last one counts in `json.loads`: the reference reads it
            }
            seen |= 1 << at;
            let kind = FIELDS[at].1;
            counts[kind] = counts[kind].checked_add(count(value)?)?;
            if kind != CACHED {
                found = true;
                inclusive = inclusive || kind == PROMPT;
            }
        } else if let Some(at) = DETAILS.iter().position(|field| *field == name) {
            if seen & (1 << (8 + at)) != 0 {
                return None;
            }
            seen |= 1 << (8 + at);
            // Anything but an object is skipped, as the reference skips it.
            if value.first() == Some(&b'{') {
                counts[CACHED] = counts[CACHED].checked_add(details_cached(value)?)?;
            }
        }
    }
    if !found {
        return None; // `UsageError`, worded by the reference
    }
    let [prompt, fresh, reads, writes, output, cached] = counts;
    let total = if inclusive {
        // An input_tokens beside prompt_tokens says the same again; reads and writes that
        // do not fit in it are not parts of it after all.
        let both = reads.checked_add(writes)?;
        if both > prompt {
            prompt.checked_add(both)?
        } else {
            prompt
        }
    } else {
        fresh.checked_add(reads)?.checked_add(writes)?
    };
    let cached = cached.max(reads).min(total);
    let writes = writes.min(total - cached);
    // Past this the native core could overflow summing a run's (`events_core._MAX_TOKENS`).
    if total.max(output) >= MAX_TOKENS {
        return None;
    }
    Some([total, output, cached, writes])
}

/// Counts this large are left to the reference (`events_core._MAX_TOKENS`).
pub const MAX_TOKENS: u64 = 1 << 40;

/// A details object's `cached_tokens` (null or absent: 0), once.
fn details_cached(raw: &[u8]) -> Option<u64> {
    let mut members = Members::new(raw)?;
    let mut cached = None;
    while let Some((name, value)) = members.next()? {
        if name == b"cached_tokens" {
            if cached.is_some() {
                return None;
            }
            cached = Some(if value == b"null" { 0 } else { count(value)? });
        }
    }
    Some(cached.unwrap_or(0))
}

/// A plain count: a non-negative integer literal that fits.
fn count(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The members of a JSON object (valid JSON): each name (without escapes, else `None`)
/// and its value's text.
struct Members<'a> {
    raw: &'a [u8],
    at: usize,
    done: bool,
}

impl<'a> Members<'a> {
    fn new(raw: &'a [u8]) -> Option<Self> {
        let at = space(raw, 0);
        if raw.get(at) != Some(&b'{') {
            return None;
        }
        let at = space(raw, at + 1);
        let done = raw.get(at) == Some(&b'}');
        Some(Members { raw, at, done })
    }

    /// The next member; `Some(None)` at the end, `None` for one that is not plain.
    #[allow(clippy::type_complexity)]
    fn next(&mut self) -> Option<Option<(&'a [u8], &'a [u8])>> {
        if self.done {
            return Some(None);
        }
        let raw = self.raw;
        if raw.get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at + 1;
        let end = start + raw[start..].iter().position(|&b| b == b'"' || b == b'\\')?;
        if raw[end] == b'\\' {
            return None;
        }
        let name = &raw[start..end];
        let colon = space(raw, end + 1);
        if raw.get(colon) != Some(&b':') {
            return None;
        }
        let value_start = space(raw, colon + 1);
        let value_end = value_end(raw, value_start)?;
        let value = &raw[value_start..value_end];
        let next = space(raw, value_end);
        match raw.get(next) {
            Some(b',') => self.at = space(raw, next + 1),
            Some(b'}') => self.done = true,
            _ => return None,
        }
        Some(Some((name, value)))
    }
}

/// Past JSON's whitespace.
fn space(raw: &[u8], mut at: usize) -> usize {
    while raw
        .get(at)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        at += 1;
    }
    at
}

/// Where the JSON value starting at `start` ends (strings, and brackets within them,
/// skipped whole).
fn value_end(raw: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut at = start;
    loop {
        let byte = *raw.get(at)?;
        match byte {
            b'"' => {
                at += 1;
                loop {
                    match *raw.get(at)? {
                        b'\\' => at += 2,
                        b'"' => break,
                        _ => at += 1,
                    }
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                if depth == 0 {
                    return Some(at);
                }
                depth -= 1;
                if depth == 0 {
                    return Some(at + 1);
                }
            }
            b',' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Some(at),
            _ => {}
        }
        at += 1;
        if depth == 0 && byte == b'"' {
            return Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_usage_reads_as_parse_usage_does() {
        let read = |text: &str| plain_usage(text.as_bytes());
        // Anthropic: input excludes cache reads and writes, which are added.
        assert_eq!(
            read(
                r#"{"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5, "service_tier": "standard", "cache_creation": {"a": [1, {"b": "}"}]}}"#
            ),
            Some([115, 2, 100, 5])
        );
        // OpenAI: prompt includes the cached tokens, which are only split out.
        assert_eq!(
            read(
                r#"{"prompt_tokens":50,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":40,"audio_tokens":0}}"#
            ),
            Some([50, 3, 40, 0])
        );
        assert_eq!(
            read(r#"{"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": null}}"#),
            Some([5, 0, 0, 0])
        );
        // Cache fields beside prompt_tokens that do not fit in it are not parts of it.
        assert_eq!(
            read(r#"{"prompt_tokens": 5, "cache_read_input_tokens": 9}"#),
            Some([14, 0, 9, 0])
        );
        // What the reference reads, or words as an error.
        for text in [
            r#"{}"#,
            r#"{"cached_tokens": 5}"#,
            r#"{"input_tokens": 1.5}"#,
            r#"{"input_tokens": -1}"#,
            r#"{"input_tokens": "5"}"#,
            r#"{"input_tokens": 1, "input_tokens": 2}"#,
            r#"{"in\u0070ut_tokens": 1}"#,
            r#"{"input_tokens": 1e3}"#,
            r#"{"input_tokens": 99999999999999999999}"#,
            r#"{"input_tokens": 1, "prompt_tokens_details": {"cached_tokens": "x"}}"#,
            r#"[1]"#,
        ] {
            assert_eq!(read(text), None, "{text}");
        }
        assert_eq!(
            read(r#"{"input_tokens": 1, "prompt_tokens_details": [1]}"#),
            Some([1, 0, 0, 0])
        );
        // A details object twice (the last counts in `json.loads`), counts past the bound.
        assert_eq!(
            read(
                r#"{"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 3}, "prompt_tokens_details": 1}"#
            ),
            None
        );
        assert_eq!(read(r#"{"input_tokens": 1099511627776}"#), None);
    }
}
