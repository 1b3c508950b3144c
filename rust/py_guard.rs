//! `Guard` and `Verdict` for Python, over the pyo3-free logic in `guard.rs`. Behaviour and
//! messages mirror `tripwire/_guard.py`, the reference.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyMapping, PySequence, PyString};

use crate::canon::Text;
use crate::guard::{Action, Decision, Limits, Policy, Reason, Released, RunState};
use crate::key::{key_hex, Key};
use crate::py_canon::{canonical_key, text_of, wtf8_of, VolatileKeys};
use crate::py_json::{invalid_json_key, json_key};

/// The state keeps verdicts as plain Rust values: Python objects are only made once the
/// lock is released, because allocating one can start a garbage collection whose callbacks
/// run Python code, which may use this guard or hand the GIL to a thread that would then
/// wait on the lock while holding the GIL.
type State = RunState<Verdict, Py<PyAny>>;
type ToolPolicies = HashMap<Box<[u8]>, Policy>;

/// One call, validated and keyed, ready to be decided.
struct Prepared<'py> {
    name: Bound<'py, PyString>,
    key: Key,
    policy: Option<Policy>,
    call_id: Option<CallId>,
    invalid_arguments: Option<Py<PyString>>,
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
        // The tool name goes in as the Python str it is (it may hold lone surrogates).
        let (before, after) = match (self.action, self.reason) {
            (Action::Nudge, _) => (
                format!("This is the {} identical call to ", ordinal(self.repeats)),
                " with the same arguments. Do not repeat it. Either use different arguments, \
                 use a different tool, or report what you have so far."
                    .to_string(),
            ),
            (Action::Stop, Some(Reason::LoopDetected)) => (
                "Stopped (loop_detected): ".to_string(),
                format!(
                    " was called {} times with the same arguments within the last {} calls.",
                    self.repeats, self.window
                ),
            ),
            (Action::Stop, Some(Reason::BudgetExhausted)) => {
                let text = format!(
                    "Stopped (budget_exhausted): the budget of {} tool calls is spent.",
                    self.budget.as_deref().unwrap_or("None")
                );
                return Ok(Some(PyString::new(py, &text)));
            }
            _ => return Ok(None),
        };
        let parts = [
            PyString::new(py, &before),
            self.tool.bind(py).clone(),
            PyString::new(py, &after),
        ];
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
    /// Tool name (WTF-8) to policy.
    tools: ToolPolicies,
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
    // Past the checks, a window too large to allocate is an OverflowError, as for the
    // reference's deque; nudge_at and stop_at are at most window + 1, so they fit too.
    let window: usize = window.extract()?;
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

    fn policy_of(&self, name: &Bound<'_, PyString>) -> PyResult<Option<Policy>> {
        if self.tools.is_empty() {
            return Ok(None);
        }
        Ok(match text_of(name)? {
            Text::Latin1(bytes) if bytes.is_ascii() => self.tools.get(bytes).copied(),
            _ => self.tools.get(wtf8_of(name)?.as_slice()).copied(),
        })
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
        let name = name.cast::<PyString>()?.clone();
        let policy = self.policy_of(&name)?;
        Ok(Prepared {
            name,
            key,
            policy,
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
            Err(err) if err.is_instance_of::<PyValueError>(py) => (
                invalid_json_key(py, name, text)?,
                Some(err.value(py).str()?.unbind()),
            ),
            Err(err) => return Err(err),
        };
        let name = name.cast::<PyString>()?.clone();
        let policy = self.policy_of(&name)?;
        Ok(Prepared {
            name,
            key,
            policy,
            call_id,
            invalid_arguments,
        })
    }

    /// Decides one call with the state locked by the caller.
    fn decide_locked(
        &self,
        py: Python<'_>,
        state: &mut State,
        call: &Prepared<'_>,
        released: &mut Released<Verdict, Py<PyAny>>,
    ) -> Verdict {
        let Prepared {
            name,
            key,
            policy,
            call_id,
            invalid_arguments,
        } = call;
        let (key, policy, call_id) = (*key, *policy, call_id.as_ref());
        if let Some(known) = state.recall(call_id.map(|c| &*c.bytes)) {
            return known.duplicate(py);
        }
        let decision: Decision = state.decide(&self.limits, key);
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
        };
        let latched = (decision.action == Action::Stop).then(|| verdict.copy(py, None, None));
        let remembered = call_id.map(|c| (&*c.bytes, verdict.duplicate(py)));
        let mut more = state.commit(&self.limits, key, &decision, policy, latched, remembered);
        released.verdicts.append(&mut more.verdicts);
        released.results.append(&mut more.results);
        verdict
    }
}

/// A call id, as the Python str and as bytes to compare without Python.
struct CallId {
    object: Py<PyString>,
    bytes: Vec<u8>,
}

fn call_id_arg(call_id: Option<&Bound<'_, PyAny>>) -> PyResult<Option<CallId>> {
    match call_id {
        None => Ok(None),
        Some(obj) if obj.is_none() => Ok(None),
        Some(obj) => match obj.cast::<PyString>() {
            Ok(text) => Ok(Some(CallId {
                bytes: wtf8_of(text)?,
                object: text.clone().unbind(),
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
        let (tools, tools_repr) = tools_arg(py, tools)?;
        Ok(Guard {
            limits,
            volatile,
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
        let mut released = Released::default();
        let verdict = {
            let mut state = self.lock();
            self.decide_locked(py, &mut state, &call, &mut released)
        };
        drop(released);
        Py::new(py, verdict)
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
        let mut released = Released::default();
        let verdict = {
            let mut state = self.lock();
            self.decide_locked(py, &mut state, &call, &mut released)
        };
        drop(released);
        Py::new(py, verdict)
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
        let verdict = verdict.cast::<Verdict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "record() takes a Verdict, not {}",
                verdict
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        let verdict = verdict.get();
        if verdict.action != Action::Allow || result.is_none() {
            return Ok(());
        }
        if self.policy_of(verdict.tool.bind(py))? != Some(Policy::Read) {
            return Ok(());
        }
        let released = self
            .lock()
            .store_result(verdict.key, result.clone().unbind());
        drop(released);
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

/// Validates `tools=` as the reference does; returns the policies and their repr.
fn tools_arg(py: Python<'_>, tools: Option<&Bound<'_, PyAny>>) -> PyResult<(ToolPolicies, String)> {
    let mut policies = HashMap::new();
    let checked = PyDict::new(py);
    let Some(tools) = tools.filter(|t| !t.is_none()) else {
        return Ok((policies, "{}".to_string()));
    };
    let mapping = tools.cast::<PyMapping>().map_err(|_| {
        PyTypeError::new_err(format!(
            "tools must be a mapping of tool name to policy, not {}",
            tools
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    for item in mapping.items()?.iter() {
        let (tool, policy): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let Ok(tool_name) = tool.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "tool names in tools must be str, not {}",
                tool.get_type().name()?
            )));
        };
        let parsed = policy
            .cast::<PyString>()
            .ok()
            .and_then(|p| p.to_str().ok().and_then(Policy::parse));
        let Some(parsed) = parsed else {
            let expected: Vec<String> = Policy::NAMES.iter().map(|n| format!("'{n}'")).collect();
            return Err(PyValueError::new_err(format!(
                "unknown policy {} for tool {}: expected one of {}",
                policy.repr()?,
                tool.repr()?,
                expected.join(", ")
            )));
        };
        policies.insert(wtf8_of(tool_name)?.into_boxed_slice(), parsed);
        checked.set_item(tool_name, Policy::NAMES[parsed as usize])?;
    }
    Ok((policies, checked.repr()?.to_string()))
}
