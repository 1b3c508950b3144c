//! `call_key_json` and `call_keys`: keys from JSON text, parsed in Rust (`json.rs`) rather than
//! through `json.loads`, with the GIL released for the batch.

use std::borrow::Cow;

use pyo3::exceptions::{PyRecursionError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyIterator, PyList, PySequence, PyString, PyTuple};

use crate::canon::{self, Text};
use crate::json::{self, JsonError};
use crate::key::Key;
use crate::py_canon::{
    ascii_of, canonical_key, check_name, key_str, key_with_buffer, text_of, wtf8_of, VolatileKeys,
};

struct JsonHelpers {
    decode_error: Py<PyAny>,
    decode_bytes: Py<PyAny>,
    invalid_json_key: Py<PyAny>,
    call_key_json: Py<PyAny>,
    get_int_max_str_digits: Py<PyAny>,
}

static JSON_HELPERS: PyOnceLock<JsonHelpers> = PyOnceLock::new();

fn helpers(py: Python<'_>) -> PyResult<&JsonHelpers> {
    JSON_HELPERS.get_or_try_init(py, || {
        let keys = py.import("tripwire._keys")?;
        Ok(JsonHelpers {
            decode_error: py.import("json")?.getattr("JSONDecodeError")?.unbind(),
            decode_bytes: keys.getattr("decode_json_bytes")?.unbind(),
            invalid_json_key: keys.getattr("invalid_json_key")?.unbind(),
            call_key_json: keys.getattr("call_key_json")?.unbind(),
            get_int_max_str_digits: py
                .import("sys")?
                .getattr("get_int_max_str_digits")?
                .unbind(),
        })
    })
}

/// JSON text as WTF-8: borrowed from a `str` that is ASCII (most are), else converted.
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
        let mut raw: Vec<u8> = if let Ok(b) = text.cast::<PyBytes>() {
            b.as_bytes().to_vec()
        } else if let Ok(b) = text.cast::<PyByteArray>() {
            b.to_vec()
        } else {
            return Err(PyTypeError::new_err(format!(
                "the JSON object must be str, bytes or bytearray, not {}",
                text.get_type().name()?
            )));
        };
        match detect_utf8(&raw) {
            Some(skip) if json::is_wtf8(&raw[skip..]) => {
                raw.drain(..skip);
                Ok(JsonText {
                    bytes: Cow::Owned(raw),
                })
            }
            // UTF-16/32, or bytes that do not decode: Python decodes (or raises) exactly as
            // json.loads does.
            _ => {
                let decoded = helpers(py)?.decode_bytes.bind(py).call1((text,))?;
                // json.loads checks for a BOM only in str input, not in decoded bytes.
                let decoded = JsonText::from_str(py, decoded.cast::<PyString>()?, false)?;
                Ok(JsonText {
                    bytes: Cow::Owned(decoded.bytes.into_owned()),
                })
            }
        }
    }

    fn from_str(py: Python<'_>, s: &'a Bound<'_, PyString>, refuse_bom: bool) -> PyResult<Self> {
        let bytes: Cow<'a, [u8]> = match ascii_of(s) {
            Some(ascii) => Cow::Borrowed(ascii),
            None => Cow::Owned(wtf8_of(s)?),
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

    /// The same text, borrowed for as long as the caller says.
    ///
    /// # Safety
    /// The object the text was made from must stay alive, unchanged, for `'b`.
    unsafe fn extend<'b>(self) -> JsonText<'b> {
        let bytes = match self.bytes {
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

/// The text `source` as the `str` that `json.loads` would have seen.
fn doc<'py>(py: Python<'py>, source: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    if let Ok(s) = source.cast::<PyString>() {
        return Ok(s.clone());
    }
    Ok(helpers(py)?
        .decode_bytes
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
    match helpers(py).and_then(|h| h.decode_error.bind(py).call1((msg, doc, pos))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

fn int_digit_limit(py: Python<'_>) -> PyResult<usize> {
    let limit: usize = helpers(py)?
        .get_int_max_str_digits
        .bind(py)
        .call0()?
        .extract()?;
    Ok(if limit == 0 { usize::MAX } else { limit })
}

/// Turns a parse error into the exception `json.loads` (or the key contract) raises.
fn raise(py: Python<'_>, err: JsonError, text: &JsonText<'_>, source: &Bound<'_, PyAny>) -> PyErr {
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

/// Why the native parser gave no canonical bytes.
enum CallError {
    /// Nested deeper than the native parser goes: the reference decides.
    TooDeep,
    /// The exception `json.loads` raises.
    Raised(PyErr),
}
use CallError::{Raised, TooDeep};

/// Canonical bytes for a call whose arguments are JSON text.
fn canonical_json_call(
    py: Python<'_>,
    name: Text<'_>,
    text: &JsonText<'_>,
    source: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
    out: Vec<u8>,
) -> Result<Vec<u8>, CallError> {
    let names = volatile.names();
    let first = json::canonical_call_into(out, name, &text.bytes, names, json::MIN_INT_DIGIT_LIMIT);
    let outcome = match first {
        // Longer than the smallest possible limit: check against the limit in force.
        Err(JsonError::IntTooLong { .. }) => {
            let limit = int_digit_limit(py).map_err(Raised)?;
            json::canonical_call(name, &text.bytes, names, limit)
        }
        outcome => outcome,
    };
    outcome.map_err(|err| match err {
        JsonError::TooDeep => TooDeep,
        err => Raised(raise(py, err, text, source)),
    })
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
    match key_with_buffer(|out| canonical_json_call(py, name_text, &parsed, text, volatile, out)) {
        Ok(key) => Ok(key),
        Err(TooDeep) => reference_json_key(py, name, text, volatile),
        Err(Raised(err)) => Err(err),
    }
}

/// The reference's key for a call the native parser does not take: volatile keys only
/// Python can compare, or nesting past `PARSE_DEPTH_LIMIT`.
fn reference_json_key(
    py: Python<'_>,
    name: &Bound<'_, PyString>,
    text: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
) -> PyResult<Key> {
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("volatile_keys", volatile.set(py))?;
    let hex: String = helpers(py)?
        .call_key_json
        .bind(py)
        .call((name, text), Some(&kwargs))?
        .extract()?;
    crate::key::parse_key_hex(&hex)
        .ok_or_else(|| PyValueError::new_err("the reference returned a malformed key"))
}

/// The key that stands for a call whose arguments are not valid JSON: the raw text with its
/// whitespace collapsed (a model that keeps sending the same broken arguments is looping too).
pub fn invalid_json_key(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    text: &Bound<'_, PyAny>,
) -> PyResult<Key> {
    let hex: String = helpers(py)?
        .invalid_json_key
        .bind(py)
        .call1((name, text))?
        .extract()?;
    crate::key::parse_key_hex(&hex).ok_or_else(|| PyValueError::new_err("malformed key"))
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

/// One JSON-text call of a batch, owned so it can be keyed without the GIL.
struct Pending<'py> {
    index: usize,
    /// The tool name, as an index into the batch's [`ToolNames`].
    name: usize,
    text: JsonText<'py>,
    /// The call as given, for the rare texts keyed again with the GIL.
    call: (Py<PyString>, Py<PyAny>),
}

/// Exact `str`, `bytes` or `bytearray`: text whose characters are all there is to it. A
/// subclass may override what `json.loads` calls (`startswith`, `decode`, `__len__`), so
/// only the reference can treat it as `json.loads` does.
fn is_exact_text(text: &Bound<'_, PyAny>) -> bool {
    text.is_exact_instance_of::<PyString>()
        || text.is_exact_instance_of::<PyBytes>()
        || text.is_exact_instance_of::<PyByteArray>()
}

/// Notes which call of the batch an error came from, on an `Exception` (as the reference
/// does: an interrupt is not about a call, and passes through untouched).
fn add_note(py: Python<'_>, err: PyErr, index: usize) -> PyErr {
    if !err.is_instance_of::<pyo3::exceptions::PyException>(py) {
        return err;
    }
    let note = format!("in call {index} of call_keys()");
    // If the note cannot be added the error itself is still the one to raise.
    let _ = err.value(py).call_method1("add_note", (note,));
    err
}

/// The number of threads to use: `None` means every core; more threads than cores are
/// accepted (as in the reference) but not started, as they would only add switching.
fn threads_arg(threads: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(t) = threads.filter(|t| !t.is_none()) else {
        return Ok(cores);
    };
    if t.is_instance_of::<pyo3::types::PyBool>() || !t.is_instance_of::<pyo3::types::PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "threads must be an int or None, not {}",
            t.get_type().name()?
        )));
    }
    if t.lt(1)? {
        return Err(PyValueError::new_err(format!(
            "threads must be at least 1, got {}",
            t.str()?
        )));
    }
    Ok(t.extract::<usize>().unwrap_or(usize::MAX).min(cores))
}

/// Below this much JSON text a batch runs on one thread: starting threads costs more.
const PARALLEL_MIN_BYTES: usize = 256 * 1024;

/// `call_keys(calls, /, *, volatile_keys=None, threads=None) -> list[str]`
#[pyfunction]
#[pyo3(signature = (calls, /, *, volatile_keys = None, threads = None))]
pub fn call_keys<'py>(
    py: Python<'py>,
    calls: &Bound<'py, PyAny>,
    volatile_keys: Option<&Bound<'py, PyAny>>,
    threads: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let threads = threads_arg(threads)?;
    let volatile = VolatileKeys::from_arg(py, volatile_keys)?;
    let mut calls = Calls::new(calls)?;
    let mut keys: Vec<Key> = Vec::with_capacity(calls.len_hint());
    let mut names = ToolNames::default();
    let mut pending: Vec<Pending<'py>> = Vec::new();
    let mut pending_bytes = 0;
    // The batch is read and keyed a block at a time, so that each text is still in cache
    // when it is keyed; with threads, blocks are big enough to share.
    let block_bytes = if threads > 1 {
        PARALLEL_BLOCK_BYTES
    } else {
        SERIAL_BLOCK_BYTES
    };
    // The first error met while reading the batch; JSON texts before it are still keyed, so
    // that the error reported is the one with the lowest index, as in the reference.
    let mut first_error: Option<(usize, PyErr)> = None;
    let mut index = 0;
    loop {
        let done = match calls.next() {
            None => true,
            Some(Err(err)) => {
                // The iterable's own error belongs to no call: it gets no note.
                first_error = Some((usize::MAX, err));
                true
            }
            Some(Ok(call)) => {
                let step = read_call(
                    py,
                    index,
                    &call,
                    &volatile,
                    &mut names,
                    &mut keys,
                    &mut pending,
                );
                index += 1;
                match step {
                    Ok(bytes) => {
                        pending_bytes += bytes;
                        false
                    }
                    Err(err) => {
                        first_error = Some((index - 1, err));
                        true
                    }
                }
            }
        };
        if done || pending_bytes >= block_bytes || pending.len() >= BLOCK_CALLS {
            key_block(py, &pending, &names.wtf8, &volatile, threads, &mut keys)?;
            pending.clear();
            names.clear();
            pending_bytes = 0;
        }
        if done {
            break;
        }
    }
    match first_error {
        Some((usize::MAX, err)) => Err(err),
        Some((index, err)) => Err(add_note(py, err, index)),
        None => key_list(py, &keys),
    }
}

/// The calls of a batch: read by index from a list or tuple (as their iterators do, so a
/// list that a callback grows is read to its new end), else through an iterator.
enum Calls<'py> {
    List(Bound<'py, PyList>, usize),
    Tuple(Bound<'py, PyTuple>, usize),
    Iter(Bound<'py, PyIterator>),
}

impl<'py> Calls<'py> {
    fn new(calls: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(list) = calls.cast_exact::<PyList>() {
            Ok(Calls::List(list.clone(), 0))
        } else if let Ok(tuple) = calls.cast_exact::<PyTuple>() {
            Ok(Calls::Tuple(tuple.clone(), 0))
        } else {
            Ok(Calls::Iter(calls.try_iter()?))
        }
    }

    /// How many calls there are, where that is known without running Python code.
    fn len_hint(&self) -> usize {
        match self {
            Calls::List(list, _) => list.len(),
            Calls::Tuple(tuple, _) => tuple.len(),
            Calls::Iter(_) => 0,
        }
    }

    fn next(&mut self) -> Option<PyResult<Bound<'py, PyAny>>> {
        match self {
            Calls::List(list, i) => {
                let item = list.get_item(*i).ok()?;
                *i += 1;
                Some(Ok(item))
            }
            Calls::Tuple(tuple, i) => {
                let item = tuple.get_item(*i).ok()?;
                *i += 1;
                Some(Ok(item))
            }
            Calls::Iter(iter) => iter.next(),
        }
    }
}

/// The tool names of a batch as WTF-8, each converted once for a run of calls that pass
/// the same name object (most batches name a handful of tools, each many times).
#[derive(Default)]
struct ToolNames<'py> {
    wtf8: Vec<Vec<u8>>,
    /// The last name met, held (so that no other object can take its address) with its
    /// index in `wtf8`.
    last: Option<(Bound<'py, PyString>, usize)>,
}

impl<'py> ToolNames<'py> {
    fn index_of(&mut self, name: &Bound<'py, PyString>) -> PyResult<usize> {
        if let Some((last, index)) = &self.last {
            if last.is(name) {
                return Ok(*index);
            }
        }
        let index = self.wtf8.len();
        self.wtf8.push(wtf8_of(name)?);
        self.last = Some((name.clone(), index));
        Ok(index)
    }

    /// Forgets the names (of a block keyed and done with).
    fn clear(&mut self) {
        self.wtf8.clear();
        self.last = None;
    }
}

/// The keys as a list of `str`, built in place.
fn key_list<'py>(py: Python<'py>, keys: &[Key]) -> PyResult<Bound<'py, PyList>> {
    let len = ffi::Py_ssize_t::try_from(keys.len())
        .map_err(|_| PyValueError::new_err("too many calls"))?;
    // SAFETY: PyList_New gives a list of `len` NULL slots (or NULL, raised as the error);
    // each slot is set exactly once, with a new reference that the list takes over. Until
    // then the list is only seen here, and a list with NULL slots is safe to free.
    unsafe {
        let list = Bound::from_owned_ptr_or_err(py, ffi::PyList_New(len))?;
        for (i, &key) in keys.iter().enumerate() {
            let text = key_str(py, key)?;
            ffi::PyList_SET_ITEM(list.as_ptr(), i as ffi::Py_ssize_t, text.into_ptr());
        }
        Ok(list.cast_into_unchecked::<PyList>())
    }
}

/// A block of JSON text this long is keyed before more is read (one thread: it stays in
/// cache; two or more: enough to share out, see [`PARALLEL_MIN_BYTES`]).
const SERIAL_BLOCK_BYTES: usize = 64 * 1024;
const PARALLEL_BLOCK_BYTES: usize = 1024 * 1024;
/// ...or this many calls, whichever comes first.
const BLOCK_CALLS: usize = 4096;

/// Reads call `index` of a batch: JSON text is queued in `pending` (its key left 0 in
/// `keys` for now) and its length returned; anything else is keyed at once.
fn read_call<'py>(
    py: Python<'py>,
    index: usize,
    call: &Bound<'py, PyAny>,
    volatile: &VolatileKeys,
    names: &mut ToolNames<'py>,
    keys: &mut Vec<Key>,
    pending: &mut Vec<Pending<'py>>,
) -> PyResult<usize> {
    let (name, args) = call_pair(index, call)?;
    let is_text = args.is_instance_of::<PyString>()
        || args.is_instance_of::<PyBytes>()
        || args.is_instance_of::<PyByteArray>();
    if is_text && volatile.only_exact_str() && is_exact_text(&args) {
        let name = check_name(&name)?;
        // SAFETY: the text borrows from `args`, which the pending call holds on to.
        let text = unsafe { JsonText::from_py(py, &args)?.extend() };
        let bytes = text.bytes.len();
        pending.push(Pending {
            index,
            name: names.index_of(name)?,
            text,
            call: (name.clone().unbind(), args.unbind()),
        });
        keys.push(0);
        Ok(bytes)
    } else if is_text {
        keys.push(json_key(py, &name, &args, volatile)?);
        Ok(0)
    } else {
        keys.push(canonical_key(py, &name, &args, volatile)?);
        Ok(0)
    }
}

/// The `(name, args)` of call `index`: any sequence of two that is not text.
fn call_pair<'py>(
    index: usize,
    call: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    if let Ok(tuple) = call.cast_exact::<PyTuple>() {
        if tuple.len() == 2 {
            return Ok((tuple.get_item(0)?, tuple.get_item(1)?));
        }
    }
    let pair = call
        .cast::<PySequence>()
        .ok()
        .filter(|_| !call.is_instance_of::<PyString>() && !call.is_instance_of::<PyBytes>())
        .filter(|seq| seq.len().ok() == Some(2));
    let Some(pair) = pair else {
        return Err(PyTypeError::new_err(format!(
            "call {index} must be a (name, args) pair, not {}",
            call.get_type().name()?
        )));
    };
    Ok((pair.get_item(0)?, pair.get_item(1)?))
}

/// Keys the queued JSON texts (without the GIL) and fills in their keys.
fn key_block(
    py: Python<'_>,
    pending: &[Pending<'_>],
    tool_names: &[Vec<u8>],
    volatile: &VolatileKeys,
    threads: usize,
    keys: &mut [Key],
) -> PyResult<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let names = volatile.names();
    let results = py.detach(|| key_pending(pending, tool_names, names, threads));
    for (item, result) in pending.iter().zip(results) {
        match result {
            Ok(key) => keys[item.index] = key,
            Err(JsonError::IntTooLong { .. } | JsonError::TooDeep) => {
                // The rare texts that need Python: keyed again with the GIL.
                let (name, args) = (item.call.0.bind(py), item.call.1.bind(py));
                match json_key(py, name.as_any(), args, volatile) {
                    Ok(key) => keys[item.index] = key,
                    Err(err) => return Err(add_note(py, err, item.index)),
                }
            }
            Err(err) => {
                let source = item.call.1.bind(py);
                return Err(add_note(py, raise(py, err, &item.text, source), item.index));
            }
        }
    }
    Ok(())
}

/// Keys every pending call, across `threads` threads when there is enough text to share.
fn key_pending(
    pending: &[Pending<'_>],
    tool_names: &[Vec<u8>],
    volatile: &[Vec<u8>],
    threads: usize,
) -> Vec<Result<Key, JsonError>> {
    let key_one = |item: &Pending<'_>| {
        // Each thread reuses its own buffer (thread-local) from call to call.
        key_with_buffer(|out| {
            json::canonical_call_into(
                out,
                Text::Wtf8(&tool_names[item.name]),
                &item.text.bytes,
                volatile,
                json::MIN_INT_DIGIT_LIMIT,
            )
        })
    };
    let total: usize = pending.iter().map(|p| p.text.bytes.len()).sum();
    if threads <= 1 || pending.len() < 2 || total < PARALLEL_MIN_BYTES {
        return pending.iter().map(key_one).collect();
    }
    let chunk = pending.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let key_part = move |part: &[Pending<'_>]| part.iter().map(key_one).collect::<Vec<_>>();
        let mut parts = pending.chunks(chunk);
        // This thread keys the last part itself rather than wait idle.
        let own = parts.next_back().unwrap_or_default();
        // A thread the OS refuses to start is no error: its part is keyed on this thread.
        let workers: Vec<_> = parts
            .map(|part| {
                let worker =
                    std::thread::Builder::new().spawn_scoped(scope, move || key_part(part));
                (part, worker.ok())
            })
            .collect();
        let own_keys = key_part(own);
        workers
            .into_iter()
            .flat_map(|(part, worker)| match worker {
                // A worker only panics on a bug (release builds abort instead); never unwind
                // into Python, and keep one answer per call.
                Some(worker) => worker
                    .join()
                    .unwrap_or_else(|_| vec![Err(JsonError::TooDeep); part.len()]),
                None => key_part(part),
            })
            .chain(own_keys)
            .collect()
    })
}
