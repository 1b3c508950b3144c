//! `EventsReplay` for Python: an events JSONL file replayed natively (`events_replay.rs`),
//! the file read here (no Python object a line), the GIL released while lines are replayed;
//! cold questions answered as for a table (`py_arrow::PyCold`), finished runs handed to a
//! sink in batches.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use crate::arrow_replay::{TableReplay as Table, MAX_PENDING};
use crate::events_replay::{EventsReplay as Core, LineReader};
use crate::py_arrow::{run_item, PyCold};
use crate::py_canon::VolatileKeys;
use crate::py_guard::Guard;

/// Lines replayed between two looks at what finished (with the GIL taken for the sink).
const LINES_A_BATCH: u64 = 16_384;
/// Finished runs that end a batch early (they wait in memory until handed over).
const RUNS_A_BATCH: usize = 1024;

/// How a batch of lines ended.
enum Batch {
    More,
    End,
    GivenUp(String),
}

struct Inner {
    core: Core,
    cold: PyCold,
    limit: usize,
    lines: u64,
    position: u64,
    /// How far into the file on disk (`LineReader::progress`: compressed bytes of gzip).
    progress: u64,
}

/// An events JSONL file replayed natively: `replay(path)`; finished runs, problems and the
/// tools first heard of go to `sink(runs, problems, tools, progress)` as they come
/// (`progress`: bytes of the file on disk read, for the progress bar).
#[pyclass(frozen, module = "tripwire._core", name = "EventsReplay")]
pub struct EventsReplay {
    /// Fed by one thread at a time: the lock is only tried (see `TableReplay`).
    inner: Mutex<Inner>,
    sink: Py<PyAny>,
}

impl EventsReplay {
    fn locked(&self) -> PyResult<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .try_lock()
            .map_err(|_| PyRuntimeError::new_err("an EventsReplay is fed by one thread at a time"))
    }

    fn drain(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<()> {
        let table = &mut inner.core.core;
        if table.finished.is_empty() && table.problems.is_empty() && table.tools_heard.is_empty() {
            return Ok(());
        }
        let runs = PyList::empty(py);
        for run in table.finished.drain(..) {
            runs.append((run_item(py, &run)?, run.line, run.part))?;
        }
        let problems = PyList::empty(py);
        for (line, message) in table.problems.drain(..) {
            problems.append((line, message))?;
        }
        let tools = PyList::empty(py);
        for tool in table.tools_heard.drain(..) {
            tools.append(PyString::new(py, &tool))?;
        }
        self.sink
            .bind(py)
            .call1((runs, problems, tools, inner.progress))?;
        Ok(())
    }
}

#[pymethods]
impl EventsReplay {
    /// `guard`: a native `Guard` with the replay's settings; `observe`: whether results are
    /// given to the guard; `prices(model)`; `sink`; `default_run`: the run of a line that
    /// names none (the file); `max_open`, `max_evicted`, `max_pending`:
    /// `simulate.MAX_OPEN_RUNS`, `MAX_EVICTED` and `MAX_PENDING`; `line_limit`:
    /// `files.MAX_LINE_BYTES`; `usage(text)`: a line's usage read (`events_core._usage`;
    /// `None`: a file with one is not replayed here).
    #[new]
    #[pyo3(signature = (guard, /, *, observe, prices, sink, default_run, max_open, max_evicted, line_limit, max_pending = MAX_PENDING, usage = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        guard: Bound<'_, Guard>,
        observe: bool,
        prices: Py<PyAny>,
        sink: Py<PyAny>,
        default_run: String,
        max_open: usize,
        max_evicted: usize,
        line_limit: usize,
        max_pending: usize,
        usage: Option<Py<PyAny>>,
    ) -> PyResult<EventsReplay> {
        if max_open == 0 {
            return Err(PyValueError::new_err("max_open must be at least 1"));
        }
        let config = &guard.get().config;
        let volatile = config.volatile.clone();
        let default = VolatileKeys::from_arg(py, None)?;
        let mut table = Table::new(
            config.limits,
            observe,
            Arc::new(volatile.names().clone()),
            Arc::new(default.names().clone()),
            volatile.only_exact_str(),
        );
        table.max_pending = max_pending;
        let default_run = default_run.into_bytes();
        Ok(EventsReplay {
            inner: Mutex::new(Inner {
                core: Core::new(table, default_run, max_open, max_evicted, line_limit),
                cold: PyCold {
                    guard: guard.unbind(),
                    prices,
                    usage,
                },
                limit: line_limit,
                lines: 0,
                position: 0,
                progress: 0,
            }),
            sink,
        })
    }

    /// Replays the file at `path` to its end, if every line of it is read natively; else
    /// stops at the first that is not and says why (`"line N: ..."`): the sink has had part
    /// of the file, which the caller throws away, and the per-call path must read it whole.
    /// An `EventsReplay` replays one file once.
    #[pyo3(signature = (path, /))]
    fn replay(&self, py: Python<'_>, path: &str) -> PyResult<Option<String>> {
        let mut guard = self.locked()?;
        let inner = &mut *guard;
        if inner.lines > 0 || inner.core.read_a_call {
            return Err(PyRuntimeError::new_err(
                "an EventsReplay replays one file once",
            ));
        }
        let mut reader = match LineReader::open(path, inner.limit) {
            Ok(reader) => reader,
            Err(err) => return Ok(Some(format!("cannot read: {err}"))),
        };
        let mut number = 0u64;
        loop {
            let Inner { core, cold, .. } = inner;
            // Released: lines are read and decided in Rust; a cold question takes the GIL
            // back for its moment (`PyCold`).
            let batch = py.detach(|| -> Result<Batch, PyErr> {
                let until = number + LINES_A_BATCH;
                while number < until && core.core.finished.len() < RUNS_A_BATCH {
                    let line = match reader.next_line() {
                        Ok(Some(line)) => line,
                        Ok(None) => return Ok(Batch::End),
                        // The per-call path reads it again and reports what it finds.
                        Err(err) => return Ok(Batch::GivenUp(format!("cannot read: {err}"))),
                    };
                    number += 1;
                    if let Err(why) = core.line(cold, line, number)? {
                        return Ok(Batch::GivenUp(format!("line {number}: {why}")));
                    }
                }
                Ok(Batch::More)
            });
            inner.lines = number;
            inner.position = reader.position;
            inner.progress = reader.progress();
            match batch? {
                Batch::End => break,
                Batch::GivenUp(why) => return Ok(Some(why)),
                Batch::More => self.drain(py, inner)?,
            }
        }
        if !inner.core.read_a_call {
            return Ok(Some("no calls".into()));
        }
        inner.core.end();
        self.drain(py, inner)?;
        Ok(None)
    }

    /// Lines read (blank ones too).
    #[getter]
    fn lines(&self) -> PyResult<u64> {
        Ok(self.locked()?.lines)
    }

    /// Model calls (lines with a call).
    #[getter]
    fn turns(&self) -> PyResult<u64> {
        Ok(self.locked()?.core.core.turns)
    }

    /// Runs that came back after being finished early (`Fleet.split_runs`).
    #[getter]
    fn split_runs(&self) -> PyResult<u64> {
        Ok(self.locked()?.core.split_runs)
    }

    /// Results on lines of their own whose run was not open (`Fleet.orphan_results`).
    #[getter]
    fn orphan_results(&self) -> PyResult<u64> {
        Ok(self.locked()?.core.orphan_results)
    }

    /// Bytes read in lines (of a gzip file, decompressed: `FileStats.position`).
    #[getter]
    fn position(&self) -> PyResult<u64> {
        Ok(self.locked()?.position)
    }
}
