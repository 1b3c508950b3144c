//! cargo-fuzz target for the pyo3-free JSON canonicaliser (`rust/json.rs`), built with
//! debug assertions and overflow checks: no panic, no overflow, and
//!
//! - the two-pass integer limit: with the smallest limit Python allows (640 digits) the
//!   answer is the same as with the default (4300) unless it is `IntTooLong`;
//! - syntax errors point inside the text;
//! - canonical output is a fixed point: keyed again, its arguments give the same bytes
//!   (except where Python's own `normalise` is not idempotent either: text holding
//!   surrogates encoded one by one, which `json.loads` turns into one astral character
//!   when they come back escaped as a pair).
//!
//! The first byte picks the volatile keys; the rest is the JSON text (WTF-8 only, as the
//! Python layer passes nothing else).
#![no_main]

use _core::canon::Text;
use _core::json::{self, JsonError};
use libfuzzer_sys::fuzz_target;

const PREFIX: &[u8] = b"{\"args\":";
const SUFFIX: &[u8] = b",\"tool\":\"t\"}";

fn volatile(mode: u8) -> Vec<Vec<u8>> {
    match mode % 3 {
        0 => Vec::new(),
        1 => [
            "request_id",
            "trace_id",
            "timestamp",
            "now",
            "nonce",
            "idempotency_key",
        ]
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect(),
        _ => vec![
            b"a".to_vec(),
            "é".as_bytes().to_vec(),
            vec![0xed, 0xa0, 0x80],
            Vec::new(),
        ],
    }
}

fn has_raw_surrogates(text: &[u8]) -> bool {
    text.windows(2).any(|w| w[0] == 0xed && w[1] >= 0xa0)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, text)) = data.split_first() else {
        return;
    };
    if !json::is_wtf8(text) {
        return;
    }
    let volatile = json::VolatileNames::new(volatile(mode));
    let name = Text::Latin1(b"t");
    let small = json::canonical_call(name, text, &volatile, json::MIN_INT_DIGIT_LIMIT);
    let full = json::canonical_call(name, text, &volatile, 4300);
    match (&small, &full) {
        (Err(JsonError::IntTooLong { digits }), _) => assert!(*digits > json::MIN_INT_DIGIT_LIMIT),
        _ => assert_eq!(small, full, "the digit limit changed more than IntTooLong"),
    }
    match &full {
        Err(JsonError::Syntax { pos, .. }) => {
            assert!(*pos <= text.len(), "error position {pos} past the end");
            assert!(json::char_index(text, *pos) <= text.len());
        }
        Ok(bytes) => {
            assert!(bytes.starts_with(PREFIX) && bytes.ends_with(SUFFIX));
            assert!(bytes.is_ascii(), "canonical bytes are ASCII (ensure_ascii)");
            if !has_raw_surrogates(text) {
                let args = &bytes[PREFIX.len()..bytes.len() - SUFFIX.len()];
                let again = json::canonical_call(name, args, &volatile, 4300);
                assert_eq!(
                    again.as_ref(),
                    Ok(bytes),
                    "not a fixed point: {:?}",
                    String::from_utf8_lossy(args)
                );
            }
        }
        Err(_) => {}
    }
});
