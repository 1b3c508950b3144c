//! `TableReplay` for Python: a table of calls replayed over Arrow batches taken through the
//! PyCapsule interface (`__arrow_c_stream__`, `__arrow_c_array__`; no pyarrow needed here),
//! the GIL released while rows are replayed. The replay itself is `arrow_replay.rs`; this
//! file opens capsules, answers its cold questions with the guard's own Python-facing code
//! (`py_guard.rs`: policies, keys, results, messages) and hands finished runs back.

use std::ffi::CStr;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRecursionError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};

use crate::arrow_ffi::{self, Array, Column, FfiArray, FfiSchema, FfiStream, Kind, Schema, Stream};
use crate::arrow_replay::{
    Cold, Logged, Returned, Row, RunOut, Spec, Stop, StopDetail, TableReplay as Core, UsageRead,
    ESTIMATED, MAX_PENDING, USAGE,
};
use crate::guard::{Action, Outcome, Question};
use crate::key::{key_hex, Key};
use crate::py_canon::VolatileKeys;
use crate::py_guard::Guard;
use crate::py_verdict::{Verdict, VerdictDetail};

/// Our columns, in `Row`'s order.
const COLUMNS: [&str; 8] = [
    "run",
    "tool",
    "arguments",
    "result",
    "error",
    "call_id",
    "model",
    "label",
];

/// The kinds each column may have natively (the Python side sends other tables down its
/// per-call path; these are checked again here, as a capsule may come from anywhere).
fn allowed(column: &str, kind: Kind) -> bool {
    let text = matches!(
        kind,
        Kind::Utf8 | Kind::LargeUtf8 | Kind::Utf8View | Kind::Null
    );
    match column {
        "run" | "call_id" => text || matches!(kind, Kind::Int | Kind::UInt),
        "tool" | "arguments" | "result" | "model" => text,
        "error" => matches!(kind, Kind::Bool | Kind::Null),
        "label" => matches!(
            kind,
            Kind::Int | Kind::UInt | Kind::Float | Kind::Bool | Kind::Null
        ),
        _ => false,
    }
}

/// The cold questions, answered by the guard's Python-facing code with the GIL taken.
pub(crate) struct PyCold {
    pub(crate) guard: Py<Guard>,
    pub(crate) prices: Py<PyAny>,
    /// `usage(text) -> (input, output, cache read, cache write) | problem | None`: a line's
    /// `usage` read by `cost.parse_usage` (`events_core._usage`); `None` where no usage is
    /// read natively (tables).
    pub(crate) usage: Option<Py<PyAny>>,
}

fn text_str<'py>(py: Python<'py>, bytes: &[u8]) -> Bound<'py, PyString> {
    PyString::new(py, &String::from_utf8_lossy(bytes))
}

impl Cold for PyCold {
    type Error = PyErr;

    fn spec(&mut self, tool: &[u8]) -> PyResult<Spec> {
        Python::attach(|py| {
            let name = text_str(py, tool);
            let spec = self.guard.get().spec_of(py, &name, tool)?;
            Ok(match spec {
                Some(spec) => Spec {
                    rule: spec.facts.rule,
                    native_key: !spec.facts.keep_whitespace,
                    plain_results: spec.facts.plain_results,
                },
                None => Spec {
                    rule: None,
                    native_key: true,
                    plain_results: true,
                },
            })
        })
    }

    fn slow_key(&mut self, tool: &[u8], args: &[u8]) -> PyResult<Result<(Key, bool), String>> {
        Python::attach(|py| {
            let name = text_str(py, tool).into_any();
            let text = text_str(py, args).into_any();
            match self.guard.get().prepare(py, &name, &text, None, true) {
                Ok(prepared) => Ok(Ok((prepared.key, prepared.invalid_arguments.is_some()))),
                Err(err)
                    if err.is_instance_of::<PyRecursionError>(py)
                        || err.is_instance_of::<PyTypeError>(py)
                        || err.is_instance_of::<PyValueError>(py) =>
                {
                    Ok(Err(err.value(py).str()?.to_string()))
                }
                Err(err) => Err(err),
            }
        })
    }

    fn describe(
        &mut self,
        tool: &[u8],
        result: Returned<'_>,
        error: Option<bool>,
    ) -> PyResult<Result<Outcome<Arc<str>>, String>> {
        Python::attach(|py| {
            let name = text_str(py, tool);
            let reference = crate::py_reference::reference(py)?;
            let raw = match result {
                Returned::Text(text) => text_str(py, text).into_any(),
                // The line was read as JSON already: its value is what `json.loads` makes.
                Returned::Value(text) => {
                    reference.json_loads.bind(py).call1((text_str(py, text),))?
                }
            };
            let value = reference.content_value.bind(py).call1((raw,))?;
            let error = error.map(|e| PyBool::new(py, e).to_owned().into_any());
            let none = py.None().into_bound(py);
            let outcome =
                match self
                    .guard
                    .get()
                    .outcome_of(py, &name, &value, error.as_ref(), &none, None)
                {
                    Ok(outcome) => outcome,
                    // What the per-call path reports as "result not observed".
                    Err(err)
                        if err.is_instance_of::<PyRecursionError>(py)
                            || err.is_instance_of::<PyTypeError>(py)
                            || err.is_instance_of::<PyValueError>(py) =>
                    {
                        return Ok(Err(err.value(py).str()?.to_string()));
                    }
                    Err(err) => return Err(err),
                };
            Ok(Ok(Outcome {
                result: outcome.result,
                empty: outcome.empty,
                failed: outcome.failed,
                transient: outcome.transient,
                error: outcome
                    .error
                    .map(|t| Arc::from(t.bind(py).to_string_lossy().as_ref())),
            }))
        })
    }

    fn question(&mut self, tool: &[u8], args: &[u8]) -> PyResult<Option<Question>> {
        Python::attach(|py| {
            let name = text_str(py, tool);
            let text = text_str(py, args).into_any();
            self.guard.get().told_question(py, &name, &text, true)
        })
    }

    fn price(&mut self, model: Option<&[u8]>) -> PyResult<[f64; 4]> {
        Python::attach(|py| {
            let model = model.map(|m| text_str(py, m));
            self.prices.bind(py).call1((model,))?.extract()
        })
    }

    fn usage(&mut self, raw: &[u8]) -> PyResult<UsageRead> {
        let Some(usage) = &self.usage else {
            return Ok(UsageRead::Unsupported);
        };
        Python::attach(|py| {
            let read = usage
                .bind(py)
                .call1((pyo3::types::PyBytes::new(py, raw),))?;
            if read.is_none() {
                Ok(UsageRead::Unsupported)
            } else if let Ok(problem) = read.extract::<String>() {
                Ok(UsageRead::Problem(problem))
            } else {
                Ok(UsageRead::Counts(read.extract()?))
            }
        })
    }

    fn message(&mut self, stop: &Stop, detail: &StopDetail) -> PyResult<String> {
        Python::attach(|py| {
            let name = |t: &Arc<str>| PyString::new(py, t).unbind();
            let names = |ts: &[Arc<str>]| ts.iter().map(name).collect::<Vec<_>>();
            let detail = match detail {
                StopDetail::Plain => VerdictDetail::Plain,
                StopDetail::Unchanged => VerdictDetail::Unchanged,
                StopDetail::Failed(text, n) => VerdictDetail::Failed(name(text), *n),
                StopDetail::Errors(n, text) => VerdictDetail::Errors(*n, name(text)),
                StopDetail::Empty(n, tools) => VerdictDetail::Empty(*n, names(tools)),
                StopDetail::Cycle(tools, writes) => VerdictDetail::Cycle(names(tools), *writes),
                StopDetail::PollLimit(n) => VerdictDetail::PollLimit(*n),
            };
            let verdict = Verdict {
                action: Action::Stop,
                reason: Some(stop.reason),
                tool: name(&stop.tool),
                key: stop.key,
                repeats: stop.repeats,
                step: stop.step,
                cached: None,
                call_id: None,
                duplicate_of: None,
                invalid_arguments: None,
                window: self.guard.get().config.limits.window,
                budget: None,
                detail,
                // Made for its message only: never observed.
                origin: 0,
                plain_results: true,
            };
            Py::new(py, verdict)?.bind(py).getattr("message")?.extract()
        })
    }
}

/// Moves the struct out of a capsule named `name`, leaving it released (so the capsule's
/// destructor does nothing), as the PyCapsule interface asks of a consumer.
///
/// # Safety
/// `T` must be the struct the capsule name stands for in the Arrow PyCapsule interface, with
/// its `release` field at the offset `release_offset` reads.
unsafe fn take<T>(
    capsule: &Bound<'_, PyAny>,
    name: &CStr,
    empty: T,
    clear: impl FnOnce(&mut T),
) -> PyResult<Box<T>> {
    // SAFETY: a capsule's pointer, checked against the name by CPython (NULL, with an
    // exception set, on a mismatch).
    let ptr = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), name.as_ptr()) } as *mut T;
    if ptr.is_null() {
        return Err(PyErr::take(capsule.py())
            .unwrap_or_else(|| PyTypeError::new_err("not an Arrow capsule")));
    }
    let mut owned = Box::new(empty);
    // SAFETY: the capsule holds a `T`; it is moved out bit for bit and the original marked
    // released, which the interface defines as a move.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr, &mut *owned, 1);
        clear(&mut *ptr);
    }
    Ok(owned)
}

fn schema_of(capsule: &Bound<'_, PyAny>) -> PyResult<Schema> {
    // SAFETY: "arrow_schema" capsules hold an ArrowSchema.
    let schema = unsafe {
        take(capsule, c"arrow_schema", FfiSchema::empty(), |s| {
            s.release = None
        })?
    };
    Ok(Schema(schema))
}

fn array_of(capsule: &Bound<'_, PyAny>) -> PyResult<Array> {
    // SAFETY: "arrow_array" capsules hold an ArrowArray.
    let array = unsafe {
        take(capsule, c"arrow_array", FfiArray::empty(), |a| {
            a.release = None
        })?
    };
    Ok(Array(array))
}

fn stream_of(capsule: &Bound<'_, PyAny>) -> PyResult<Stream> {
    let empty = FfiStream {
        get_schema: None,
        get_next: None,
        get_last_error: None,
        release: None,
        private_data: std::ptr::null_mut(),
    };
    // SAFETY: "arrow_array_stream" capsules hold an ArrowArrayStream.
    let stream = unsafe { take(capsule, c"arrow_array_stream", empty, |s| s.release = None)? };
    Ok(Stream(stream))
}

struct Inner {
    core: Core,
    cold: PyCold,
    /// Our column -> theirs, as the Python side planned it.
    plan: Vec<Option<String>>,
}

/// A table of calls replayed natively: `feed_stream` / `feed_batch` the table's batches,
/// then `finish`; finished runs and problems go to `sink(runs, problems)` after each batch.
#[pyclass(frozen, module = "tripwire._core", name = "TableReplay")]
pub struct TableReplay {
    /// A replay is fed by one thread at a time: the lock is only tried (a second thread
    /// gets an error rather than waiting for a lock held while the GIL is released).
    inner: Mutex<Inner>,
    sink: Py<PyAny>,
}

fn column_index(fields: &[(String, String, bool)], theirs: &str) -> Option<usize> {
    fields.iter().position(|(name, _, _)| name == theirs)
}

impl TableReplay {
    fn locked(&self) -> PyResult<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .try_lock()
            .map_err(|_| PyRuntimeError::new_err("a TableReplay is fed by one thread at a time"))
    }

    /// Replays one batch (a struct array of the table's columns) with the GIL released.
    fn batch(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        fields: &[(String, String, bool)],
        array: &Array,
    ) -> PyResult<()> {
        let batch: &FfiArray = &array.0;
        let mut columns: Vec<Option<Column<'_>>> = Vec::with_capacity(COLUMNS.len());
        for (ours, theirs) in COLUMNS.iter().zip(&inner.plan) {
            let Some(theirs) = theirs else {
                columns.push(None);
                continue;
            };
            let index = column_index(fields, theirs)
                .ok_or_else(|| PyValueError::new_err(format!("column {theirs:?} missing")))?;
            let (_, format, dictionary) = &fields[index];
            let kind = Kind::of(format);
            if *dictionary || !kind.is_some_and(|k| allowed(ours, k)) {
                return Err(PyTypeError::new_err(format!(
                    "column {theirs:?} of Arrow type {format:?} is not read natively"
                )));
            }
            columns.push(Some(
                Column::of(batch, index, format).map_err(PyValueError::new_err)?,
            ));
        }
        let rows = arrow_ffi::rows(batch);
        let Inner { core, cold, .. } = inner;
        fn cell<'a>(c: &Option<Column<'a>>, row: usize) -> arrow_ffi::Cell<'a> {
            match c {
                Some(column) => column.get(row),
                None => arrow_ffi::Cell::Null,
            }
        }
        // Released: the rows are read from Arrow buffers and decided in Rust; a cold question
        // takes the GIL back for its moment (`PyCold`).
        py.detach(|| -> PyResult<()> {
            for row in 0..rows {
                core.row(
                    cold,
                    Row {
                        run: cell(&columns[0], row),
                        tool: cell(&columns[1], row),
                        args: cell(&columns[2], row),
                        result: cell(&columns[3], row),
                        error: cell(&columns[4], row),
                        call_id: cell(&columns[5], row),
                        model: cell(&columns[6], row),
                        label: cell(&columns[7], row),
                    },
                )?;
            }
            Ok(())
        })?;
        self.drain(py, core)
    }

    /// Hands finished runs and problems to the sink.
    fn drain(&self, py: Python<'_>, core: &mut Core) -> PyResult<()> {
        if core.finished.is_empty() && core.problems.is_empty() {
            return Ok(());
        }
        let runs = PyList::empty(py);
        for run in core.finished.drain(..) {
            runs.append(run_item(py, &run)?)?;
        }
        let problems = PyList::empty(py);
        for (row, message) in core.problems.drain(..) {
            problems.append((row, message))?;
        }
        self.sink.bind(py).call1((runs, problems))?;
        Ok(())
    }
}

/// Arguments as the sink takes them: text as `str`, a JSON value's text as `bytes` (shown as
/// the value), null as `None`.
fn logged<'py>(py: Python<'py>, args: &Logged) -> Bound<'py, PyAny> {
    match args {
        Logged::Null => py.None().into_bound(py),
        Logged::Text(text) => PyString::new(py, text).into_any(),
        Logged::Value(text) => pyo3::types::PyBytes::new(py, text.as_bytes()).into_any(),
    }
}

/// A finished run as the sink takes it (`arrow_core._Sink._run`'s arguments).
/// `RunOut::sources` as `cost.Source` names it (what `cost.combine` makes of the turns').
fn source_name(sources: u8) -> &'static str {
    match (sources & ESTIMATED != 0, sources & USAGE != 0) {
        (false, false) => "none",
        (true, false) => "estimated",
        (false, true) => "usage",
        (true, true) => "mixed",
    }
}

pub(crate) fn run_item<'py>(py: Python<'py>, run: &RunOut) -> PyResult<Bound<'py, PyTuple>> {
    let c = &run.counts;
    let counts = PyTuple::new(
        py,
        [
            c.steps,
            c.steps_saved,
            c.turns,
            c.turns_saved,
            c.nudges,
            c.input_tokens,
            c.output_tokens,
            c.cached_tokens,
            c.cache_write_tokens,
            c.input_tokens_saved,
            c.output_tokens_saved,
            c.invalid_arguments,
            c.skipped_calls,
            c.results,
            c.results_unlinked,
        ],
    )?;
    let costs = (c.cost, c.cost_guarded);
    let stop = match &run.stop {
        None => py.None().into_bound(py),
        Some(stop) => {
            let lead = PyList::empty(py);
            for (step, action, tool, args) in &stop.lead {
                lead.append((*step, action.as_str(), &**tool, logged(py, args)))?;
            }
            (
                stop.step,
                stop.reason.as_str(),
                &*stop.tool,
                stop.repeats,
                key_hex(stop.key),
                stop.row,
                &stop.message,
                logged(py, &stop.call.1),
                lead,
            )
                .into_pyobject(py)?
                .into_any()
        }
    };
    let nudges = PyList::empty(py);
    for (tool, n) in &run.tool_nudges {
        nudges.append((&**tool, *n))?;
    }
    let models = PyList::empty(py);
    for (model, n) in &run.models {
        models.append((model, *n))?;
    }
    PyTuple::new(
        py,
        [
            PyString::new(py, &run.name).into_any(),
            counts.into_any(),
            costs.into_pyobject(py)?.into_any(),
            run.nudge
                .as_ref()
                .map(|(s, t)| (*s, &**t))
                .into_pyobject(py)?
                .into_any(),
            stop,
            PyString::new(py, std::str::from_utf8(&run.timeline).unwrap_or("")).into_any(),
            run.model.as_deref().into_pyobject(py)?.into_any(),
            run.reward.into_pyobject(py)?.into_any(),
            nudges.into_any(),
            models.into_any(),
            PyString::new(py, source_name(run.sources)).into_any(),
        ],
    )
}

#[pymethods]
impl TableReplay {
    /// `guard`: a native `Guard` with the replay's settings (its policies, keys, messages);
    /// `observe`: whether results are given to the guard; `prices(model) -> (input, output,
    /// cache_read, cache_write)`; `plan`: our column -> the table's; `sink(runs, problems)`;
    /// `max_pending`: `simulate.MAX_PENDING`.
    #[new]
    #[pyo3(signature = (guard, /, *, observe, prices, plan, sink, cell_limit, too_long, max_pending = MAX_PENDING))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        guard: Bound<'_, Guard>,
        observe: bool,
        prices: Py<PyAny>,
        plan: &Bound<'_, PyDict>,
        sink: Py<PyAny>,
        cell_limit: usize,
        too_long: &Bound<'_, PyDict>,
        max_pending: usize,
    ) -> PyResult<TableReplay> {
        let mut columns = Vec::with_capacity(COLUMNS.len());
        for column in COLUMNS {
            columns.push(match plan.get_item(column)? {
                Some(theirs) => Some(theirs.extract::<String>()?),
                None => None,
            });
        }
        if columns[..3].iter().any(Option::is_none) {
            return Err(PyValueError::new_err(
                "plan must map run, tool and arguments",
            ));
        }
        let config = &guard.get().config;
        let volatile = config.volatile.clone();
        let default = VolatileKeys::from_arg(py, None)?;
        let mut core = Core::new(
            config.limits,
            observe,
            Arc::new(volatile.names().clone()),
            Arc::new(default.names().clone()),
            volatile.only_exact_str(),
        );
        // Only the columns Arrow holds as (large) strings are measured, as the per-call path
        // measures them (`table._Rows.batch`).
        core.cell_limit = cell_limit;
        core.max_pending = max_pending;
        for (slot, column) in core.too_long.iter_mut().zip(COLUMNS) {
            if let Some(message) = too_long.get_item(column)? {
                *slot = Some(message.extract()?);
            }
        }
        Ok(TableReplay {
            inner: Mutex::new(Inner {
                core,
                cold: PyCold {
                    guard: guard.unbind(),
                    prices,
                    usage: None,
                },
                plan: columns,
            }),
            sink,
        })
    }

    /// Replays every batch of an object with `__arrow_c_stream__`; the rows read.
    #[pyo3(signature = (source, /))]
    fn feed_stream(&self, py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<u64> {
        let capsule = source.call_method0("__arrow_c_stream__")?;
        let mut stream = stream_of(&capsule)?;
        let schema = stream.schema().map_err(PyValueError::new_err)?;
        let fields = arrow_ffi::fields(&schema.0).map_err(PyValueError::new_err)?;
        let mut inner = self.locked()?;
        let mut rows = 0u64;
        loop {
            // The producer may need the GIL for its next batch (a Python iterator behind
            // it): asked for with the GIL released, as it takes it itself.
            let next = py.detach(|| stream.next_batch());
            let Some(array) = next.map_err(PyValueError::new_err)? else {
                break;
            };
            rows += arrow_ffi::rows(&array.0) as u64;
            self.batch(py, &mut inner, &fields, &array)?;
        }
        Ok(rows)
    }

    /// Replays one record batch (an object with `__arrow_c_array__`); its rows.
    #[pyo3(signature = (batch, /))]
    fn feed_batch(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<u64> {
        let capsules = batch.call_method0("__arrow_c_array__")?;
        let (schema, array): (Bound<'_, PyAny>, Bound<'_, PyAny>) = capsules.extract()?;
        let schema = schema_of(&schema)?;
        let array = array_of(&array)?;
        let fields = arrow_ffi::fields(&schema.0).map_err(PyValueError::new_err)?;
        let mut inner = self.locked()?;
        self.batch(py, &mut inner, &fields, &array)?;
        Ok(arrow_ffi::rows(&array.0) as u64)
    }

    /// The table is over: its last run is finished and handed to the sink.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let mut inner = self.locked()?;
        inner.core.end();
        self.drain(py, &mut inner.core)
    }

    /// Rows read so far (set past a row group skipped unread).
    #[getter]
    fn row(&self) -> PyResult<u64> {
        Ok(self.locked()?.core.row)
    }

    #[setter]
    fn set_row(&self, row: u64) -> PyResult<()> {
        self.locked()?.core.row = row;
        Ok(())
    }

    /// Model calls (rows that were turns) so far.
    #[getter]
    fn turns(&self) -> PyResult<u64> {
        Ok(self.locked()?.core.turns)
    }
}
