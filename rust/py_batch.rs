//! `call_keys`: the keys of a batch of calls, the JSON-text ones parsed and hashed without
//! the GIL and, with threads, on several cores.
//!
//! The batch is read a block at a time (reading needs the GIL: the calls are Python
//! objects). A block's JSON texts are keyed while they are still in cache; with threads,
//! worker threads key most of a block while this thread reads the next one, then keys the
//! rest of the block itself, so reading is hidden behind keying.

use std::sync::{mpsc, Arc, Mutex, OnceLock, PoisonError};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyIterator, PyList, PySequence, PyString, PyTuple};

use crate::canon;
use crate::json::{self, JsonError, ToolName};
use crate::key::Key;
use crate::py_canon::{
    canonical_key, check_name, key_str, text_of, VolatileKeys, KEPT_BUFFER_BYTES,
};
use crate::py_json::{is_exact_text, json_key, raise, JsonText};
use crate::py_reference::{reference, refused};
use crate::sha_wide::Padded;

/// A block of JSON text this long is keyed before more is read (one thread: it stays in
/// cache; two or more: enough to share out, see [`PARALLEL_MIN_BYTES`]).
const SERIAL_BLOCK_BYTES: usize = 64 * 1024;
const PARALLEL_BLOCK_BYTES: usize = 1024 * 1024;
/// ...or this many calls, whichever comes first (with threads, 8,192 measured no better).
const BLOCK_CALLS: usize = 4096;
/// A block with less JSON text than this is keyed on this thread: starting threads, or
/// waking them, costs more.
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
    let calls = Calls::new(calls)?;
    let mut keys: Vec<Key> = Vec::with_capacity(calls.len_hint());
    let mut reader = Reader {
        py,
        calls,
        volatile: &volatile,
        index: 0,
        last_name: None,
        error: None,
        done: false,
    };
    if threads > 1 {
        key_in_parallel(&mut reader, threads, &mut keys)?;
    } else {
        while !reader.done {
            let block = reader.read_block(&mut keys, SERIAL_BLOCK_BYTES);
            let results = py.detach(|| key_texts(&block.pending, &block.names, volatile.names()));
            apply(py, &block.pending, results, &volatile, &mut keys)?;
        }
    }
    // The reading error comes last: any error in a text before it has a lower index.
    match reader.error {
        Some((usize::MAX, err)) => Err(err),
        Some((index, err)) => Err(add_note(py, err, index)),
        None => key_list(py, &keys),
    }
}

/// Keys the batch block by block, each block shared between worker threads and this one,
/// which reads the next block first.
fn key_in_parallel(
    reader: &mut Reader<'_, '_>,
    threads: usize,
    keys: &mut Vec<Key>,
) -> PyResult<()> {
    let (py, volatile) = (reader.py, reader.volatile);
    let names = volatile.names();
    std::thread::scope(|scope| {
        // The workers live for the rest of the batch once a block is big enough to share:
        // starting a thread costs as much as keying hundreds of texts. One that will not
        // start is no error: the others (or this thread) do its share.
        let mut workers: Vec<Worker<'_>> = Vec::new();
        let mut started = false;
        let mut block = reader.read_block(keys, PARALLEL_BLOCK_BYTES);
        loop {
            let Block {
                mut pending,
                names: tool_names,
                bytes,
            } = block;
            let tool_names = Arc::new(tool_names);
            let mut busy = 0;
            if bytes >= PARALLEL_MIN_BYTES && !started {
                started = true;
                workers = (1..threads)
                    .filter_map(|_| Worker::spawn(scope, names))
                    .collect();
            }
            if bytes >= PARALLEL_MIN_BYTES && !workers.is_empty() && pending.len() > workers.len() {
                // This thread keeps the first part (errors come out lowest index first),
                // a little smaller than the others, as it also reads the next block.
                let own = pending.len() * 9 / (10 * (workers.len() + 1));
                let share = (pending.len() - own).div_ceil(workers.len());
                let mut parts = Vec::new();
                while pending.len() > own {
                    let at = own.max(pending.len().saturating_sub(share));
                    parts.push(pending.split_off(at));
                }
                for (worker, part) in workers.iter().zip(parts.into_iter().rev()) {
                    worker.send(part, &tool_names);
                    busy += 1;
                }
            }
            let next = (!reader.done).then(|| reader.read_block(keys, PARALLEL_BLOCK_BYTES));
            let results = py.detach(|| key_texts(&pending, &tool_names, names));
            apply(py, &pending, results, volatile, keys)?;
            for worker in &workers[..busy] {
                let Some((part, results)) = py.detach(|| worker.receive()) else {
                    // Only a bug stops a worker (release builds abort on panic): never
                    // unwind into Python, and never leave a call without its key.
                    return Err(PyRuntimeError::new_err("a call_keys worker thread failed"));
                };
                apply(py, &part, results, volatile, keys)?;
            }
            match next {
                Some(next) => block = next,
                // Dropping the workers closes their queues; the scope waits for them.
                None => return Ok(()),
            }
        }
    })
}

/// Parts of blocks with their tool names, to be keyed.
type Job<'py> = (Vec<Pending<'py>>, Arc<Vec<Vec<u8>>>);
/// A part of a block with its keys (or why not), in the same order.
type Keyed<'py> = (Vec<Pending<'py>>, Vec<Result<Key, JsonError>>);

/// A worker thread keying the parts of blocks it is sent, for one batch.
struct Worker<'py> {
    jobs: mpsc::Sender<Job<'py>>,
    /// In a mutex only to be `Sync`, so that this thread can wait without the GIL.
    keyed: Mutex<mpsc::Receiver<Keyed<'py>>>,
}

impl<'py> Worker<'py> {
    fn spawn<'scope, 'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        volatile: &'scope json::VolatileNames,
    ) -> Option<Self>
    where
        'py: 'scope,
    {
        let (jobs, job_queue) = mpsc::channel::<Job<'py>>();
        let (keyed_queue, keyed) = mpsc::channel();
        std::thread::Builder::new()
            .spawn_scoped(scope, move || {
                for (part, names) in job_queue {
                    let results = key_texts(&part, &names, volatile);
                    if keyed_queue.send((part, results)).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Worker {
            jobs,
            keyed: Mutex::new(keyed),
        })
    }

    fn send(&self, part: Vec<Pending<'py>>, names: &Arc<Vec<Vec<u8>>>) {
        // The worker outlives this batch's sends (it stops when `jobs` is dropped).
        let _ = self.jobs.send((part, Arc::clone(names)));
    }

    /// The part last sent, keyed; `None` if the worker stopped.
    fn receive(&self) -> Option<Keyed<'py>> {
        let keyed = self.keyed.lock().unwrap_or_else(PoisonError::into_inner);
        keyed.recv().ok()
    }
}

/// One JSON-text call of a batch, owned so it can be keyed without the GIL.
struct Pending<'py> {
    index: usize,
    /// The tool name, as an index into its block's names.
    name: usize,
    text: JsonText<'py>,
    /// The call as given, for the rare texts keyed again with the GIL.
    call: (Py<PyString>, Py<PyAny>),
}

/// A block of a batch: its JSON-text calls, with their tool names, to be keyed together.
#[derive(Default)]
struct Block<'py> {
    pending: Vec<Pending<'py>>,
    /// The tool names as JSON string literals (as the canonical bytes spell them), each
    /// once for a run of calls that pass the same name object (most batches name a
    /// handful of tools, each many times).
    names: Vec<Vec<u8>>,
    /// How much JSON text the block holds.
    bytes: usize,
}

/// Reads a batch, a block at a time.
struct Reader<'a, 'py> {
    py: Python<'py>,
    calls: Calls<'py>,
    volatile: &'a VolatileKeys,
    /// The index of the next call.
    index: usize,
    /// The last tool name met, held (so that no other object can take its address), with
    /// its index in the block being read.
    last_name: Option<(Bound<'py, PyString>, usize)>,
    /// The first error met (at `usize::MAX`: the iterable's own, which belongs to no call);
    /// reading stops there.
    error: Option<(usize, PyErr)>,
    done: bool,
}

impl<'py> Reader<'_, 'py> {
    /// Reads calls until the block holds `block_bytes` of JSON text or [`BLOCK_CALLS`]
    /// calls, or the batch ends. A call that is not JSON text is keyed at once.
    fn read_block(&mut self, keys: &mut Vec<Key>, block_bytes: usize) -> Block<'py> {
        let mut block = Block::default();
        self.last_name = None;
        while !self.done && block.bytes < block_bytes && block.pending.len() < BLOCK_CALLS {
            match self.calls.next() {
                None => self.done = true,
                Some(Err(err)) => {
                    self.error = Some((usize::MAX, err));
                    self.done = true;
                }
                Some(Ok(call)) => {
                    let index = self.index;
                    self.index += 1;
                    if let Err(err) = self.read_call(index, &call, keys, &mut block) {
                        self.error = Some((index, err));
                        self.done = true;
                    }
                }
            }
        }
        block
    }

    /// Reads call `index`: JSON text goes into `block` (its key left 0 in `keys` for now),
    /// anything else is keyed at once.
    fn read_call(
        &mut self,
        index: usize,
        call: &Bound<'py, PyAny>,
        keys: &mut Vec<Key>,
        block: &mut Block<'py>,
    ) -> PyResult<()> {
        let (py, volatile) = (self.py, self.volatile);
        let (name, args) = call_pair(index, call)?;
        if volatile.only_exact_str() && is_exact_text(&args) {
            let name = check_name(&name)?;
            // SAFETY: the text borrows from `args`, which the pending call holds on to.
            let text = unsafe { JsonText::from_py(py, &args)?.extend() };
            block.bytes += text.bytes().len();
            block.pending.push(Pending {
                index,
                name: self.name_index(name, &mut block.names)?,
                text,
                call: (name.clone().unbind(), args.unbind()),
            });
            keys.push(0);
        } else if args.is_instance_of::<PyString>()
            || args.is_instance_of::<PyBytes>()
            || args.is_instance_of::<pyo3::types::PyByteArray>()
        {
            keys.push(json_key(py, &name, &args, volatile)?);
        } else {
            keys.push(canonical_key(py, &name, &args, volatile)?);
        }
        Ok(())
    }

    /// The index of `name` in `names`, converted and added unless it is the last name met.
    fn name_index(
        &mut self,
        name: &Bound<'py, PyString>,
        names: &mut Vec<Vec<u8>>,
    ) -> PyResult<usize> {
        if let Some((last, index)) = &self.last_name {
            if last.is(name) {
                return Ok(*index);
            }
        }
        let index = names.len();
        let mut literal = Vec::new();
        canon::write_str(&mut literal, text_of(name)?);
        names.push(literal);
        self.last_name = Some((name.clone(), index));
        Ok(index)
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
        let py = call.py();
        let checked = reference(py).and_then(|r| r.unpack_pair.bind(py).call1((index, call)));
        return Err(refused(checked, "a call"));
    };
    Ok((pair.get_item(0)?, pair.get_item(1)?))
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

/// JSON texts canonicalised before their keys are hashed together: enough to keep the
/// hashing lanes busy ([`Padded::keys`]), few enough that their canonical bytes (~200 bytes
/// each in typical batches) are still in cache when hashed.
const HASHED_TOGETHER: usize = 256;

thread_local! {
    /// Each thread reuses its own buffer of canonical texts from call to call.
    static PADDED: std::cell::Cell<Padded> = std::cell::Cell::new(Padded::default());
}

/// Keys JSON-text calls on this thread (without the GIL: nothing here touches Python).
fn key_texts(
    pending: &[Pending<'_>],
    names: &[Vec<u8>],
    volatile: &json::VolatileNames,
) -> Vec<Result<Key, JsonError>> {
    let mut padded = PADDED.with(|p| p.take());
    let mut results = Vec::with_capacity(pending.len());
    for part in pending.chunks(HASHED_TOGETHER) {
        padded.clear();
        let first = results.len();
        for item in part {
            let written = padded.push(|out| {
                json::canonical_call_append(
                    out,
                    ToolName::Literal(&names[item.name]),
                    item.text.bytes(),
                    volatile,
                    json::MIN_INT_DIGIT_LIMIT,
                )
            });
            results.push(written.map(|()| 0));
        }
        // One key per text that was written, in order.
        let mut keys = padded.keys().into_iter();
        for key in results[first..].iter_mut().filter_map(|r| r.as_mut().ok()) {
            *key = keys.next().unwrap_or_default();
        }
    }
    if padded.capacity() <= KEPT_BUFFER_BYTES {
        PADDED.with(|p| p.set(padded));
    }
    results
}

/// Fills in the keys of keyed calls; the rare texts that need Python (integers past the
/// smallest digit limit, nesting past the parser's) are keyed again here, with the GIL.
/// Stops at the first error, which is the one with the lowest index among these calls.
fn apply(
    py: Python<'_>,
    pending: &[Pending<'_>],
    results: Vec<Result<Key, JsonError>>,
    volatile: &VolatileKeys,
    keys: &mut [Key],
) -> PyResult<()> {
    for (item, result) in pending.iter().zip(results) {
        let (name, args) = (item.call.0.bind(py), item.call.1.bind(py));
        keys[item.index] = match result {
            Ok(key) => key,
            Err(JsonError::IntTooLong { .. }) => json_key(py, name.as_any(), args, volatile)
                .map_err(|e| add_note(py, e, item.index))?,
            Err(err) => return Err(add_note(py, raise(py, err, &item.text, args), item.index)),
        };
    }
    Ok(())
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
    // Asked once: the answer reads cgroup files, which costs more than keying a small batch.
    static CORES: OnceLock<usize> = OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let Some(t) = threads.filter(|t| !t.is_none()) else {
        return Ok(cores);
    };
    if t.is_instance_of::<pyo3::types::PyBool>()
        || !t.is_instance_of::<pyo3::types::PyInt>()
        || t.lt(1)?
    {
        let py = t.py();
        let checked = reference(py).and_then(|r| r.check_threads.bind(py).call1((t,)));
        return Err(refused(checked, "threads"));
    }
    Ok(t.extract::<usize>().unwrap_or(usize::MAX).min(cores))
}
