//! `Verdict` for Python: what the guard answers a call, and its message (the reference's
//! `tripwire/_verdict.py`; the texts come from `tripwire/_messages.py`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString, PyTuple};

use crate::guard::{Action, Reason};
use crate::key::{key_hex, Key};
use crate::py_reference::reference;

/// What a verdict's message is about (`guard::Detail`, with tool names and error texts).
pub(crate) enum VerdictDetail {
    Plain,
    Unchanged,
    Failed(Py<PyString>, u32),
    Errors(u32, Py<PyString>),
    Empty(u32, Vec<Py<PyString>>),
    Cycle(Vec<Py<PyString>>, bool),
    PollLimit(u32),
    /// A call checked after the run stopped: the stop's tool, repeats and detail.
    After(Py<PyString>, u32, Box<VerdictDetail>),
}

pub(crate) fn copy_names(py: Python<'_>, names: &[Py<PyString>]) -> Vec<Py<PyString>> {
    names.iter().map(|t| t.clone_ref(py)).collect()
}

impl VerdictDetail {
    pub(crate) fn copy(&self, py: Python<'_>) -> VerdictDetail {
        match self {
            VerdictDetail::Plain => VerdictDetail::Plain,
            VerdictDetail::Unchanged => VerdictDetail::Unchanged,
            VerdictDetail::Failed(text, n) => VerdictDetail::Failed(text.clone_ref(py), *n),
            VerdictDetail::Errors(n, text) => VerdictDetail::Errors(*n, text.clone_ref(py)),
            VerdictDetail::Empty(n, tools) => VerdictDetail::Empty(*n, copy_names(py, tools)),
            VerdictDetail::Cycle(tools, writes) => {
                VerdictDetail::Cycle(copy_names(py, tools), *writes)
            }
            VerdictDetail::PollLimit(n) => VerdictDetail::PollLimit(*n),
            VerdictDetail::After(tool, n, detail) => {
                VerdictDetail::After(tool.clone_ref(py), *n, Box::new(detail.copy(py)))
            }
        }
    }

    /// The reference's `Detail` tuple (or `None`): what its messages and equality read.
    pub(crate) fn to_python<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let tuple = |items: Vec<Bound<'py, PyAny>>| -> PyResult<Bound<'py, PyAny>> {
            Ok(PyTuple::new(py, items)?.into_any())
        };
        let text = |t: &str| PyString::new(py, t).into_any();
        let int = |n: u32| n.into_pyobject(py).map(|n| n.into_any());
        let names = |names: &[Py<PyString>]| -> PyResult<Bound<'py, PyAny>> {
            Ok(PyTuple::new(py, names.iter().map(|n| n.bind(py)))?.into_any())
        };
        match self {
            VerdictDetail::Plain => Ok(py.None().into_bound(py)),
            VerdictDetail::Unchanged => tuple(vec![text("unchanged")]),
            VerdictDetail::Failed(error, n) => tuple(vec![
                text("failed"),
                error.bind(py).clone().into_any(),
                int(*n)?,
            ]),
            VerdictDetail::Errors(n, error) => tuple(vec![
                text("errors"),
                int(*n)?,
                error.bind(py).clone().into_any(),
            ]),
            VerdictDetail::Empty(n, tools) => tuple(vec![text("empty"), int(*n)?, names(tools)?]),
            VerdictDetail::Cycle(tools, writes) => tuple(vec![
                text("cycle"),
                names(tools)?,
                PyBool::new(py, *writes).to_owned().into_any(),
            ]),
            VerdictDetail::PollLimit(n) => tuple(vec![text("poll"), int(*n)?]),
            VerdictDetail::After(tool, n, detail) => tuple(vec![
                text("after"),
                tool.bind(py).clone().into_any(),
                int(*n)?,
                detail.to_python(py)?,
            ]),
        }
    }
}

/// What the guard says about one call. Immutable; `message` is built when read.
#[pyclass(frozen, module = "tripwire", name = "Verdict")]
pub struct Verdict {
    pub(crate) action: Action,
    pub(crate) reason: Option<Reason>,
    pub(crate) tool: Py<PyString>,
    pub(crate) key: Key,
    pub(crate) repeats: u32,
    pub(crate) step: u64,
    pub(crate) cached: Option<Py<PyAny>>,
    pub(crate) call_id: Option<Py<PyString>>,
    pub(crate) duplicate_of: Option<usize>,
    pub(crate) invalid_arguments: Option<Py<PyString>>,
    pub(crate) window: usize,
    /// The guard's `max_steps` as the user wrote it, for the budget message.
    pub(crate) budget: Option<Arc<str>>,
    pub(crate) detail: VerdictDetail,
    /// The `serial` of the configuration of the guard that made it, and its tool's
    /// `plain_results` there: `observe` on a guard of that configuration reads the policy
    /// from here rather than looking it up again. 0: not known (a verdict decoded from bytes).
    pub(crate) origin: u64,
    pub(crate) plain_results: bool,
}

impl Verdict {
    /// The run's stop, for a call checked after it: the call's own id, tool and key, the
    /// stop's message (the reference's `_decide`).
    pub(crate) fn after_stop(
        &self,
        py: Python<'_>,
        tool: &Bound<'_, PyString>,
        key: Key,
        call_id: Option<Py<PyString>>,
        invalid_arguments: Option<Py<PyString>>,
    ) -> Verdict {
        Verdict {
            action: self.action,
            reason: self.reason,
            tool: tool.clone().unbind(),
            key,
            repeats: self.repeats,
            step: self.step,
            cached: None,
            call_id,
            duplicate_of: None,
            invalid_arguments,
            window: self.window,
            budget: self.budget.clone(),
            origin: self.origin,
            plain_results: self.plain_results,
            detail: VerdictDetail::After(
                self.tool.clone_ref(py),
                self.repeats,
                Box::new(self.detail.copy(py)),
            ),
        }
    }

    /// An identical verdict (a new object with the same fields).
    pub(crate) fn duplicate(&self, py: Python<'_>) -> Verdict {
        self.copy(
            py,
            self.call_id.as_ref().map(|c| c.clone_ref(py)),
            self.duplicate_of,
        )
    }

    pub(crate) fn copy(
        &self,
        py: Python<'_>,
        call_id: Option<Py<PyString>>,
        duplicate_of: Option<usize>,
    ) -> Verdict {
        Verdict {
            action: self.action,
            reason: self.reason,
            tool: self.tool.clone_ref(py),
            key: self.key,
            repeats: self.repeats,
            step: self.step,
            cached: self.cached.as_ref().map(|c| c.clone_ref(py)),
            call_id,
            duplicate_of,
            invalid_arguments: self.invalid_arguments.as_ref().map(|i| i.clone_ref(py)),
            window: self.window,
            budget: self.budget.clone(),
            detail: self.detail.copy(py),
            origin: self.origin,
            plain_results: self.plain_results,
        }
    }
}

#[pymethods]
impl Verdict {
    #[getter]
    fn action(&self) -> &'static str {
        self.action.as_str()
    }
    #[getter]
    fn reason(&self) -> Option<&'static str> {
        self.reason.map(Reason::as_str)
    }
    #[getter]
    fn tool(&self, py: Python<'_>) -> Py<PyString> {
        self.tool.clone_ref(py)
    }
    #[getter]
    fn key(&self) -> String {
        key_hex(self.key)
    }
    #[getter]
    fn repeats(&self) -> u32 {
        self.repeats
    }
    #[getter]
    fn step(&self) -> u64 {
        self.step
    }
    #[getter]
    fn cached(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.cached.as_ref().map(|c| c.clone_ref(py))
    }
    #[getter]
    fn call_id(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.call_id.as_ref().map(|c| c.clone_ref(py))
    }
    #[getter]
    fn duplicate_of(&self) -> Option<usize> {
        self.duplicate_of
    }
    #[getter]
    fn invalid_arguments(&self, py: Python<'_>) -> Option<Py<PyString>> {
        self.invalid_arguments.as_ref().map(|i| i.clone_ref(py))
    }
    #[getter]
    fn message<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // The texts live once, in the reference (`verdict_message`).
        let budget = match &self.budget {
            Some(text) => PyString::new(py, text).into_any(),
            None => py.None().into_bound(py),
        };
        reference(py)?.verdict_message.bind(py).call1((
            self.action.as_str(),
            self.reason.map(Reason::as_str),
            self.tool.bind(py),
            self.repeats,
            self.window,
            budget,
            self.detail.to_python(py)?,
        ))
    }

    /// Pickle and `copy` (a fleet checks in one worker and observes in another): the
    /// verdict's fields in the snapshot's encoding, its window, budget and cached result.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let verdict = slf.get();
        let bytes = crate::py_snapshot::verdict_bytes(py, verdict)?;
        let args = (
            pyo3::types::PyBytes::new(py, &bytes),
            verdict.window,
            verdict.budget.as_deref(),
            verdict.cached.as_ref().map(|c| c.bind(py).clone()),
        )
            .into_pyobject(py)?;
        Ok((slf.get_type().getattr("_from_reduced")?, args))
    }

    /// The other half of `__reduce__`.
    #[staticmethod]
    #[pyo3(signature = (data, window, budget, cached, /))]
    fn _from_reduced(
        py: Python<'_>,
        data: &[u8],
        window: usize,
        budget: Option<String>,
        cached: Option<Py<PyAny>>,
    ) -> PyResult<Verdict> {
        crate::py_snapshot::verdict_from_bytes(py, data, window, budget.map(Arc::from), cached)
    }

    /// Equal when every field is, and `cached` holds the very same result. Unhashable.
    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let Ok(other) = other.cast::<Verdict>() else {
            return Ok(py.NotImplemented());
        };
        let other = other.get();
        let same_str = |a: &Option<Py<PyString>>, b: &Option<Py<PyString>>| match (a, b) {
            (None, None) => Ok(true),
            (Some(a), Some(b)) => PyAnyMethods::eq(a.bind(py).as_any(), b.bind(py)),
            _ => Ok(false),
        };
        let equal = self.action == other.action
            && self.reason == other.reason
            && self.key == other.key
            && self.repeats == other.repeats
            && self.step == other.step
            && self.duplicate_of == other.duplicate_of
            && PyAnyMethods::eq(self.tool.bind(py).as_any(), other.tool.bind(py))?
            && same_str(&self.call_id, &other.call_id)?
            && same_str(&self.invalid_arguments, &other.invalid_arguments)?
            && self.detail.to_python(py)?.eq(other.detail.to_python(py)?)?
            && match (&self.cached, &other.cached) {
                (None, None) => true,
                (Some(a), Some(b)) => a.is(b),
                _ => false,
            };
        Ok(equal.into_pyobject(py)?.to_owned().into_any().unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut extra = String::new();
        if let Some(reason) = self.reason {
            extra.push_str(&format!(", reason='{}'", reason.as_str()));
        }
        if let Some(index) = self.duplicate_of {
            extra.push_str(&format!(", duplicate_of={index}"));
        }
        if self.cached.is_some() {
            extra.push_str(", cached=...");
        }
        Ok(format!(
            "Verdict(action='{}'{extra}, tool={}, key='{}', repeats={}, step={})",
            self.action.as_str(),
            self.tool.bind(py).repr()?,
            key_hex(self.key),
            self.repeats,
            self.step
        ))
    }
}
