//! `call_key_json` and `call_keys`: keys from JSON text, parsed in Rust (`json.rs`) rather than
//! through `json.loads`, with the GIL released for the batch.

use std::borrow::Cow;

use pyo3::exceptions::{PyRecursionError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::canon::{self, Text};
use crate::json::{self, JsonError};
use crate::key::Key;
use crate::py_canon::{
    ascii_of, check_name, key_str, key_with_buffer, push_wtf8_of, text_of, VolatileKeys,
    KEPT_BUFFER_BYTES,
};
use crate::py_reference::reference;

/// JSON text as WTF-8: borrowed from a `str` that is ASCII (most are) or from UTF-8 `bytes`,
/// else converted.
/// Error messages need the Python object it came from as their document ([`doc`]).
pub struct JsonText<'a> {
    bytes: Cow<'a, [u8]>,
}

impl<'a> JsonText<'a> {
    /// Accepts what `json.loads` accepts: `str`, or `bytes`/`bytearray` in UTF-8 (with or
    /// without a BOM), UTF-16 or UTF-32, decoded as `json.loads` decodes them.
    pub fn from_py(py: Python<'_>, text: &'a Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(s) = text.cast::<PyString>() {
            return Self::from_str(py, s, true);
        }
        // `bytes` is borrowed (it cannot change); a `bytearray` can, so it is copied.
        let raw: Cow<'a, [u8]> = if let Ok(b) = text.cast::<PyBytes>() {
            Cow::Borrowed(b.as_bytes())
        } else if let Ok(b) = text.cast::<PyByteArray>() {
            Cow::Owned(b.to_vec())
        } else {
            return Err(PyTypeError::new_err(format!(
                "the JSON object must be str, bytes or bytearray, not {}",
                text.get_type().name()?
            )));
        };
        match detect_utf8(&raw) {
            Some(skip) if json::is_wtf8(&raw[skip..]) => {
                let bytes = match raw {
                    Cow::Borrowed(b) => Cow::Borrowed(&b[skip..]),
                    Cow::Owned(mut v) => {
                        v.drain(..skip);
                        Cow::Owned(v)
                    }
                };
                Ok(JsonText { bytes })
            }
            // UTF-16/32, or bytes that do not decode: Python decodes (or raises) exactly as
            // json.loads does.
            _ => {
                let decoded = reference(py)?.decode_json_bytes.bind(py).call1((text,))?;
                // json.loads checks for a BOM only in str input, not in decoded bytes.
                let mut decoded = JsonText::from_str(py, decoded.cast::<PyString>()?, false)?;
                Ok(JsonText {
                    bytes: Cow::Owned(std::mem::take(&mut decoded.bytes).into_owned()),
                })
            }
        }
    }

    fn from_str(py: Python<'_>, s: &'a Bound<'_, PyString>, refuse_bom: bool) -> PyResult<Self> {
        let bytes: Cow<'a, [u8]> = match ascii_of(s) {
            Some(ascii) => Cow::Borrowed(ascii),
            None => {
                let mut buffer = TEXT_BUFFER.with(|b| b.take());
                buffer.clear();
                push_wtf8_of(&mut buffer, s)?;
                Cow::Owned(buffer)
            }
        };
        if refuse_bom && bytes.starts_with("\u{feff}".as_bytes()) {
            return Err(decode_error(
                py,
                "Unexpected UTF-8 BOM (decode using utf-8-sig)",
                s,
                0,
            ));
        }
        Ok(JsonText { bytes })
    }

    /// The text, as WTF-8.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The same text, borrowed for as long as the caller says.
    ///
    /// # Safety
    /// The object the text was made from must stay alive, unchanged, for `'b`.
    pub(crate) unsafe fn extend<'b>(mut self) -> JsonText<'b> {
        let bytes = match std::mem::take(&mut self.bytes) {
            // SAFETY: the caller keeps the owner of these bytes alive for 'b; `str` and
            // `bytes` objects do not change (a `bytearray` is always copied).
            Cow::Borrowed(b) => {
                Cow::Borrowed(unsafe { std::slice::from_raw_parts(b.as_ptr(), b.len()) })
            }
            Cow::Owned(v) => Cow::Owned(v),
        };
        JsonText { bytes }
    }
}

thread_local! {
    /// The last converted text's buffer, for the next: a non-ASCII JSON text of a few KB
    /// cost as much again in allocating and freeing as in converting.
    static TEXT_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Drop for JsonText<'_> {
    fn drop(&mut self) {
        if let Cow::Owned(buffer) = &mut self.bytes {
            // (Empty when the text was moved on: nothing to keep.)
            if (1..=KEPT_BUFFER_BYTES).contains(&buffer.capacity()) {
                let buffer = std::mem::take(buffer);
                TEXT_BUFFER.with(|b| b.set(buffer));
            }
        }
    }
}

/// The text `source` as the `str` that `json.loads` would have seen.
fn doc<'py>(py: Python<'py>, source: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    if let Ok(s) = source.cast::<PyString>() {
        return Ok(s.clone());
    }
    Ok(reference(py)?
        .decode_json_bytes
        .bind(py)
        .call1((source,))?
        .cast_into::<PyString>()?)
}

/// The byte-order-mark length to skip when `json.detect_encoding` would pick UTF-8; `None`
/// for UTF-16 and UTF-32.
fn detect_utf8(b: &[u8]) -> Option<usize> {
    let starts = |prefix: &[u8]| b.starts_with(prefix);
    if starts(&[0, 0, 0xfe, 0xff]) || starts(&[0xff, 0xfe, 0, 0]) {
        return None;
    }
    if starts(&[0xfe, 0xff]) || starts(&[0xff, 0xfe]) {
        return None;
    }
    if starts(&[0xef, 0xbb, 0xbf]) {
        return Some(3);
    }
    if b.len() >= 4 {
        if b[0] == 0 || b[1] == 0 {
            return None;
        }
    } else if b.len() == 2 && (b[0] == 0 || b[1] == 0) {
        return None;
    }
    Some(0)
}

fn decode_error(py: Python<'_>, msg: &str, doc: &Bound<'_, PyString>, pos: usize) -> PyErr {
    match reference(py).and_then(|h| h.JSONDecodeError.bind(py).call1((msg, doc, pos))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

fn int_digit_limit(py: Python<'_>) -> PyResult<usize> {
    let limit: usize = reference(py)?
        .get_int_max_str_digits
        .bind(py)
        .call0()?
        .extract()?;
    Ok(if limit == 0 { usize::MAX } else { limit })
}

/// Turns a parse error into the exception `json.loads` (or the key contract) raises.
pub(crate) fn raise(
    py: Python<'_>,
    err: JsonError,
    text: &JsonText<'_>,
    source: &Bound<'_, PyAny>,
) -> PyErr {
    match err {
        JsonError::Syntax { msg, pos } => match doc(py, source) {
            Ok(doc) => decode_error(py, msg, &doc, json::char_index(&text.bytes, pos)),
            Err(err) => err,
        },
        JsonError::TooDeep => PyRecursionError::new_err(format!(
            "arguments nested deeper than {} levels",
            canon::MAX_DEPTH
        )),
        JsonError::IntTooLong { digits } => {
            let limit = int_digit_limit(py).unwrap_or(4300);
            PyValueError::new_err(format!(
                "Exceeds the limit ({limit} digits) for integer string conversion: value has \
                 {digits} digits; use sys.set_int_max_str_digits() to increase the limit"
            ))
        }
    }
}

/// Canonical bytes for a call whose arguments are JSON text, or the exception `json.loads`
/// (or the key contract's depth limit) raises.
fn canonical_json_call(
    py: Python<'_>,
    name: Text<'_>,
    text: &JsonText<'_>,
    source: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
    out: Vec<u8>,
) -> PyResult<Vec<u8>> {
    let names = volatile.names();
    let first = json::canonical_call_into(out, name, &text.bytes, names, json::MIN_INT_DIGIT_LIMIT);
    let outcome = match first {
        // Longer than the smallest possible limit: check against the limit in force.
        Err(JsonError::IntTooLong { .. }) => {
            let limit = int_digit_limit(py)?;
            json::canonical_call(name, &text.bytes, names, limit)
        }
        outcome => outcome,
    };
    outcome.map_err(|err| raise(py, err, text, source))
}

/// The key of a call whose arguments are JSON text.
pub fn json_key(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    text: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
) -> PyResult<Key> {
    let name = check_name(name)?;
    if !volatile.only_exact_str() || !is_exact_text(text) {
        return reference_json_key(py, name, text, volatile);
    }
    let parsed = JsonText::from_py(py, text)?;
    let name_text = text_of(name)?;
    key_with_buffer(|out| canonical_json_call(py, name_text, &parsed, text, volatile, out))
}

/// The reference's key for a call the native parser does not take: volatile keys only
/// Python can compare, or text of a `str` or `bytes` subclass.
fn reference_json_key(
    py: Python<'_>,
    name: &Bound<'_, PyString>,
    text: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
) -> PyResult<Key> {
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("volatile_keys", volatile.set(py))?;
    let hex: String = reference(py)?
        .call_key_json
        .bind(py)
        .call((name, text), Some(&kwargs))?
        .extract()?;
    crate::key::parse_key_hex(&hex)
        .ok_or_else(|| PyValueError::new_err("the reference returned a malformed key"))
}

/// For `Guard.check_json`: the key that stands for a call whose JSON text raised `err`, and
/// the `invalid_arguments` text saying why; `err` itself if it is not one that bad text
/// raises. Which errors those are, the key (the raw text with its whitespace collapsed, or
/// kept for the tools that see it: a model that keeps sending the same broken arguments is
/// looping too) and the text are the reference's (`_keys.UNPARSABLE`, `_keys.invalid_json`).
pub fn invalid_json(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    text: &Bound<'_, PyAny>,
    err: PyErr,
    collapse: bool,
) -> PyResult<(Key, Py<PyString>)> {
    let helpers = reference(py)?;
    if !err.is_instance(py, helpers.UNPARSABLE.bind(py)) {
        return Err(err);
    }
    let (hex, why): (String, Bound<'_, PyString>) = helpers
        .invalid_json
        .bind(py)
        .call1((name, text, err.value(py), collapse))?
        .extract()?;
    let key =
        crate::key::parse_key_hex(&hex).ok_or_else(|| PyValueError::new_err("malformed key"))?;
    Ok((key, why.unbind()))
}

/// `call_key_json(name, text, /, *, volatile_keys=None) -> str`
#[pyfunction]
#[pyo3(signature = (name, text, /, *, volatile_keys = None))]
pub fn call_key_json<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    text: &Bound<'py, PyAny>,
    volatile_keys: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyString>> {
    let key = VolatileKeys::with_arg(py, volatile_keys, |volatile| {
        json_key(py, name, text, volatile)
    })?;
    key_str(py, key)
}

/// Exact `str`, `bytes` or `bytearray`: text whose characters are all there is to it. A
/// subclass may override what `json.loads` calls (`startswith`, `decode`, `__len__`), so
/// only the reference can treat it as `json.loads` does.
pub(crate) fn is_exact_text(text: &Bound<'_, PyAny>) -> bool {
    text.is_exact_instance_of::<PyString>()
        || text.is_exact_instance_of::<PyBytes>()
        || text.is_exact_instance_of::<PyByteArray>()
}
