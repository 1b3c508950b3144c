//! Snapshots of the native `Guard` (issue 18): between its Python objects and the format's
//! pieces. `snapshot.rs` writes and reads the run state's bytes; the configuration is the
//! reference's to write and read (`tripwire/_snapshot.py`, cold), and a restore finds an
//! already-built configuration by its bytes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyMemoryView, PyString};
use sha2::{Digest, Sha256};

use crate::key::Key;
use crate::py_canon::{ascii_of, canonical_key, wtf8_of, VolatileKeys};
use crate::py_guard::{
    annotated_specs, formatted, limits_arg, specs_of, Guard, GuardConfig, State, Stored,
};
use crate::py_reference::reference;
use crate::py_verdict::{Verdict, VerdictDetail};
use crate::snapshot::{
    check_verdict, frame_end, frame_start, unframe, write_cache, Decode, DetailData, Encode,
    Reader, SnapshotError, VerdictData, Writer, FULL, H_CACHED, STATE_ONLY,
};

/// The reference's `SnapshotError` (a `ValueError`) with the format's message.
fn error(py: Python<'_>, why: &str) -> PyErr {
    match reference(py).and_then(|h| h.SnapshotError.bind(py).call1((why,))) {
        Ok(err) => PyErr::from_value(err),
        Err(err) => err,
    }
}

fn format_error(py: Python<'_>) -> impl Fn(SnapshotError) -> PyErr + '_ {
    move |e| error(py, &e.0)
}

/// A str's WTF-8 bytes, borrowed for ASCII (nearly every tool name and call id).
fn str_bytes<'a>(text: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    Ok(match ascii_of(text) {
        Some(ascii) => Cow::Borrowed(ascii),
        None => Cow::Owned(wtf8_of(text)?),
    })
}

/// A str from WTF-8 bytes (checked by the reader), lone surrogates included.
fn new_str(py: Python<'_>, bytes: &[u8]) -> PyResult<Py<PyString>> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Ok(PyString::new(py, text).unbind());
    }
    // SAFETY: `bytes` is a live slice of `len` bytes; the call returns a new reference to a
    // str, or NULL with an exception set, which `from_owned_ptr_or_err` turns into an error.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyUnicode_DecodeUTF8(
                bytes.as_ptr().cast(),
                bytes.len() as pyo3::ffi::Py_ssize_t,
                c"surrogatepass".as_ptr(),
            ),
        )
        .map(|text| text.cast_into_unchecked::<PyString>().unbind())
    }
}

impl GuardConfig {
    /// The configuration as a snapshot writes it, and its digest (made once).
    pub(crate) fn written(&self, py: Python<'_>) -> PyResult<&(Box<[u8]>, [u8; 8])> {
        if let Some(written) = self.written.get() {
            return Ok(written);
        }
        let bytes: Vec<u8> = reference(py)?
            .config_bytes
            .bind(py)
            .call1((
                self.limits.window,
                self.limits.nudge_at,
                self.limits.stop_at,
                self.max_steps_text.as_deref(),
                self.volatile.set(py),
                self.tools_checked.bind(py),
                &self.tools_repr,
                self.infer,
                self.definitions.bind(py),
            ))?
            .extract()?;
        let digest = config_digest(&bytes);
        Ok(self.written.get_or_init(|| (bytes.into(), digest)))
    }
}

fn config_digest(config: &[u8]) -> [u8; 8] {
    let mut digest = [0u8; 8];
    digest.copy_from_slice(&Sha256::digest(config)[..8]);
    digest
}

/// Configurations already built, by their bytes, so that restoring a guard (a worker's every
/// step, with a store) does not parse one again. Bounded: a process restores the guards of
/// a few configurations, and past this many the memory starts over.
const CONFIGS: usize = 64;

#[derive(Default)]
struct Configs {
    /// The one restored last, compared first: a worker restores one configuration over and
    /// over, and comparing its bytes is a fraction of hashing them for the map.
    last: Option<Arc<GuardConfig>>,
    by_bytes: HashMap<Box<[u8]>, Arc<GuardConfig>>,
}

static BUILT: PyOnceLock<Mutex<Configs>> = PyOnceLock::new();

fn config_for(py: Python<'_>, written: &[u8]) -> PyResult<Arc<GuardConfig>> {
    let built = BUILT.get_or_init(py, Mutex::default);
    let lock = || {
        built
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    let found = {
        let mut configs = lock();
        if let Some(last) = &configs.last {
            if last
                .written
                .get()
                .is_some_and(|(bytes, _)| **bytes == *written)
            {
                return Ok(last.clone());
            }
        }
        let config = configs.by_bytes.get(written).cloned();
        config.map(|config| (config.clone(), configs.last.replace(config)))
    };
    if let Some((config, previous)) = found {
        // Dropped after the lock is released (see below).
        drop(previous);
        return Ok(config);
    }
    // Built with no lock held: this runs the reference's checks.
    let config = Arc::new(build_config(py, written)?);
    let forgotten = {
        let mut configs = lock();
        let forgotten = if configs.by_bytes.len() >= CONFIGS {
            std::mem::take(&mut configs.by_bytes)
        } else {
            HashMap::new()
        };
        configs.by_bytes.insert(written.into(), config.clone());
        (forgotten, configs.last.replace(config.clone()))
    };
    // Dropped after the lock is released: dropping Python objects can run Python code.
    drop(forgotten);
    Ok(config)
}

fn build_config(py: Python<'_>, written: &[u8]) -> PyResult<GuardConfig> {
    let parsed = reference(py)?
        .read_config
        .bind(py)
        .call1((PyBytes::new(py, written),))?;
    let get = |name: &str| parsed.getattr(name);
    let (window, nudge_at, stop_at, max_steps) = (
        get("window")?,
        get("nudge_at")?,
        get("stop_at")?,
        get("max_steps")?,
    );
    let limits = limits_arg(
        py,
        Some(&window),
        Some(&nudge_at),
        Some(&stop_at),
        Some(&max_steps),
    )?;
    let max_steps_text = if max_steps.is_none() {
        None
    } else {
        Some(Arc::from(formatted(&max_steps)?))
    };
    let tools_checked = get("tools")?.cast_into::<PyDict>()?;
    let definitions = get("definitions")?;
    let config = GuardConfig {
        limits,
        volatile: VolatileKeys::from_arg(py, Some(&get("volatile_keys")?))?,
        tools: specs_of(&tools_checked)?,
        tools_checked: tools_checked.unbind(),
        tools_repr: get("tools_repr")?.extract()?,
        infer: get("infer")?.extract()?,
        annotated: annotated_specs(py, &definitions)?,
        definitions: definitions.unbind(),
        max_steps_text,
        written: std::sync::OnceLock::new(),
        serial: crate::py_guard::config_serial(),
    };
    // Only what tripwire writes: then equal configurations are equal bytes, and a guard's
    // snapshots carry the configuration they were restored with.
    if *config.written(py)?.0 != *written {
        return Err(error(
            py,
            "not a tripwire guard snapshot: its configuration is not written as tripwire writes it",
        ));
    }
    Ok(config)
}

/// What `snapshot` writes with the state locked: no Python code may run then, so cached
/// results (which take `json_text`) are noted and written after.
struct Encoder<'py> {
    py: Python<'py>,
    /// A verdict's head byte, where its cached result goes, and the result.
    pending: Vec<(usize, usize, Py<PyAny>)>,
    error: Option<PyErr>,
}

impl Encoder<'_> {
    fn bytes<'a>(&mut self, text: &'a Bound<'_, PyString>) -> Cow<'a, [u8]> {
        str_bytes(text).unwrap_or_else(|err| {
            self.error.get_or_insert(err);
            Cow::Borrowed(b"")
        })
    }
}

/// A verdict's detail as written (its texts copied: most details have none).
fn detail_data(
    encoder: &mut Encoder<'_>,
    detail: &VerdictDetail,
) -> DetailData<Cow<'static, [u8]>> {
    let py = encoder.py;
    let text = |encoder: &mut Encoder<'_>, text: &Py<PyString>| -> Cow<'static, [u8]> {
        Cow::Owned(encoder.bytes(text.bind(py)).into_owned())
    };
    let names = |encoder: &mut Encoder<'_>, names: &[Py<PyString>]| {
        names.iter().map(|n| text(encoder, n)).collect()
    };
    match detail {
        VerdictDetail::Plain => DetailData::Plain,
        VerdictDetail::Unchanged => DetailData::Unchanged,
        VerdictDetail::Failed(error, n) => DetailData::Failed(text(encoder, error), *n),
        VerdictDetail::Errors(n, error) => DetailData::Errors(*n, text(encoder, error)),
        VerdictDetail::Empty(n, tools) => DetailData::Empty(*n, names(encoder, tools)),
        VerdictDetail::Cycle(tools, writes) => DetailData::Cycle(names(encoder, tools), *writes),
        VerdictDetail::PollLimit(n) => DetailData::PollLimit(u64::from(*n)),
        VerdictDetail::After(tool, n, inner) => DetailData::After(
            text(encoder, tool),
            *n,
            Box::new(detail_data(encoder, inner)),
        ),
    }
}

impl Encode<Stored, Py<PyString>> for Encoder<'_> {
    fn write_text(&mut self, out: &mut Writer, text: &Py<PyString>) {
        let py = self.py;
        let bytes = self.bytes(text.bind(py));
        out.bytes(&bytes);
    }

    fn write_verdict(&mut self, out: &mut Writer, verdict: &Stored, restored: &[u8]) {
        match verdict {
            Stored::Live(verdict) => self.write_live(out, verdict),
            // As it was read: the format is canonical, so these are the bytes it would write.
            Stored::Encoded { at, len, .. } => out.raw(&restored[*at..*at + *len]),
        }
    }
}

impl Encoder<'_> {
    fn write_live(&mut self, out: &mut Writer, verdict: &Verdict) {
        let py = self.py;
        let data = VerdictData {
            action: verdict.action,
            reason: verdict.reason,
            tool: self.bytes(verdict.tool.bind(py)),
            key: verdict.key,
            repeats: verdict.repeats,
            step: verdict.step,
            cached: None,
            call_id: verdict.call_id.as_ref().map(|c| self.bytes(c.bind(py))),
            // A turn's index: far below 2^32.
            duplicate_of: verdict
                .duplicate_of
                .map(|i| u32::try_from(i).unwrap_or(u32::MAX)),
            invalid_arguments: verdict
                .invalid_arguments
                .as_ref()
                .map(|i| self.bytes(i.bind(py))),
            detail: detail_data(self, &verdict.detail),
        };
        let (head, at) = data.write(out);
        if let Some(cached) = &verdict.cached {
            self.pending.push((head, at, cached.clone_ref(py)));
        }
    }
}

/// The JSON text of a cached result, if it is a JSON value.
fn json_text(py: Python<'_>, result: &Py<PyAny>) -> PyResult<Option<Vec<u8>>> {
    reference(py)?
        .json_text
        .bind(py)
        .call1((result.bind(py),))?
        .extract()
}

/// The snapshot so far with the verdicts' cached results put in (those that are JSON values).
fn with_cached(
    py: Python<'_>,
    state: Vec<u8>,
    pending: Vec<(usize, usize, Py<PyAny>)>,
) -> PyResult<Vec<u8>> {
    if pending.is_empty() {
        return Ok(state);
    }
    let mut out = Writer {
        out: Vec::with_capacity(state.len() + 64 * pending.len()),
    };
    let mut copied = 0;
    for (head, at, result) in pending {
        let Some(json) = json_text(py, &result)? else {
            continue;
        };
        out.out.extend_from_slice(&state[copied..at]);
        let shift = out.out.len() - at;
        out.out[head + shift] |= H_CACHED;
        out.bytes(&json);
        copied = at;
    }
    out.out.extend_from_slice(&state[copied..]);
    Ok(out.out)
}

/// `guard.snapshot(state_only=...)`.
pub(crate) fn snapshot<'py>(
    py: Python<'py>,
    guard: &Guard,
    state_only: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let (config, digest) = guard.config.written(py)?;
    guard.tell_questions(py)?;
    // The state is written after the header, in place (`write_snapshot` makes room).
    let mut out = if state_only {
        frame_start(STATE_ONLY, digest, 0)
    } else {
        frame_start(FULL, config, 0)
    };
    let mut encoder = Encoder {
        py,
        pending: Vec::new(),
        error: None,
    };
    let cached: Vec<(Key, Py<PyAny>)> = {
        let state = guard.lock();
        state.write_snapshot(&mut out, &mut encoder);
        state
            .cached_in_order()
            .map(|(key, result)| (key, result.clone_ref(py)))
            .collect()
    };
    if let Some(err) = encoder.error {
        return Err(err);
    }
    let state = with_cached(py, out.out, encoder.pending)?;
    let mut kept = Vec::with_capacity(cached.len());
    for (key, result) in &cached {
        if let Some(json) = json_text(py, result)? {
            kept.push((*key, json));
        }
    }
    let mut tail = Writer { out: state };
    write_cache(&mut tail, &kept);
    Ok(PyBytes::new(py, &frame_end(tail)))
}

/// Reads a state back into Python objects; texts met twice (tool names) are made once.
struct Decoder<'py> {
    py: Python<'py>,
    window: usize,
    budget: Option<Arc<str>>,
    texts: Vec<(Box<[u8]>, Py<PyString>)>,
}

/// How many distinct texts a restore reuses (tool names, mostly); past it, each is made anew.
const SHARED_TEXTS: usize = 32;

fn to_format(err: PyErr) -> SnapshotError {
    SnapshotError(err.to_string())
}

impl Decoder<'_> {
    fn text_of(&mut self, bytes: &[u8]) -> crate::snapshot::Result<Py<PyString>> {
        let py = self.py;
        if let Some((_, text)) = self.texts.iter().find(|(b, _)| **b == *bytes) {
            return Ok(text.clone_ref(py));
        }
        let text = new_str(py, bytes).map_err(to_format)?;
        if self.texts.len() < SHARED_TEXTS {
            self.texts.push((bytes.into(), text.clone_ref(py)));
        }
        Ok(text)
    }

    fn detail(&mut self, detail: DetailData<&[u8]>) -> crate::snapshot::Result<VerdictDetail> {
        let names = |names: Vec<&[u8]>, this: &mut Self| {
            names
                .into_iter()
                .map(|n| this.text_of(n))
                .collect::<crate::snapshot::Result<Vec<_>>>()
        };
        Ok(match detail {
            DetailData::Plain => VerdictDetail::Plain,
            DetailData::Unchanged => VerdictDetail::Unchanged,
            DetailData::Failed(text, n) => VerdictDetail::Failed(self.text_of(text)?, n),
            DetailData::Errors(n, text) => VerdictDetail::Errors(n, self.text_of(text)?),
            DetailData::Empty(n, tools) => VerdictDetail::Empty(n, names(tools, self)?),
            DetailData::Cycle(tools, writes) => VerdictDetail::Cycle(names(tools, self)?, writes),
            // A limit beyond 2^32 polls is no limit (the guard's own max_polls saturates).
            DetailData::PollLimit(n) => {
                VerdictDetail::PollLimit(u32::try_from(n).unwrap_or(u32::MAX))
            }
            DetailData::After(tool, n, inner) => {
                VerdictDetail::After(self.text_of(tool)?, n, Box::new(self.detail(*inner)?))
            }
        })
    }

    fn json_value(&self, json: &[u8]) -> crate::snapshot::Result<Py<PyAny>> {
        let py = self.py;
        reference(py)
            .and_then(|h| h.json_value.bind(py).call1((PyBytes::new(py, json),)))
            .map(Bound::unbind)
            .map_err(to_format)
    }
}

impl Decode<Stored, Py<PyAny>, Py<PyString>> for Decoder<'_> {
    fn same_text(&mut self, text: &Py<PyString>, bytes: &[u8]) -> bool {
        str_bytes(text.bind(self.py)).is_ok_and(|known| *known == *bytes)
    }

    fn make_text(&mut self, bytes: &[u8]) -> crate::snapshot::Result<Py<PyString>> {
        self.text_of(bytes)
    }

    fn read_verdict(&mut self, reader: &mut Reader<'_>) -> crate::snapshot::Result<Stored> {
        if reader.peek().is_some_and(|head| head & H_CACHED != 0) {
            let verdict = self.live(VerdictData::read(reader)?)?;
            return Ok(Stored::Live(Box::new(verdict)));
        }
        // Checked, and kept as where its bytes are: see `Stored::Encoded`.
        let at = reader.position();
        let step = check_verdict(reader)?;
        Ok(Stored::Encoded {
            at,
            len: reader.position() - at,
            step,
        })
    }

    fn keeps_bytes(&self) -> bool {
        true
    }

    fn verdict_step(&self, verdict: &Stored) -> u64 {
        verdict.step()
    }

    fn read_result(&mut self, json: &[u8]) -> crate::snapshot::Result<Py<PyAny>> {
        self.json_value(json)
    }
}

impl Decoder<'_> {
    /// A verdict's Python objects, from its fields as read.
    fn live(&mut self, data: VerdictData<&[u8]>) -> crate::snapshot::Result<Verdict> {
        let py = self.py;
        let call_id = match data.call_id {
            Some(id) => Some(new_str(py, id).map_err(to_format)?),
            None => None,
        };
        Ok(Verdict {
            action: data.action,
            reason: data.reason,
            tool: self.text_of(data.tool)?,
            key: data.key,
            repeats: data.repeats,
            step: data.step,
            cached: data.cached.map(|j| self.json_value(j)).transpose()?,
            call_id,
            duplicate_of: data.duplicate_of.map(|i| i as usize),
            invalid_arguments: data
                .invalid_arguments
                .map(|i| new_str(py, i).map_err(to_format))
                .transpose()?,
            window: self.window,
            budget: self.budget.clone(),
            detail: self.detail(data.detail)?,
            origin: 0,
            plain_results: false,
        })
    }
}

/// A verdict's fields in the snapshot's encoding, its cached result left out (pickle
/// takes that as the object it is): what `Verdict.__reduce__` hands to pickle and copy.
pub(crate) fn verdict_bytes(py: Python<'_>, verdict: &Verdict) -> PyResult<Vec<u8>> {
    let mut encoder = Encoder {
        py,
        pending: Vec::new(),
        error: None,
    };
    let mut out = Writer { out: Vec::new() };
    encoder.write_live(&mut out, verdict);
    match encoder.error {
        Some(err) => Err(err),
        None => Ok(out.out),
    }
}

/// A verdict from `verdict_bytes`, with its window, budget text and cached result (the
/// other half of `Verdict.__reduce__`); `SnapshotError` for bytes it did not write.
pub(crate) fn verdict_from_bytes(
    py: Python<'_>,
    bytes: &[u8],
    window: usize,
    budget: Option<Arc<str>>,
    cached: Option<Py<PyAny>>,
) -> PyResult<Verdict> {
    let mut decoder = Decoder {
        py,
        window,
        budget,
        texts: Vec::new(),
    };
    let mut reader = Reader::new(bytes);
    let mut verdict = VerdictData::read(&mut reader)
        .and_then(|data| decoder.live(data))
        .map_err(format_error(py))?;
    if reader.remaining() != 0 {
        return Err(error(py, "not a tripwire verdict: bytes after its end"));
    }
    verdict.cached = cached;
    Ok(verdict)
}

/// A verdict kept as its bytes (`Stored::Encoded`), made into a `Verdict` when asked for.
pub(crate) fn decode_verdict(
    py: Python<'_>,
    config: &GuardConfig,
    bytes: &[u8],
) -> PyResult<Verdict> {
    let mut decoder = Decoder {
        py,
        window: config.limits.window,
        budget: config.max_steps_text.clone(),
        texts: Vec::new(),
    };
    let mut reader = Reader::new(bytes);
    VerdictData::read(&mut reader)
        .and_then(|data| decoder.live(data))
        .map_err(format_error(py))
}

fn read_state(py: Python<'_>, config: &GuardConfig, reader: &mut Reader<'_>) -> PyResult<State> {
    let mut decoder = Decoder {
        py,
        window: config.limits.window,
        budget: config.max_steps_text.clone(),
        texts: Vec::new(),
    };
    let state = State::read_snapshot(reader, config.limits.window, &mut decoder)
        .map_err(format_error(py))?;
    // A failure's digest is its error text's (the reference's `_results.digest`, with the
    // default volatile keys): checked here, where the text is a Python str to key.
    let name = pyo3::intern!(py, "error").as_any();
    for (digest, text) in &state.error_texts {
        let keyed = VolatileKeys::with_arg(py, None, |volatile| {
            canonical_key(py, name, text.bind(py).as_any(), volatile)
        });
        if keyed.ok() != Some(*digest) {
            return Err(error(
                py,
                "not a tripwire guard snapshot: an error text is not its digest's",
            ));
        }
    }
    Ok(state)
}

/// The bytes of a snapshot argument: bytes (borrowed), bytearray or memoryview (copied).
fn snapshot_arg<'a>(data: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(bytes.as_bytes()));
    }
    if data.is_instance_of::<PyByteArray>() || data.is_instance_of::<PyMemoryView>() {
        let copy = data.py().get_type::<PyBytes>().call1((data,))?;
        return Ok(Cow::Owned(copy.cast::<PyBytes>()?.as_bytes().to_vec()));
    }
    let py = data.py();
    let checked = reference(py).and_then(|r| r.unframe.bind(py).call1((data,)));
    Err(crate::py_reference::refused(checked, "a snapshot"))
}

/// `Guard.from_snapshot(data)`.
pub(crate) fn from_snapshot(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Guard> {
    let bytes = snapshot_arg(data)?;
    let (kind, head, mut reader) = unframe(&bytes).map_err(format_error(py))?;
    if kind != FULL {
        return Err(error(
            py,
            "a state-only snapshot has no configuration: load() it into a guard made with the \
             same one",
        ));
    }
    let guard = Guard::with_config(config_for(py, head)?);
    let state = read_state(py, &guard.config, &mut reader)?;
    *guard.lock() = state;
    Ok(guard)
}

/// `guard.load(data)`: the state replaced only once the whole snapshot has been read.
pub(crate) fn load(py: Python<'_>, guard: &Guard, data: &Bound<'_, PyAny>) -> PyResult<()> {
    let bytes = snapshot_arg(data)?;
    let (kind, head, mut reader) = unframe(&bytes).map_err(format_error(py))?;
    let (config, digest) = guard.config.written(py)?;
    let expected: &[u8] = if kind == FULL { config } else { digest };
    if head != expected {
        return Err(error(
            py,
            "the snapshot is of a guard with another configuration (window, thresholds, \
             tools, volatile keys or definitions) than this one",
        ));
    }
    let state = read_state(py, &guard.config, &mut reader)?;
    let old = std::mem::replace(&mut *guard.lock(), state);
    // Dropped after the lock is released: dropping Python objects can run Python code.
    drop(old);
    Ok(())
}
