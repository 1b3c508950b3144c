//! `Guard` and `Verdict` for Python, over the pyo3-free logic in `guard.rs`. Behaviour and
//! messages mirror `tripwire/_guard.py`, the reference.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PySequence, PyString};
use smallvec::SmallVec;

use crate::canon::{self, Text};
use crate::guard::{
    Action, Decision, Detail, Limits, NameMap, Policy, Reason, Released, RunState, ToolRule,
};
use crate::key::{key_hex, Key};
use crate::py_canon::{canonical_key, text_of, wtf8_of, VolatileKeys};
use crate::py_json::{invalid_json, json_key};

/// The state keeps verdicts as plain Rust values: Python objects are only made once the
/// lock is released, because allocating one can start a garbage collection whose callbacks
/// run Python code, which may use this guard or hand the GIL to a thread that would then
/// wait on the lock while holding the GIL.
type State = RunState<Verdict, Py<PyAny>, Py<PyString>>;
type Dropped = Released<Verdict, Py<PyAny>, Py<PyString>>;

/// A tool's policy as the reference's `_check_tools` validated it.
struct ToolSpec {
    rule: ToolRule,
    /// Empty results are answers for this tool: never counted as empty.
    empty_answers: bool,
    /// Digests of the results the policy lists as empty.
    empty_digests: Vec<Key>,
    /// The reference's policy object, for results only Python can judge.
    policy: Py<PyAny>,
}

type ToolSpecs = NameMap<ToolSpec>;

/// The reference helpers for policies and results, imported once.
struct GuardHelpers {
    check_tools: Py<PyAny>,
    result_value: Py<PyAny>,
    result_digest: Py<PyAny>,
    is_empty_result: Py<PyAny>,
}

static GUARD_HELPERS: PyOnceLock<GuardHelpers> = PyOnceLock::new();

fn guard_helpers(py: Python<'_>) -> PyResult<&GuardHelpers> {
    GUARD_HELPERS.get_or_try_init(py, || {
        let module = py.import("tripwire._guard")?;
        Ok(GuardHelpers {
            check_tools: module.getattr("_check_tools")?.unbind(),
            result_value: module.getattr("result_value")?.unbind(),
            result_digest: module.getattr("result_digest")?.unbind(),
            is_empty_result: module.getattr("is_empty_result")?.unbind(),
        })
    })
}

/// A tool name's WTF-8 bytes, on the stack for any usual name.
type NameBytes = SmallVec<[u8; 32]>;

fn name_bytes(name: &Bound<'_, PyString>) -> PyResult<NameBytes> {
    Ok(match text_of(name)? {
        Text::Latin1(bytes) if bytes.is_ascii() => SmallVec::from_slice(bytes),
        _ => SmallVec::from_vec(wtf8_of(name)?),
    })
}

/// One call, validated and keyed, ready to be decided.
struct Prepared<'py> {
    name: Bound<'py, PyString>,
    name_bytes: NameBytes,
    key: Key,
    rule: Option<ToolRule>,
    call_id: Option<CallId>,
    invalid_arguments: Option<Py<PyString>>,
}

/// What a verdict's message is about (`guard::Detail`, with tool names for cycles).
enum VerdictDetail {
    Plain,
    Unchanged,
    Empty(u32, Vec<Py<PyString>>),
    Cycle(Vec<Py<PyString>>, bool),
    PollLimit(u32),
}

/// "3 calls to search_docs in a row", or "4 calls in a row to search_docs, search_kb", as
/// the reference's `_empty_calls` writes it.
fn empty_calls<'py>(
    py: Python<'py>,
    count: u32,
    tools: &[Py<PyString>],
) -> Vec<Bound<'py, PyString>> {
    let text = |t: &str| PyString::new(py, t);
    if let [tool] = tools {
        return vec![
            text(&format!("{count} calls to ")),
            tool.bind(py).clone(),
            text(" in a row"),
        ];
    }
    let mut parts = vec![text(&format!("{count} calls in a row to "))];
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 {
            parts.push(text(", "));
        }
        parts.push(tool.bind(py).clone());
    }
    parts
}

fn copy_names(py: Python<'_>, names: &[Py<PyString>]) -> Vec<Py<PyString>> {
    names.iter().map(|t| t.clone_ref(py)).collect()
}

fn same_names(py: Python<'_>, a: &[Py<PyString>], b: &[Py<PyString>]) -> PyResult<bool> {
    if a.len() != b.len() {
        return Ok(false);
    }
    for (x, y) in a.iter().zip(b) {
        if !PyAnyMethods::eq(x.bind(py).as_any(), y.bind(py))? {
            return Ok(false);
        }
    }
    Ok(true)
}

impl VerdictDetail {
    fn copy(&self, py: Python<'_>) -> VerdictDetail {
        match self {
            VerdictDetail::Plain => VerdictDetail::Plain,
            VerdictDetail::Unchanged => VerdictDetail::Unchanged,
            VerdictDetail::Empty(n, tools) => VerdictDetail::Empty(*n, copy_names(py, tools)),
            VerdictDetail::Cycle(tools, writes) => {
                VerdictDetail::Cycle(copy_names(py, tools), *writes)
            }
            VerdictDetail::PollLimit(n) => VerdictDetail::PollLimit(*n),
        }
    }

    fn same_as(&self, py: Python<'_>, other: &VerdictDetail) -> PyResult<bool> {
        Ok(match (self, other) {
            (VerdictDetail::Plain, VerdictDetail::Plain)
            | (VerdictDetail::Unchanged, VerdictDetail::Unchanged) => true,
            (VerdictDetail::PollLimit(a), VerdictDetail::PollLimit(b)) => a == b,
            (VerdictDetail::Empty(a, x), VerdictDetail::Empty(b, y)) => {
                a == b && same_names(py, x, y)?
            }
            (VerdictDetail::Cycle(a, x), VerdictDetail::Cycle(b, y)) => {
                x == y && same_names(py, a, b)?
            }
            _ => false,
        })
    }
}

const ORDINALS: [&str; 8] = [
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
];

fn ordinal(n: u32) -> String {
    match n.checked_sub(1).and_then(|i| ORDINALS.get(i as usize)) {
        Some(word) => (*word).to_string(),
        None => format!("{n}th"),
    }
}

/// What the guard says about one call. Immutable; `message` is built when read.
#[pyclass(frozen, module = "tripwire", name = "Verdict")]
pub struct Verdict {
    action: Action,
    reason: Option<Reason>,
    tool: Py<PyString>,
    key: Key,
    repeats: u32,
    step: u64,
    cached: Option<Py<PyAny>>,
    call_id: Option<Py<PyString>>,
    duplicate_of: Option<usize>,
    invalid_arguments: Option<Py<PyString>>,
    window: usize,
    /// The guard's `max_steps` as the user wrote it, for the budget message.
    budget: Option<Arc<str>>,
    detail: VerdictDetail,
}

impl Verdict {
    /// An identical verdict (a new object with the same fields).
    fn duplicate(&self, py: Python<'_>) -> Verdict {
        self.copy(
            py,
            self.call_id.as_ref().map(|c| c.clone_ref(py)),
            self.duplicate_of,
        )
    }

    fn copy(
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
    fn message<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyString>>> {
        // Texts as in the reference's `nudge_message` and `stop_message`. The tool names go
        // in as the Python strs they are (they may hold lone surrogates).
        let tool = self.tool.bind(py).clone();
        let text = |t: &str| PyString::new(py, t);
        let parts: Vec<Bound<'py, PyString>> = match (self.action, self.reason, &self.detail) {
            (Action::Nudge, _, VerdictDetail::Empty(n, tools)) => {
                let mut parts = empty_calls(py, *n, tools);
                parts.push(text(
                    " returned nothing. Do not reword the same request again: try a different \
                     tool or approach, or report what you have so far.",
                ));
                parts
            }
            (Action::Nudge, _, detail) => {
                let unchanged = if matches!(detail, VerdictDetail::Unchanged) {
                    ", and the result has not changed"
                } else {
                    ""
                };
                vec![
                    text(&format!(
                        "This is the {} identical call to ",
                        ordinal(self.repeats)
                    )),
                    tool,
                    text(&format!(
                        " with the same arguments{unchanged}. Do not repeat it. Either use \
                         different arguments, use a different tool, or report what you have so \
                         far."
                    )),
                ]
            }
            (Action::Stop, Some(Reason::BudgetExhausted), _) => vec![text(&format!(
                "Stopped (budget_exhausted): the budget of {} tool calls is spent.",
                self.budget.as_deref().unwrap_or("None")
            ))],
            (Action::Stop, Some(Reason::NoProgress), VerdictDetail::Empty(n, tools)) => {
                let mut parts = vec![text("Stopped (no_progress): ")];
                parts.extend(empty_calls(py, *n, tools));
                parts.push(text(" returned nothing."));
                parts
            }
            (Action::Stop, Some(Reason::NoProgress), VerdictDetail::Cycle(tools, writes)) => {
                let mut parts = vec![text(&format!(
                    "Stopped (no_progress): the last {} calls went twice round the same cycle (",
                    2 * tools.len()
                ))];
                for (i, name) in tools.iter().enumerate() {
                    if i > 0 {
                        parts.push(text(" -> "));
                    }
                    parts.push(name.bind(py).clone());
                }
                parts.push(text(if *writes {
                    ") with the same results from its writes; "
                } else {
                    ") with the same results; "
                }));
                parts.push(tool);
                parts.push(text(" would start a third round."));
                parts
            }
            (Action::Stop, Some(Reason::LoopDetected), VerdictDetail::PollLimit(limit)) => vec![
                text("Stopped (loop_detected): "),
                tool,
                text(&format!(
                    " was polled {} times with the same arguments, more than its limit of \
                     {limit}.",
                    self.repeats
                )),
            ],
            (Action::Stop, Some(Reason::LoopDetected), detail) => {
                let same = if matches!(detail, VerdictDetail::Unchanged) {
                    " and the same result"
                } else {
                    ""
                };
                vec![
                    text("Stopped (loop_detected): "),
                    tool,
                    text(&format!(
                        " was called {} times with the same arguments{same} within the last {} \
                         calls.",
                        self.repeats, self.window
                    )),
                ]
            }
            _ => return Ok(None),
        };
        Ok(Some(
            PyString::new(py, "")
                .call_method1("join", (parts,))?
                .cast_into::<PyString>()?,
        ))
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
            && self.detail.same_as(py, &other.detail)?
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

/// A loop guard for one agent run.
///
/// `frozen` with the run state behind a `Mutex`: a guard shared by threads must lose no
/// update, and `&mut self` methods would raise borrow errors under threads instead. The lock
/// is never held while Python code can run (no calls into Python, and objects the state lets
/// go of are dropped after it is released), so a callback that re-enters tripwire cannot
/// deadlock.
#[pyclass(frozen, module = "tripwire", name = "Guard")]
pub struct Guard {
    limits: Limits,
    volatile: Arc<VolatileKeys>,
    /// Results are keyed with the default volatile keys, as the reference keys them.
    default_volatile: Arc<VolatileKeys>,
    /// Tool name (WTF-8) to policy.
    tools: ToolSpecs,
    tools_repr: String,
    max_steps_text: Option<Arc<str>>,
    state: Mutex<State>,
}

/// Checks an int option as the reference does: an `int` (not a `bool`), at least `minimum`.
/// Compared in Python, so huge values get the same message rather than an overflow.
fn check_int(name: &str, value: &Bound<'_, PyAny>, minimum: i64) -> PyResult<()> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            value.get_type().name()?
        )));
    }
    if value.lt(minimum)? {
        return Err(PyValueError::new_err(format!(
            "{name} must be at least {minimum}, got {}",
            formatted(value)?
        )));
    }
    Ok(())
}

/// `f"{value}"`, as the reference's messages write numbers.
fn formatted(value: &Bound<'_, PyAny>) -> PyResult<String> {
    value.call_method1("__format__", ("",))?.extract::<String>()
}

/// Validates the numbers in the reference's order and with its messages, then converts them.
fn limits_arg<'py>(
    py: Python<'py>,
    window: Option<&Bound<'py, PyAny>>,
    nudge_at: Option<&Bound<'py, PyAny>>,
    stop_at: Option<&Bound<'py, PyAny>>,
    max_steps: Option<&Bound<'py, PyAny>>,
) -> PyResult<Limits> {
    // `None` means the default, as in the reference.
    let or_default = |value: Option<&Bound<'py, PyAny>>, default: i64| -> Bound<'py, PyAny> {
        match value {
            Some(v) if !v.is_none() => v.clone(),
            _ => default
                .into_pyobject(py)
                .map_or_else(|e| match e {}, |v| v.into_any()),
        }
    };
    let (window, nudge_at, stop_at) = (
        or_default(window, 12),
        or_default(nudge_at, 2),
        or_default(stop_at, 3),
    );
    check_int("window", &window, 1)?;
    check_int("nudge_at", &nudge_at, 2)?;
    check_int("stop_at", &stop_at, 2)?;
    if stop_at.lt(&nudge_at)? {
        return Err(PyValueError::new_err(format!(
            "stop_at ({}) must not be less than nudge_at ({})",
            formatted(&stop_at)?,
            formatted(&nudge_at)?
        )));
    }
    let most = window.add(1)?;
    if stop_at.gt(&most)? {
        let window = formatted(&window)?;
        return Err(PyValueError::new_err(format!(
            "stop_at ({}) can never be reached with window={window}: a window of {window} \
             holds at most {} occurrences, this one included",
            formatted(&stop_at)?,
            formatted(&most)?
        )));
    }
    let max_steps = match max_steps {
        Some(m) if !m.is_none() => {
            check_int("max_steps", m, 1)?;
            // Beyond 2^64 steps is no budget at all.
            Some(m.extract::<u64>().unwrap_or(u64::MAX))
        }
        _ => None,
    };
    // Past the checks, a window beyond a C ssize_t is an OverflowError, as for the
    // reference's deque; nudge_at and stop_at are at most window + 1, so they fit too.
    let window: usize = window.extract::<isize>()?.unsigned_abs();
    let nudge_at: u32 = nudge_at.extract::<usize>()?.try_into().unwrap_or(u32::MAX);
    let stop_at: u32 = stop_at.extract::<usize>()?.try_into().unwrap_or(u32::MAX);
    Limits::new(window, nudge_at, stop_at, max_steps).map_err(PyValueError::new_err)
}

impl Guard {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic cannot happen while the lock is held (no user data is unwrapped there), but
        // if one ever did, the state is still consistent at every await-free step: go on.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn spec_of(&self, name_bytes: &[u8]) -> Option<&ToolSpec> {
        if self.tools.is_empty() {
            return None;
        }
        self.tools.get(name_bytes)
    }

    /// A result's digest and whether it is empty, as the reference's `result_value`,
    /// `result_digest` and `is_empty_result` say. Plain strs, lists, dicts and None are
    /// judged here; anything else is handed to those helpers.
    fn describe_result(
        &self,
        py: Python<'_>,
        spec: Option<&ToolSpec>,
        result: &Bound<'_, PyAny>,
    ) -> PyResult<(Key, bool)> {
        let helpers = guard_helpers(py)?;
        let plain = result.is_none()
            || result.is_exact_instance_of::<PyString>()
            || result.is_exact_instance_of::<PyList>()
            || result.is_exact_instance_of::<PyDict>();
        if !plain {
            let value = helpers.result_value.bind(py).call1((result,))?;
            let digest: String = helpers.result_digest.bind(py).call1((&value,))?.extract()?;
            let policy = match spec {
                Some(spec) => spec.policy.bind(py).clone(),
                None => py.None().into_bound(py),
            };
            let empty: bool = helpers
                .is_empty_result
                .bind(py)
                .call1((&value, &digest, policy))?
                .extract()?;
            return Ok((parse_digest(&digest)?, empty));
        }
        // Interned once: a new str each call would cost as much as a small result's key.
        let result_name = pyo3::intern!(py, "result").as_any();
        let digest = match canonical_key(py, result_name, result, &self.default_volatile) {
            Ok(key) => key,
            // What cannot be keyed is keyed by its repr, as the reference's `result_digest`
            // does; done here rather than by calling it, which would key the result again and
            // run its callbacks twice.
            Err(err)
                if err.is_instance_of::<PyTypeError>(py)
                    || err.is_instance_of::<PyValueError>(py)
                    || err.is_instance_of::<pyo3::exceptions::PyRecursionError>(py) =>
            {
                let repr = result.repr()?;
                canonical_key(py, result_name, repr.as_any(), &self.default_volatile)?
            }
            Err(err) => return Err(err),
        };
        let empty = match spec {
            Some(spec) if spec.empty_answers => false,
            Some(spec) if spec.empty_digests.contains(&digest) => true,
            _ if result.is_none() => true,
            _ => match result.cast::<PyString>() {
                Ok(text) => text_of(text)?
                    .code_points()
                    .all(canon::is_python_whitespace),
                Err(_) => result.len()? == 0,
            },
        };
        Ok((digest, empty))
    }

    /// Validates and keys one call; raises before anything changes.
    fn prepare<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        args: &Bound<'py, PyAny>,
        call_id: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Prepared<'py>> {
        let call_id = call_id_arg(call_id)?;
        let key = canonical_key(py, name, args, &self.volatile)?;
        let name = exact_str(name.cast::<PyString>()?)?;
        let name_bytes = name_bytes(&name)?;
        let rule = self.spec_of(&name_bytes).map(|s| s.rule);
        Ok(Prepared {
            name,
            name_bytes,
            key,
            rule,
            call_id,
            invalid_arguments: None,
        })
    }

    /// Validates and keys one call whose arguments are JSON text; text that is not valid
    /// JSON keys the call by its collapsed raw text instead of raising.
    fn prepare_json<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        text: &Bound<'py, PyAny>,
        call_id: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Prepared<'py>> {
        let call_id = call_id_arg(call_id)?;
        let (key, invalid_arguments) = match json_key(py, name, text, &self.volatile) {
            Ok(key) => (key, None),
            Err(err) => {
                let (key, why) = invalid_json(py, name, text, err)?;
                (key, Some(why))
            }
        };
        let name = exact_str(name.cast::<PyString>()?)?;
        let name_bytes = name_bytes(&name)?;
        let rule = self.spec_of(&name_bytes).map(|s| s.rule);
        Ok(Prepared {
            name,
            name_bytes,
            key,
            rule,
            call_id,
            invalid_arguments,
        })
    }

    /// Decides one prepared call: the verdict object is made after the lock is released,
    /// and so are the objects the state let go of dropped.
    fn decide_one(&self, py: Python<'_>, call: &Prepared<'_>) -> PyResult<Py<Verdict>> {
        let mut released = Released::default();
        let verdict = {
            let mut state = self.lock();
            self.decide_locked(py, &mut state, call, &mut released)
        };
        drop(released);
        Py::new(py, verdict)
    }

    /// Decides one call with the state locked by the caller.
    fn decide_locked(
        &self,
        py: Python<'_>,
        state: &mut State,
        call: &Prepared<'_>,
        released: &mut Dropped,
    ) -> Verdict {
        let Prepared {
            name,
            name_bytes,
            key,
            rule,
            call_id,
            invalid_arguments,
        } = call;
        let (key, rule, call_id) = (*key, *rule, call_id.as_ref());
        let policy = rule.map(|r| r.policy);
        if let Some(known) = state.recall(call_id.map(|c| &*c.bytes)) {
            return known.duplicate(py);
        }
        let tool = state.intern_tool(name_bytes, || name.clone().unbind());
        let decision: Decision = state.decide(&self.limits, key, tool, rule);
        let detail = match &decision.detail {
            Detail::Plain => VerdictDetail::Plain,
            Detail::Unchanged => VerdictDetail::Unchanged,
            Detail::Empty(n, ids) => VerdictDetail::Empty(*n, names_of(py, state, ids)),
            Detail::PollLimit(n) => VerdictDetail::PollLimit(*n),
            Detail::Cycle(ids, writes) => VerdictDetail::Cycle(names_of(py, state, ids), *writes),
        };
        let cached = state
            .cached(&decision, policy, key)
            .map(|r| r.clone_ref(py));
        let verdict = Verdict {
            action: decision.action,
            reason: decision.reason,
            tool: name.clone().unbind(),
            key,
            repeats: decision.repeats,
            step: decision.step,
            cached,
            call_id: call_id.map(|c| c.object.clone_ref(py)),
            duplicate_of: None,
            invalid_arguments: invalid_arguments.as_ref().map(|i| i.clone_ref(py)),
            window: self.limits.window,
            budget: self.max_steps_text.clone(),
            detail,
        };
        let latched = (decision.action == Action::Stop).then(|| verdict.copy(py, None, None));
        let remembered = call_id.map(|c| (&*c.bytes, verdict.duplicate(py)));
        released.absorb(state.commit(
            &self.limits,
            key,
            tool,
            &decision,
            policy,
            latched,
            remembered,
        ));
        verdict
    }
}

/// A call id, as the Python str and as bytes to compare without Python.
struct CallId {
    object: Py<PyString>,
    bytes: Vec<u8>,
}

/// The Verdict a method was given, or the TypeError the reference raises.
fn verdict_arg<'a>(method: &str, verdict: &'a Bound<'_, PyAny>) -> PyResult<&'a Verdict> {
    match verdict.cast::<Verdict>() {
        Ok(verdict) => Ok(verdict.get()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{method}() takes a Verdict, not {}",
            verdict.get_type().name()?
        ))),
    }
}

/// The names of interned tool ids.
fn names_of(py: Python<'_>, state: &State, ids: &[u32]) -> Vec<Py<PyString>> {
    ids.iter()
        .filter_map(|&id| state.tool_name(id).map(|n| n.clone_ref(py)))
        .collect()
}

/// The characters of a str as an exact str (the same object if it is one): a str subclass
/// could override how it hashes, compares or formats, and the verdict should not carry that.
fn exact_str<'py>(text: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyString>> {
    if text.is_exact_instance_of::<PyString>() {
        return Ok(text.clone());
    }
    // SAFETY: `text` is a str; PyUnicode_FromObject returns a new reference to an exact
    // copy of its characters (calling no method of the subclass), or NULL with an error set.
    unsafe {
        Bound::from_owned_ptr_or_err(text.py(), pyo3::ffi::PyUnicode_FromObject(text.as_ptr()))
            .map(|copy| copy.cast_into_unchecked::<PyString>())
    }
}

fn parse_digest(hex: &str) -> PyResult<Key> {
    crate::key::parse_key_hex(hex).ok_or_else(|| PyValueError::new_err("malformed result digest"))
}

fn call_id_arg(call_id: Option<&Bound<'_, PyAny>>) -> PyResult<Option<CallId>> {
    match call_id {
        None => Ok(None),
        Some(obj) if obj.is_none() => Ok(None),
        Some(obj) => match obj.cast::<PyString>() {
            Ok(text) => Ok(Some(CallId {
                bytes: wtf8_of(text)?,
                object: exact_str(text)?.unbind(),
            })),
            Err(_) => Err(PyTypeError::new_err(format!(
                "call_id must be a str or None, not {}",
                obj.get_type().name()?
            ))),
        },
    }
}

#[pymethods]
impl Guard {
    #[new]
    #[pyo3(signature = (*, window = None, nudge_at = None, stop_at = None, volatile_keys = None, max_steps = None, tools = None))]
    fn new(
        py: Python<'_>,
        window: Option<&Bound<'_, PyAny>>,
        nudge_at: Option<&Bound<'_, PyAny>>,
        stop_at: Option<&Bound<'_, PyAny>>,
        volatile_keys: Option<&Bound<'_, PyAny>>,
        max_steps: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Guard> {
        let limits = limits_arg(py, window, nudge_at, stop_at, max_steps)?;
        let max_steps_text = match max_steps {
            Some(m) if !m.is_none() => Some(Arc::from(formatted(m)?)),
            _ => None,
        };
        let volatile = VolatileKeys::from_arg(py, volatile_keys)?;
        let default_volatile = VolatileKeys::from_arg(py, None)?;
        let (tools, tools_repr) = tools_arg(py, tools)?;
        Ok(Guard {
            limits,
            volatile,
            default_volatile,
            tools,
            tools_repr,
            max_steps_text,
            state: Mutex::new(State::default()),
        })
    }

    /// The verdict on one call, before it is dispatched.
    #[pyo3(signature = (name, args, /, *, call_id = None))]
    fn check(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        call_id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Verdict>> {
        let call = self.prepare(py, name, args, call_id)?;
        self.decide_one(py, &call)
    }

    /// `check` for arguments given as JSON text (OpenAI-style `arguments`).
    #[pyo3(signature = (name, text, /, *, call_id = None))]
    fn check_json(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        text: &Bound<'_, PyAny>,
        call_id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Verdict>> {
        let call = self.prepare_json(py, name, text, call_id)?;
        self.decide_one(py, &call)
    }

    /// Verdicts for all tool calls of one model response; see the reference for the rules.
    #[pyo3(signature = (calls, /))]
    fn check_turn(&self, py: Python<'_>, calls: &Bound<'_, PyAny>) -> PyResult<Py<PyList>> {
        let mut prepared = Vec::new();
        for (index, call) in calls.try_iter()?.enumerate() {
            let call = call?;
            let parts = match call.cast::<PySequence>() {
                Ok(seq)
                    if !call.is_instance_of::<PyString>()
                        && !call.is_instance_of::<pyo3::types::PyBytes>() =>
                {
                    let len = seq.len()?;
                    (len == 2 || len == 3).then_some((seq.clone(), len))
                }
                _ => None,
            };
            let Some((seq, len)) = parts else {
                return Err(PyTypeError::new_err(format!(
                    "call {index} of the turn must be (name, args) or (name, args, call_id), not {}",
                    call.get_type().name()?
                )));
            };
            let name = seq.get_item(0)?;
            let args = seq.get_item(1)?;
            let call_id = if len == 3 {
                Some(seq.get_item(2)?)
            } else {
                None
            };
            prepared.push(self.prepare(py, &name, &args, call_id.as_ref())?);
        }
        let mut released = Released::default();
        let mut verdicts: Vec<Verdict> = Vec::with_capacity(prepared.len());
        {
            let mut state = self.lock();
            let mut first_of_key: HashMap<Key, usize> = HashMap::new();
            for (index, call) in prepared.iter().enumerate() {
                let earlier = first_of_key.get(&call.key).copied();
                let call_id = call.call_id.as_ref();
                let retried = call_id.is_some_and(|c| state.knows_call_id(&c.bytes));
                match earlier {
                    Some(first) if !retried => {
                        let copy = verdicts[first].copy(
                            py,
                            call_id.map(|c| c.object.clone_ref(py)),
                            Some(first),
                        );
                        if let Some(c) = call_id {
                            state.remember(&c.bytes, copy.duplicate(py), &mut released);
                        }
                        verdicts.push(copy);
                    }
                    _ => {
                        first_of_key.entry(call.key).or_insert(index);
                        verdicts.push(self.decide_locked(py, &mut state, call, &mut released));
                    }
                }
            }
        }
        drop(released);
        let verdicts = verdicts
            .into_iter()
            .map(|v| Py::new(py, v))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, verdicts)?.unbind())
    }

    /// Remembers the result of an allowed call to a `read` tool.
    #[pyo3(signature = (verdict, result, /))]
    fn record(
        &self,
        py: Python<'_>,
        verdict: &Bound<'_, PyAny>,
        result: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let verdict = verdict_arg("record", verdict)?;
        if verdict.action != Action::Allow || result.is_none() {
            return Ok(());
        }
        let tool = name_bytes(verdict.tool.bind(py))?;
        if self.spec_of(&tool).map(|s| s.rule.policy) != Some(Policy::Read) {
            return Ok(());
        }
        let released = self
            .lock()
            .store_result(verdict.key, result.clone().unbind());
        drop(released);
        Ok(())
    }

    /// Tells the guard what an allowed call returned (see the reference's `observe`).
    #[pyo3(signature = (verdict, result, /))]
    fn observe(
        &self,
        py: Python<'_>,
        verdict: &Bound<'_, PyAny>,
        result: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let verdict = verdict_arg("observe", verdict)?;
        if verdict.action != Action::Allow {
            return Ok(());
        }
        let tool = name_bytes(verdict.tool.bind(py))?;
        let (digest, empty) = self.describe_result(py, self.spec_of(&tool), result)?;
        self.lock()
            .observe(verdict.step, verdict.key, digest, empty);
        Ok(())
    }

    /// Forgets the run: window, steps, stop, call ids and cached results.
    fn reset(&self) {
        let released = self.lock().reset();
        drop(released);
    }

    #[getter]
    fn steps(&self) -> u64 {
        self.lock().steps()
    }

    #[getter]
    fn stopped(&self) -> bool {
        self.lock().is_stopped()
    }

    /// The window, oldest first.
    fn keys(&self) -> Vec<String> {
        self.lock().keys().map(key_hex).collect()
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }

    fn __repr__(&self) -> String {
        let max_steps = self.max_steps_text.as_deref().unwrap_or("None");
        format!(
            "Guard(window={}, nudge_at={}, stop_at={}, max_steps={max_steps}, tools={}, steps={})",
            self.limits.window,
            self.limits.nudge_at,
            self.limits.stop_at,
            self.tools_repr,
            self.steps()
        )
    }
}

/// Validates `tools=` with the reference's own `_check_tools` (one set of rules and
/// messages), and takes the policies it returns; also their repr.
fn tools_arg(py: Python<'_>, tools: Option<&Bound<'_, PyAny>>) -> PyResult<(ToolSpecs, String)> {
    let mut specs = NameMap::default();
    let tools = match tools {
        Some(t) if !t.is_none() => t.clone(),
        _ => return Ok((specs, "{}".to_string())),
    };
    let (checked, shown): (Bound<'_, PyDict>, String) = guard_helpers(py)?
        .check_tools
        .bind(py)
        .call1((tools,))?
        .extract()?;
    for (name, policy) in checked.iter() {
        let name = name.cast_into::<PyString>()?;
        let kind: String = policy.getattr("kind")?.extract()?;
        let Some(kind) = Policy::parse(&kind) else {
            return Err(PyValueError::new_err(format!("unknown policy {kind:?}")));
        };
        let mut empty_digests = Vec::new();
        for digest in policy.getattr("empty_digests")?.try_iter()? {
            empty_digests.push(parse_digest(&digest?.extract::<String>()?)?);
        }
        // Any number of polls the reference accepts; more than 2^32 is as good as no limit.
        let max_polls = policy.getattr("max_polls")?;
        let max_polls = max_polls.extract::<u32>().unwrap_or(u32::MAX);
        let spec = ToolSpec {
            rule: ToolRule {
                policy: kind,
                max_polls,
            },
            empty_answers: policy.getattr("empty_answers")?.extract()?,
            empty_digests,
            policy: policy.unbind(),
        };
        specs.insert(wtf8_of(&name)?.into_boxed_slice(), spec);
    }
    Ok((specs, shown))
}
