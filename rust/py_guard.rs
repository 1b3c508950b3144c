//! `Guard` for Python (its `Verdict` is in `py_verdict.rs`), over the pyo3-free logic in
//! `guard.rs`. Behaviour mirrors `tripwire/_guard.py`, the reference; messages come from
//! `tripwire/_messages.py`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyDeprecationWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyList, PySequence, PyString};

use crate::canon;
use crate::guard::{
    Action, Decision, Detail, Limits, NameMap, Outcome, Policy, Question, Released, RunState,
    ToolRule,
};
use crate::key::{key_hex, Key};
use crate::py_canon::{ascii_of, canonical_key, text_of, wtf8_of, VolatileKeys};
use crate::py_json::{invalid_json, json_key};
use crate::py_reference::{native_call_key, reference, refused};
use crate::py_verdict::{Verdict, VerdictDetail};

/// The state keeps verdicts as plain Rust values: Python objects are only made once the
/// lock is released, because allocating one can start a garbage collection whose callbacks
/// run Python code, which may use this guard or hand the GIL to a thread that would then
/// wait on the lock while holding the GIL.
pub(crate) type State = RunState<Stored, Py<PyAny>, Py<PyString>>;
type Dropped = Released<Stored, Py<PyAny>, Py<PyString>>;

/// A verdict the run state keeps: the stop latch, and the call-id memory's.
pub(crate) enum Stored {
    /// Boxed: a call-id record stays small (a live verdict is about 200 bytes), so records
    /// are cheap to make and to restore, and the state's memory holds no more than it uses.
    Live(Box<Verdict>),
    /// Restored from a snapshot and not asked for since: its bytes as written, a range of
    /// the state's `restored` bytes, made into a `Verdict` only when a retried delivery (or
    /// a check after the stop) asks for it. Restoring a run then makes no Python object and
    /// copies no bytes per remembered call id (a fleet's worker restores the run on every
    /// check; a retried delivery is rare). Never one with a cached result: those are read
    /// whole, so that a bad one fails the restore.
    Encoded { at: usize, len: usize, step: u64 },
}

impl Stored {
    /// The verdict, as a new object with the same fields; `restored` is the state's.
    fn verdict(&self, py: Python<'_>, config: &GuardConfig, restored: &[u8]) -> PyResult<Verdict> {
        match self {
            Stored::Live(verdict) => Ok(verdict.duplicate(py)),
            Stored::Encoded { at, len, .. } => {
                crate::py_snapshot::decode_verdict(py, config, &restored[*at..*at + *len])
            }
        }
    }

    pub(crate) fn step(&self) -> u64 {
        match self {
            Stored::Live(verdict) => verdict.step,
            Stored::Encoded { step, .. } => *step,
        }
    }
}

/// What the hot path reads of a tool's policy: copied out of its [`ToolSpec`] where the
/// policy is looked up, so that a check takes no reference to the spec (an `Arc` clone and
/// drop are two atomic operations, a tenth of what the guard adds to a check).
#[derive(Clone, Copy)]
pub(crate) struct ToolFacts {
    /// `None`: no policy (a tool of unknown kind).
    pub(crate) rule: Option<ToolRule>,
    /// Its string arguments keep their whitespace in the key.
    pub(crate) keep_whitespace: bool,
    /// Declared `read`: its results may be served from the run's cache.
    cacheable: bool,
    /// Its results are judged by the built-in rules alone (no `empty` setting, no
    /// `volatile_result_keys`), so the commonest ones may take the short cut.
    pub(crate) plain_results: bool,
}

impl ToolFacts {
    /// A tool with no policy.
    const NONE: ToolFacts = ToolFacts {
        rule: None,
        keep_whitespace: false,
        cacheable: false,
        plain_results: true,
    };

    fn of(spec: Option<&ToolSpec>) -> ToolFacts {
        spec.map_or(ToolFacts::NONE, |s| s.facts)
    }
}

impl ToolFacts {
    /// The facts as one word (`LastTool`): `max_polls`, then the policy (0: none), then the
    /// three flags.
    fn pack(self) -> u64 {
        let (policy, max_polls) = match self.rule {
            None => (0u64, 0u32),
            Some(ToolRule { policy, max_polls }) => {
                let code = match policy {
                    Policy::Read => 1,
                    Policy::Write => 2,
                    Policy::Volatile => 3,
                    Policy::Poll => 4,
                    Policy::Shell => 5,
                };
                (code, max_polls)
            }
        };
        u64::from(max_polls)
            | policy << 32
            | u64::from(self.keep_whitespace) << 35
            | u64::from(self.cacheable) << 36
            | u64::from(self.plain_results) << 37
    }

    fn unpack(word: u64) -> ToolFacts {
        let policy = match (word >> 32) & 7 {
            1 => Some(Policy::Read),
            2 => Some(Policy::Write),
            3 => Some(Policy::Volatile),
            4 => Some(Policy::Poll),
            5 => Some(Policy::Shell),
            _ => None,
        };
        ToolFacts {
            rule: policy.map(|policy| ToolRule {
                policy,
                max_polls: word as u32,
            }),
            keep_whitespace: word >> 35 & 1 == 1,
            cacheable: word >> 36 & 1 == 1,
            plain_results: word >> 37 & 1 == 1,
        }
    }
}

/// The longest tool name `LastTool` keeps.
const LAST_TOOL_NAME: usize = 32;

/// One tool name and its facts, behind a sequence lock: read with plain loads (no atomic
/// read-modify-write, which a mutex costs), written only under the guard's
/// `last_tool_writer`, so by one writer at a time. A read that overlaps a write sees the
/// sequence number change, or odd, and goes the slow way.
#[derive(Default)]
struct LastTool {
    /// Even when stable, odd while a write is under way.
    seq: AtomicU64,
    /// The name's length; 0 until a name is kept (an empty one never is).
    len: AtomicU64,
    /// The name's bytes, zero-padded, eight to a word.
    words: [AtomicU64; LAST_TOOL_NAME / 8],
    facts: AtomicU64,
}

/// Up to eight bytes as a zero-padded little-endian word.
fn name_word(chunk: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..chunk.len()].copy_from_slice(chunk);
    u64::from_le_bytes(word)
}

impl LastTool {
    fn read(&self, name: &[u8]) -> Option<ToolFacts> {
        if name.is_empty() || name.len() > LAST_TOOL_NAME {
            return None;
        }
        let before = self.seq.load(Ordering::Acquire);
        if before & 1 == 1 || self.len.load(Ordering::Relaxed) != name.len() as u64 {
            return None;
        }
        let same = name
            .chunks(8)
            .zip(&self.words)
            .all(|(chunk, word)| word.load(Ordering::Relaxed) == name_word(chunk));
        let facts = self.facts.load(Ordering::Relaxed);
        // The loads above complete before the sequence is read again.
        std::sync::atomic::fence(Ordering::Acquire);
        (same && self.seq.load(Ordering::Relaxed) == before).then(|| ToolFacts::unpack(facts))
    }

    /// Keeps `name`'s facts; the caller holds the guard's `last_tool_writer`.
    fn write(&self, name: &[u8], facts: ToolFacts) {
        if name.is_empty() || name.len() > LAST_TOOL_NAME {
            return;
        }
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // The odd number is seen before any of the stores below.
        std::sync::atomic::fence(Ordering::Release);
        self.len.store(name.len() as u64, Ordering::Relaxed);
        let mut chunks = name.chunks(8);
        for word in &self.words {
            word.store(chunks.next().map_or(0, name_word), Ordering::Relaxed);
        }
        self.facts.store(facts.pack(), Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }
}

/// A tool's policy as the reference's `check_tools` validated it or its `infer_policy`
/// inferred it.
pub(crate) struct ToolSpec {
    pub(crate) facts: ToolFacts,
    /// The reference's policy object, for what only Python judges (results, `policy_of`).
    policy: Py<PyAny>,
}

pub(crate) type ToolSpecs = NameMap<Arc<ToolSpec>>;

/// The native core's one cache of inferred policies: what each tool name says (`None`: no
/// policy), shared by every guard, so that a guard made per run (replay) or restored per
/// check (Redis, a LangGraph checkpoint) does not ask Python again for each tool it meets.
/// The reference's twin is `tripwire._policy.policy_by_name`.
static BY_NAME: PyOnceLock<Mutex<NameMap<Option<Arc<ToolSpec>>>>> = PyOnceLock::new();

/// How many tool names' inferred policies are remembered (the reference's `INFERRED_TOOLS`:
/// tool names come from the model, so the memory is bounded; past it, a name is inferred
/// again each time it is met).
const INFERRED_TOOLS: usize = 1024;

/// What a tool's name says, by the reference's `infer_policy` (the one source of the
/// tables), once per name in the process ([`BY_NAME`]).
fn by_name(
    py: Python<'_>,
    name: &Bound<'_, PyString>,
    name_bytes: &[u8],
) -> PyResult<Option<Arc<ToolSpec>>> {
    let shared = || {
        BY_NAME
            .get_or_init(py, || Mutex::new(NameMap::default()))
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    if let Some(known) = shared().get(name_bytes).cloned() {
        return Ok(known);
    }
    // Inferred with no lock held: this runs Python code.
    let policy = reference(py)?
        .infer_policy
        .bind(py)
        .call1((name, PyDict::new(py)))?;
    let spec = if policy.is_none() {
        None
    } else {
        Some(Arc::new(spec_of_policy(policy)?))
    };
    let mut cache = shared();
    let replaced = if cache.len() < INFERRED_TOOLS {
        cache.insert(name_bytes.into(), spec.clone())
    } else {
        None
    };
    // Another thread's, inferred at the same time: dropped after the lock is released.
    drop(cache);
    drop(replaced);
    Ok(spec)
}

/// The policies of the tools that definitions annotate (`definitions` as the reference's
/// `check_definitions` made it: name to policy), resolved once per configuration.
pub(crate) fn annotated_specs(
    py: Python<'_>,
    definitions: &Bound<'_, PyAny>,
) -> PyResult<ToolSpecs> {
    let mut specs = NameMap::default();
    let infer = reference(py)?.infer_policy.bind(py);
    for name in definitions.cast::<PyDict>()?.keys() {
        let name = name.cast_into::<PyString>()?;
        let policy = infer.call1((&name, definitions))?;
        if !policy.is_none() {
            specs.insert(
                wtf8_of(&name)?.into_boxed_slice(),
                Arc::new(spec_of_policy(policy)?),
            );
        }
    }
    Ok(specs)
}

/// A tool name's WTF-8 bytes: the str's own characters where it is ASCII (nearly every
/// name, and then nothing is copied), else a copy.
fn name_bytes<'a>(name: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, [u8]>> {
    Ok(match ascii_of(name) {
        Some(bytes) => Cow::Borrowed(bytes),
        None => Cow::Owned(wtf8_of(name)?),
    })
}

/// One call, validated and keyed, ready to be decided.
pub(crate) struct Prepared<'py> {
    name: Bound<'py, PyString>,
    /// The name's WTF-8 bytes where it is not ASCII (see `Prepared::name_bytes`).
    wide_name: Option<Box<[u8]>>,
    pub(crate) key: Key,
    rule: Option<ToolRule>,
    cacheable: bool,
    plain_results: bool,
    call_id: Option<CallId>,
    pub(crate) invalid_arguments: Option<Py<PyString>>,
    /// What the call asks, where it was told (see `Guard::question`).
    question: Option<Question>,
    /// Its arguments, held by the state until its result is observed if its question was
    /// not told.
    args: Bound<'py, PyAny>,
    /// The arguments are JSON text.
    text: bool,
}

impl Prepared<'_> {
    /// The name's WTF-8 bytes: read from the str itself where it is ASCII.
    fn name_bytes(&self) -> &[u8] {
        match &self.wide_name {
            Some(bytes) => bytes,
            None => ascii_of(&self.name).unwrap_or_default(),
        }
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
    /// Shared by the guards restored from snapshots of one configuration (py_snapshot.rs).
    pub(crate) config: Arc<GuardConfig>,
    /// The facts of the undeclared tool last asked for, read without a lock (a check's
    /// every lock is two atomic operations, ~9 ns here; agents call one tool again and again).
    last_tool: LastTool,
    /// Taken to write `last_tool`, which has one writer at a time.
    last_tool_writer: Mutex<()>,
    pub(crate) state: Mutex<State>,
    /// The state's `wants` as it was when the lock was last let go (`Locked`): read before
    /// the lock is taken, to tell a call's question (which runs Python code) only where a
    /// rule may need it.
    wants: AtomicBool,
}

/// The run state, locked; when let go, it leaves whether a new call's question must be told
/// where a check can read it without the lock.
pub(crate) struct Locked<'a> {
    state: MutexGuard<'a, State>,
    wants: &'a AtomicBool,
}

impl Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Relaxed: a check that reads a stale value only tells a question it need not, or
        // leaves one untold (then the rules read the call as asking another question).
        self.wants.store(self.state.wants, Ordering::Relaxed);
    }
}

/// What a guard is made with, as checked by the reference's helpers.
pub(crate) struct GuardConfig {
    pub(crate) limits: Limits,
    pub(crate) volatile: Arc<VolatileKeys>,
    /// Declared policies, by tool name (WTF-8).
    pub(crate) tools: ToolSpecs,
    /// The same, as the reference's `check_tools` returned them (name: `ToolPolicy`).
    pub(crate) tools_checked: Py<PyDict>,
    pub(crate) tools_repr: String,
    /// Whether undeclared tools get an inferred policy.
    pub(crate) infer: bool,
    /// What `definitions=` said, as the reference's `check_definitions` made it.
    pub(crate) definitions: Py<PyAny>,
    /// The policies of the tools `definitions` annotates, by tool name (WTF-8).
    pub(crate) annotated: ToolSpecs,
    /// The guard's `max_steps` as the user wrote it, for messages.
    pub(crate) max_steps_text: Option<Arc<str>>,
    /// The configuration as a snapshot writes it, and its digest; made when first asked.
    pub(crate) written: std::sync::OnceLock<(Box<[u8]>, [u8; 8])>,
    /// Unique to this configuration in the process (never 0): see `Verdict::origin`.
    pub(crate) serial: u64,
}

/// A new `GuardConfig::serial`.
pub(crate) fn config_serial() -> u64 {
    static SERIALS: AtomicU64 = AtomicU64::new(1);
    SERIALS.fetch_add(1, Ordering::Relaxed)
}

/// Validates the numbers with the reference's own `check_limits` (one source of the rules
/// and messages), then converts them.
pub(crate) fn limits_arg<'py>(
    py: Python<'py>,
    window: Option<&Bound<'py, PyAny>>,
    nudge_at: Option<&Bound<'py, PyAny>>,
    stop_at: Option<&Bound<'py, PyAny>>,
    max_steps: Option<&Bound<'py, PyAny>>,
) -> PyResult<Limits> {
    let none = py.None().into_bound(py);
    let arg = |value: Option<&Bound<'py, PyAny>>| value.cloned().unwrap_or_else(|| none.clone());
    let (window, nudge_at, stop_at, max_steps) =
        (arg(window), arg(nudge_at), arg(stop_at), arg(max_steps));
    reference(py)?
        .check_limits
        .bind(py)
        .call1((&window, &nudge_at, &stop_at, &max_steps))?;
    let number = |value: &Bound<'py, PyAny>, default: usize| -> PyResult<usize> {
        if value.is_none() {
            return Ok(default);
        }
        // Past the checks, a window beyond a C ssize_t is an OverflowError, as for the
        // reference's deque; nudge_at and stop_at are at most window + 1, so they fit too.
        Ok(value.extract::<isize>()?.unsigned_abs())
    };
    let window = number(&window, 12)?;
    let nudge_at = number(&nudge_at, 2)?.try_into().unwrap_or(u32::MAX);
    let stop_at = number(&stop_at, 3)?.try_into().unwrap_or(u32::MAX);
    // Beyond 2^64 steps is no budget at all.
    let max_steps = (!max_steps.is_none()).then(|| max_steps.extract::<u64>().unwrap_or(u64::MAX));
    Ok(Limits {
        window,
        nudge_at,
        stop_at,
        max_steps,
    })
}

/// `f"{value}"`, as the reference's messages write numbers.
pub(crate) fn formatted(value: &Bound<'_, PyAny>) -> PyResult<String> {
    value.call_method1("__format__", ("",))?.extract::<String>()
}

/// A tool spec from the reference's `ToolPolicy` object.
fn spec_of_policy(policy: Bound<'_, PyAny>) -> PyResult<ToolSpec> {
    let kind: Option<String> = policy.getattr("kind")?.extract()?;
    let policy_kind = match kind.as_deref() {
        None => None,
        Some(name) => Some(
            Policy::parse(name)
                .ok_or_else(|| PyValueError::new_err(format!("unknown policy {name:?}")))?,
        ),
    };
    // Any number of polls the reference accepts; more than 2^32 is as good as no limit.
    let max_polls = policy
        .getattr("max_polls")?
        .extract::<u32>()
        .unwrap_or(u32::MAX);
    let whitespace: String = policy.getattr("whitespace")?.extract()?;
    let source: String = policy.getattr("source")?.extract()?;
    let empty_answers: bool = policy.getattr("empty_answers")?.extract()?;
    let empty_digests = policy.getattr("empty_digests")?.len()?;
    let result_keys = policy.getattr("volatile_result_keys")?.len()?;
    Ok(ToolSpec {
        facts: ToolFacts {
            rule: policy_kind.map(|policy| ToolRule { policy, max_polls }),
            keep_whitespace: whitespace == "keep",
            cacheable: policy_kind == Some(Policy::Read) && source == "declared",
            // A shell's results are never empty, and keys left out of a result change its
            // digest: the reference's reader decides those.
            plain_results: !empty_answers
                && empty_digests == 0
                && result_keys == 0
                && policy_kind != Some(Policy::Shell),
        },
        policy: policy.unbind(),
    })
}

impl Guard {
    pub(crate) fn with_config(config: Arc<GuardConfig>) -> Guard {
        Guard {
            config,
            last_tool: LastTool::default(),
            last_tool_writer: Mutex::new(()),
            state: Mutex::new(State::default()),
            wants: AtomicBool::new(false),
        }
    }

    pub(crate) fn lock(&self) -> Locked<'_> {
        // A panic cannot happen while the lock is held (no user data is unwrapped there), but
        // if one ever did, the state is still consistent at every await-free step: go on.
        let state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Locked {
            state,
            wants: &self.wants,
        }
    }

    /// What a call asks (the reference's `Guard._question`), told only while a result in
    /// the window came back empty or failed.
    fn question(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        args: &Bound<'_, PyAny>,
        text: bool,
    ) -> PyResult<Option<Question>> {
        if !self.wants.load(Ordering::Relaxed) {
            return Ok(None);
        }
        self.told_question(py, name, args, text)
    }

    /// Tells the questions of the calls whose arguments the state holds, and keeps them in
    /// their entries instead (before a snapshot: the reference's `_tell_questions`).
    pub(crate) fn tell_questions(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.lock().take_args();
        if taken.is_empty() {
            return Ok(());
        }
        let mut told = Vec::with_capacity(taken.len());
        for (step, key, tool, args, text) in &taken {
            let name = self.lock().tool_name(*tool).map(|n| n.clone_ref(py));
            let Some(name) = name else { continue };
            let question = self.told_question(py, name.bind(py), args.bind(py), *text)?;
            told.push((*step, *key, question));
        }
        let mut state = self.lock();
        for (step, key, question) in told {
            state.set_question(step, key, question);
        }
        drop(state);
        drop(taken);
        Ok(())
    }

    /// The reference's `question_of`, converted.
    pub(crate) fn told_question(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        args: &Bound<'_, PyAny>,
        text: bool,
    ) -> PyResult<Option<Question>> {
        let told = reference(py)?.question_of.bind(py).call1((
            name,
            args,
            text,
            self.config.volatile.set(py),
            native_call_key(py)?.bind(py),
        ))?;
        let told: Option<(String, String)> = told.extract()?;
        told.map(|(raw, shape)| {
            Ok(Question {
                raw: parse_digest(&raw)?,
                shape: parse_digest(&shape)?,
            })
        })
        .transpose()
    }

    /// The policy of a tool: declared, else (inferring) its definition's, resolved when
    /// the guard was made, else what its name says ([`by_name`]), else none.
    pub(crate) fn spec_of(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        name_bytes: &[u8],
    ) -> PyResult<Option<Arc<ToolSpec>>> {
        if !self.config.tools.is_empty() {
            if let Some(spec) = self.config.tools.get(name_bytes) {
                return Ok(Some(spec.clone()));
            }
        }
        if !self.config.infer {
            return Ok(None);
        }
        self.inferred_spec(py, name, name_bytes)
    }

    /// An undeclared tool's policy, where the guard infers: its definition's, else what its
    /// name says.
    fn inferred_spec(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        name_bytes: &[u8],
    ) -> PyResult<Option<Arc<ToolSpec>>> {
        if !self.config.annotated.is_empty() {
            if let Some(spec) = self.config.annotated.get(name_bytes) {
                return Ok(Some(spec.clone()));
            }
        }
        by_name(py, name, name_bytes)
    }

    /// What the hot path reads of a tool's policy (`spec_of`, without a reference to it).
    fn facts_of(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        name_bytes: &[u8],
    ) -> PyResult<ToolFacts> {
        if let Some(facts) = self.last_tool.read(name_bytes) {
            // Only an undeclared tool's are kept there, and declarations never change.
            return Ok(facts);
        }
        if !self.config.tools.is_empty() {
            if let Some(spec) = self.config.tools.get(name_bytes) {
                return Ok(spec.facts);
            }
        }
        if !self.config.infer {
            return Ok(ToolFacts::NONE);
        }
        let facts = ToolFacts::of(self.inferred_spec(py, name, name_bytes)?.as_deref());
        let writer = self
            .last_tool_writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.last_tool.write(name_bytes, facts);
        drop(writer);
        Ok(facts)
    }

    /// The key of a call of a tool whose string arguments keep their whitespace, by the
    /// reference's `verbatim_key` (these are the editing tools' calls, whose time goes to
    /// the edit; the native walker collapses as it writes).
    fn verbatim_key(
        &self,
        py: Python<'_>,
        helper: &Py<PyAny>,
        name: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
    ) -> PyResult<Key> {
        let hex: String = helper
            .bind(py)
            .call1((name, args, self.config.volatile.set(py)))?
            .extract()?;
        parse_digest(&hex)
    }

    /// Validates and keys one call (its arguments as JSON `text`, or a value); raises
    /// before anything changes. JSON text that does not parse keys the call by its collapsed
    /// raw text instead of raising, and says why (the reference's `_prepare`).
    pub(crate) fn prepare<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        args: &Bound<'py, PyAny>,
        call_id: Option<&Bound<'py, PyAny>>,
        text: bool,
    ) -> PyResult<Prepared<'py>> {
        let call_id = call_id_arg(call_id)?;
        let exact = exact_str(crate::py_canon::check_name(name)?)?;
        let name_bytes = name_bytes(&exact)?;
        let facts = self.facts_of(py, &exact, &name_bytes)?;
        let keep = facts.keep_whitespace;
        let (key, invalid_arguments) = if text {
            let keyed = if keep {
                self.verbatim_key(py, &reference(py)?.verbatim_key_json, name, args)
            } else {
                json_key(py, name, args, &self.config.volatile)
            };
            match keyed {
                Ok(key) => (key, None),
                Err(err) => {
                    let (key, why) = invalid_json(py, name, args, err, !keep)?;
                    (key, Some(why))
                }
            }
        } else if keep {
            let native = crate::py_canon::verbatim_key(py, name, args, &self.config.volatile)?;
            let key = match native {
                Some(key) => key,
                None => {
                    let helper = &reference(py)?.verbatim_key;
                    self.verbatim_key(py, helper, name, args)?
                }
            };
            (key, None)
        } else {
            (canonical_key(py, name, args, &self.config.volatile)?, None)
        };
        let question = self.question(py, &exact, args, text)?;
        let wide_name = match name_bytes {
            Cow::Borrowed(_) => None,
            Cow::Owned(bytes) => Some(bytes.into_boxed_slice()),
        };
        Ok(Prepared {
            name: exact,
            wide_name,
            key,
            rule: facts.rule,
            cacheable: facts.cacheable,
            plain_results: facts.plain_results,
            call_id,
            invalid_arguments,
            question,
            args: args.clone(),
            text,
        })
    }

    /// What a result of a call to `tool` says (`observe`'s reading of it; replay's Arrow
    /// core asks it of the results it does not read natively).
    pub(crate) fn outcome_of(
        &self,
        py: Python<'_>,
        tool: &Bound<'_, PyString>,
        result: &Bound<'_, PyAny>,
        error: Option<&Bound<'_, PyAny>>,
        transient: &Bound<'_, PyAny>,
        plain_results: Option<bool>,
    ) -> PyResult<Outcome<Py<PyString>>> {
        let told = error.is_some_and(|e| !e.is_none()) || !transient.is_none();
        let plain_results = match plain_results {
            Some(known) => known,
            None => self.facts_of(py, tool, &name_bytes(tool)?)?.plain_results,
        };
        // A result whose own methods raise while the fast path reads it goes to the full
        // rules, the reference's, which take it as unknown (a result is never raised).
        let plain = match plain_result(result) {
            Ok(plain) => plain,
            Err(err) if results_own(py, &err) => None,
            Err(err) => return Err(err),
        };
        match plain {
            Some(empty) if !told && plain_results => plain_outcome(py, result, empty),
            _ => {
                let spec = self.spec_of(py, tool, &name_bytes(tool)?)?;
                described_outcome(py, spec.as_deref(), result, error, transient)
            }
        }
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
        Py::new(py, verdict?)
    }

    /// Decides one call with the state locked by the caller.
    fn decide_locked(
        &self,
        py: Python<'_>,
        state: &mut State,
        call: &Prepared<'_>,
        released: &mut Dropped,
    ) -> PyResult<Verdict> {
        let name_bytes = call.name_bytes();
        let Prepared {
            name,
            wide_name: _,
            key,
            rule,
            cacheable,
            plain_results,
            call_id,
            invalid_arguments,
            question,
            args,
            text,
        } = call;
        let (key, rule, call_id, question) = (*key, *rule, call_id.as_ref(), *question);
        let policy = rule.map(|r| r.policy);
        if let Some(known) = state.recall(call_id.map(|c| c.bytes(py)), key) {
            return known.verdict(py, &self.config, &state.restored);
        }
        if let Some(stop) = state.stopped() {
            return Ok(stop.verdict(py, &self.config, &state.restored)?.after_stop(
                py,
                name,
                key,
                call_id.map(|c| c.object.clone_ref(py)),
                invalid_arguments.as_ref().map(|i| i.clone_ref(py)),
            ));
        }
        let tool = state.intern_tool(name_bytes, || name.clone().unbind());
        let decision: Decision = state.decide(&self.config.limits, key, rule, question);
        let error = |digest: &Key| match state.error_text(*digest) {
            Some(text) => text.clone_ref(py),
            None => PyString::new(py, "").unbind(),
        };
        let detail = match &decision.detail {
            Detail::Plain => VerdictDetail::Plain,
            Detail::Unchanged => VerdictDetail::Unchanged,
            Detail::Failed(digest, n) => VerdictDetail::Failed(error(digest), *n),
            Detail::Errors(n, digest) => VerdictDetail::Errors(*n, error(digest)),
            Detail::Empty(n, ids) => VerdictDetail::Empty(*n, names_of(py, state, ids)),
            Detail::PollLimit(n) => VerdictDetail::PollLimit(*n),
            Detail::Cycle(ids, writes) => VerdictDetail::Cycle(names_of(py, state, ids), *writes),
        };
        let cached = state
            .cached(&decision, *cacheable, key)
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
            window: self.config.limits.window,
            budget: self.config.max_steps_text.clone(),
            detail,
            origin: self.config.serial,
            plain_results: *plain_results,
        };
        let latched = (decision.action == Action::Stop)
            .then(|| Stored::Live(Box::new(verdict.copy(py, None, None))));
        let remembered =
            call_id.map(|c| (c.bytes(py), Stored::Live(Box::new(verdict.duplicate(py)))));
        // Held as given, with whether it is JSON text, for the question to be told from.
        let held = (question.is_none() && decision.action == Action::Allow)
            .then(|| (args.clone().unbind(), *text));
        state.commit_into(
            &self.config.limits,
            key,
            tool,
            &decision,
            policy,
            latched,
            remembered,
            question,
            held,
            released,
        );
        Ok(verdict)
    }
}

/// Whether a result is one of the commonest kinds that `observe` short-cuts, and if so
/// whether it is empty; `None`: the full rules apply (the reference's `describe_result`).
/// The native twin of the reference's `plain_result` (`tripwire/_results.py`, where the rule
/// is stated once), kept here because calling Python for it would cost observe about a
/// microsecond; `tests/test_plain_results.py` drives both across every edge of the rule. A
/// block's `"type"` is read as the reference's `_named` reads it: a str by its characters
/// (a subclass's `__eq__` is never asked), anything else names no block.
fn plain_result(result: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    if let Ok(list) = result.cast_exact::<PyList>() {
        // Asked first: `get_item` of an empty list makes an IndexError to throw away.
        if list.is_empty() {
            return Ok(Some(true));
        }
        let Ok(first) = list.get_item(0) else {
            return Ok(Some(true));
        };
        let Ok(block) = first.cast_exact::<PyDict>() else {
            return Ok(Some(false));
        };
        // Interned: a `&str` key would be made into a new str, and hashed, every time.
        let kind = pyo3::intern!(result.py(), "type");
        return Ok(match block.get_item(kind)? {
            Some(kind) if is_text_block(&kind)? => None,
            _ => Some(false),
        });
    }
    if let Ok(text) = result.cast_exact::<PyString>() {
        let Some(first) = text_of(text)?.code_points().next() else {
            return Ok(None);
        };
        let json_or_error = matches!(
            char::from_u32(first),
            Some('[' | '{' | '"' | 'n' | 'e' | 'E' | '<')
        );
        return Ok((!json_or_error && !canon::is_python_whitespace(first)).then_some(false));
    }
    Ok(None)
}

/// Whether a content block's `"type"` names a text block (the reference's `_TEXT_BLOCKS`):
/// a str, or a str subclass read by its characters without calling any of its methods.
fn is_text_block(kind: &Bound<'_, PyAny>) -> PyResult<bool> {
    let Ok(kind) = kind.cast::<PyString>() else {
        return Ok(false);
    };
    const NAMES: [&str; 3] = ["text", "input_text", "output_text"];
    let text = text_of(kind)?;
    Ok(NAMES
        .iter()
        .any(|name| text.code_points().eq(name.chars().map(u32::from))))
}

/// What a plain result says (see `plain_result`): its key, as the reference keys it (with
/// the default volatile keys; `None` where it cannot be keyed), and whether it is empty.
fn plain_outcome(
    py: Python<'_>,
    result: &Bound<'_, PyAny>,
    empty: bool,
) -> PyResult<Outcome<Py<PyString>>> {
    let name = pyo3::intern!(py, "result").as_any();
    let keyed = VolatileKeys::with_arg(py, None, |volatile| {
        canonical_key(py, name, result, volatile)
    });
    // As the reference's `digest`: any `Exception` of the result's own makes it unknown
    // (a result is never raised); `KeyboardInterrupt` and the like go through, and so does
    // `MemoryError` (running out of memory is not a result that cannot be keyed).
    let digest = match keyed {
        Ok(key) => Some(key),
        Err(err) if results_own(py, &err) => None,
        Err(err) => return Err(err),
    };
    Ok(Outcome {
        result: digest,
        empty: empty && digest.is_some(),
        failed: false,
        transient: false,
        error: None,
    })
}

/// Whether an error raised while a result was read is the result's own (an `Exception` of
/// its methods: the result is then unknown, never raised), as the reference's `digest` and
/// `describe_result` tell: `KeyboardInterrupt`, `SystemExit` and `MemoryError` are not.
fn results_own(py: Python<'_>, err: &PyErr) -> bool {
    err.is_instance_of::<pyo3::exceptions::PyException>(py)
        && !err.is_instance_of::<pyo3::exceptions::PyMemoryError>(py)
}

/// What a result says, by the reference's `describe_result` (one source of the rules): its
/// digest, whether it is empty, whether it failed (and how, transiently or not), and the
/// error's text.
fn described_outcome(
    py: Python<'_>,
    spec: Option<&ToolSpec>,
    result: &Bound<'_, PyAny>,
    error: Option<&Bound<'_, PyAny>>,
    transient: &Bound<'_, PyAny>,
) -> PyResult<Outcome<Py<PyString>>> {
    let none = py.None().into_bound(py);
    let policy = match spec {
        Some(spec) => spec.policy.bind(py).clone(),
        None => none.clone(),
    };
    let described = reference(py)?.describe_result.bind(py).call1((
        result,
        error.unwrap_or(&none),
        transient,
        policy,
        native_call_key(py)?.bind(py),
    ))?;
    let (digest, empty, failed, transient, text): (
        Option<String>,
        bool,
        bool,
        bool,
        Option<Py<PyString>>,
    ) = described.extract()?;
    Ok(Outcome {
        result: digest.as_deref().map(parse_digest).transpose()?,
        empty,
        failed,
        transient,
        error: text,
    })
}

/// A call id, as the Python str and as bytes to compare without Python.
struct CallId {
    object: Py<PyString>,
    /// Its WTF-8 bytes where it is not ASCII (see `CallId::bytes`).
    wide: Option<Vec<u8>>,
}

impl CallId {
    /// The id's WTF-8 bytes: read from the str itself where it is ASCII (providers' ids
    /// are), so that a check with an id copies none.
    fn bytes<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        match &self.wide {
            Some(bytes) => bytes,
            None => ascii_of(self.object.bind(py)).unwrap_or_default(),
        }
    }
}

/// The Verdict a method was given, or the TypeError the reference's `check_verdict` raises.
fn verdict_arg<'a>(method: &str, verdict: &'a Bound<'_, PyAny>) -> PyResult<&'a Verdict> {
    match verdict.cast::<Verdict>() {
        Ok(verdict) => Ok(verdict.get()),
        Err(_) => {
            let py = verdict.py();
            let kind = py.get_type::<Verdict>();
            let checked =
                reference(py).and_then(|r| r.check_verdict.bind(py).call1((method, verdict, kind)));
            Err(refused(checked, "a verdict"))
        }
    }
}

/// The TypeError the reference's `check_flag` raises for a keyword option that is no bool.
fn flag_refused(
    py: Python<'_>,
    name: &str,
    value: &Bound<'_, PyAny>,
    default: Option<bool>,
) -> PyErr {
    let checked = reference(py).and_then(|r| r.check_flag.bind(py).call1((name, value, default)));
    refused(checked, name)
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
    crate::key::parse_key_hex(hex).ok_or_else(|| PyValueError::new_err("malformed digest"))
}

fn call_id_arg(call_id: Option<&Bound<'_, PyAny>>) -> PyResult<Option<CallId>> {
    match call_id {
        None => Ok(None),
        Some(obj) if obj.is_none() => Ok(None),
        Some(obj) => match obj.cast::<PyString>() {
            Ok(text) => {
                let object = exact_str(text)?;
                let wide = match ascii_of(&object) {
                    Some(_) => None,
                    None => Some(wtf8_of(&object)?),
                };
                Ok(Some(CallId {
                    object: object.unbind(),
                    wide,
                }))
            }
            Err(_) => {
                let py = obj.py();
                let checked = reference(py).and_then(|r| r.check_call_id.bind(py).call1((obj,)));
                Err(refused(checked, "a call id"))
            }
        },
    }
}

#[pymethods]
impl Guard {
    #[new]
    #[pyo3(signature = (*, window = None, nudge_at = None, stop_at = None, volatile_keys = None, max_steps = None, tools = None, infer = None, definitions = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        window: Option<&Bound<'_, PyAny>>,
        nudge_at: Option<&Bound<'_, PyAny>>,
        stop_at: Option<&Bound<'_, PyAny>>,
        volatile_keys: Option<&Bound<'_, PyAny>>,
        max_steps: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        infer: Option<&Bound<'_, PyAny>>,
        definitions: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Guard> {
        let limits = limits_arg(py, window, nudge_at, stop_at, max_steps)?;
        let max_steps_text = match max_steps {
            Some(m) if !m.is_none() => Some(Arc::from(formatted(m)?)),
            _ => None,
        };
        let volatile = VolatileKeys::from_arg(py, volatile_keys)?;
        let (tools, tools_checked, tools_repr) = tools_arg(py, tools)?;
        // None means the default (True), as for the other options.
        let yes = PyBool::new(py, true).to_owned().into_any();
        let infer = infer.filter(|i| !i.is_none()).unwrap_or(&yes);
        let infer = infer
            .cast::<PyBool>()
            .map_err(|_| flag_refused(py, "infer", infer, Some(true)))?;
        let none = py.None().into_bound(py);
        let definitions = reference(py)?
            .check_definitions
            .bind(py)
            .call1((definitions.unwrap_or(&none),))?;
        Ok(Guard::with_config(Arc::new(GuardConfig {
            limits,
            volatile,
            tools,
            tools_checked,
            tools_repr,
            infer: infer.is_true(),
            annotated: annotated_specs(py, &definitions)?,
            definitions: definitions.unbind(),
            max_steps_text,
            written: std::sync::OnceLock::new(),
            serial: config_serial(),
        })))
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
        let call = self.prepare(py, name, args, call_id, false)?;
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
        let call = self.prepare(py, name, text, call_id, true)?;
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
                let checked =
                    reference(py).and_then(|r| r.unpack_call.bind(py).call1((index, &call)));
                return Err(refused(checked, "a call of the turn"));
            };
            let name = seq.get_item(0)?;
            let args = seq.get_item(1)?;
            let call_id = if len == 3 {
                Some(seq.get_item(2)?)
            } else {
                None
            };
            // Arguments as text are JSON text (OpenAI-style), keyed as `check_json` keys them.
            let is_text = args.is_instance_of::<PyString>()
                || args.is_instance_of::<pyo3::types::PyBytes>()
                || args.is_instance_of::<pyo3::types::PyByteArray>();
            prepared.push(self.prepare(py, &name, &args, call_id.as_ref(), is_text)?);
        }
        let mut released = Released::default();
        let mut verdicts: Vec<Verdict> = Vec::with_capacity(prepared.len());
        {
            let mut state = self.lock();
            let mut first_of_key: HashMap<Key, usize> = HashMap::new();
            for (index, call) in prepared.iter().enumerate() {
                let earlier = first_of_key.get(&call.key).copied();
                let call_id = call.call_id.as_ref();
                let retried = call_id.is_some_and(|c| state.retried(c.bytes(py), call.key));
                match earlier {
                    Some(first) if !retried => {
                        let copy = verdicts[first].copy(
                            py,
                            call_id.map(|c| c.object.clone_ref(py)),
                            Some(first),
                        );
                        if let Some(c) = call_id {
                            let step = copy.step;
                            let answered = copy.action == Action::Nudge;
                            let remembered = Stored::Live(Box::new(copy.duplicate(py)));
                            state.remember(
                                c.bytes(py),
                                call.key,
                                step,
                                remembered,
                                answered,
                                &mut released,
                            );
                        }
                        verdicts.push(copy);
                    }
                    _ => {
                        first_of_key.entry(call.key).or_insert(index);
                        verdicts.push(self.decide_locked(py, &mut state, call, &mut released)?);
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

    /// Keeps the result of an allowed call to a tool declared `read` in the run's read cache
    /// (see the reference's `keep`).
    #[pyo3(signature = (verdict, result, /))]
    fn keep(
        &self,
        py: Python<'_>,
        verdict: &Bound<'_, PyAny>,
        result: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let verdict = verdict_arg("keep", verdict)?;
        if verdict.action != Action::Allow || result.is_none() {
            return Ok(());
        }
        let tool = name_bytes(verdict.tool.bind(py))?;
        if !self
            .config
            .tools
            .get(&*tool)
            .is_some_and(|s| s.facts.cacheable)
        {
            return Ok(());
        }
        let released = self
            .lock()
            .store_result(verdict.key, result.clone().unbind());
        drop(released);
        Ok(())
    }

    /// Deprecated: `keep`, under its old name. The warning's text is the reference's
    /// `DEPRECATED_RECORD` (tests/test_guard.py checks they agree).
    #[pyo3(signature = (verdict, result, /))]
    fn record(
        &self,
        py: Python<'_>,
        verdict: &Bound<'_, PyAny>,
        result: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        PyErr::warn(
            py,
            &py.get_type::<PyDeprecationWarning>(),
            c"Guard.record() is deprecated: use Guard.keep(), which does the same",
            1,
        )?;
        self.keep(py, verdict, result)
    }

    /// Tells the guard what an allowed call returned (see the reference's `observe`).
    #[pyo3(signature = (verdict, result, /, *, error = None, transient = None))]
    fn observe(
        &self,
        py: Python<'_>,
        verdict: &Bound<'_, PyAny>,
        result: &Bound<'_, PyAny>,
        error: Option<&Bound<'_, PyAny>>,
        transient: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let verdict = verdict_arg("observe", verdict)?;
        let none = py.None().into_bound(py);
        let transient = transient.unwrap_or(&none);
        if !transient.is_none() && !transient.is_instance_of::<PyBool>() {
            return Err(flag_refused(py, "transient", transient, None));
        }
        if verdict.action != Action::Allow {
            return Ok(());
        }
        let tool = verdict.tool.bind(py);
        // The policy as the check found it, if this guard's configuration made the verdict.
        let known = (verdict.origin == self.config.serial).then_some(verdict.plain_results);
        let outcome = self.outcome_of(py, tool, result, error, transient, known)?;
        let call_id = match &verdict.call_id {
            Some(id) => Some(name_bytes(id.bind(py))?),
            None => None,
        };
        let mut released = Released::default();
        let ask = self.lock().observe_into(
            verdict.step,
            verdict.key,
            call_id.as_deref(),
            outcome,
            &mut released,
        );
        drop(released);
        // What the call asked, told outside the lock (it reads the harness's objects) from
        // the arguments held since the check.
        let Some(Some((args, text))) = ask else {
            return Ok(());
        };
        let question = self.told_question(py, tool, args.bind(py), text)?;
        self.lock()
            .set_question(verdict.step, verdict.key, question);
        Ok(())
    }

    /// A human message arrived (see the reference's `user_message`).
    fn user_message(&self) {
        self.lock().user_message();
    }

    /// The policy the guard uses for a tool, and where it comes from.
    #[pyo3(signature = (name, /))]
    fn policy_of<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let name = exact_str(crate::py_canon::check_name(name)?)?;
        let spec = self.spec_of(py, &name, &name_bytes(&name)?)?;
        Ok(match spec {
            Some(spec) => (
                spec.policy.bind(py).getattr("kind")?,
                spec.policy.bind(py).getattr("source")?,
            ),
            None => (py.None().into_bound(py), py.None().into_bound(py)),
        })
    }

    /// The guard as bytes (the format: `tripwire/_snapshot.py`); `state_only`: the run
    /// state and the configuration's digest, for `load` into a guard made alike.
    #[pyo3(signature = (*, state_only = None))]
    fn snapshot<'py>(
        &self,
        py: Python<'py>,
        state_only: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let state_only = match state_only {
            None => false,
            Some(flag) => flag
                .cast::<PyBool>()
                .map(|b| b.is_true())
                .map_err(|_| flag_refused(py, "state_only", flag, Some(false)))?,
        };
        crate::py_snapshot::snapshot(py, self, state_only)
    }

    /// The guard a `snapshot()` was taken of, mid-run.
    #[staticmethod]
    #[pyo3(signature = (data, /))]
    fn from_snapshot(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Guard> {
        crate::py_snapshot::from_snapshot(py, data)
    }

    /// Replaces the run state with a snapshot's, of a guard with the same configuration.
    #[pyo3(signature = (data, /))]
    fn load(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        crate::py_snapshot::load(py, self, data)
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, pyo3::types::PyBytes>,))> {
        let restore = slf.get_type().getattr("from_snapshot")?;
        let data = crate::py_snapshot::snapshot(slf.py(), slf.get(), false)?;
        Ok((restore, (data,)))
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
        let max_steps = self.config.max_steps_text.as_deref().unwrap_or("None");
        let infer = if self.config.infer { "True" } else { "False" };
        format!(
            "Guard(window={}, nudge_at={}, stop_at={}, max_steps={max_steps}, tools={}, \
             infer={infer}, steps={})",
            self.config.limits.window,
            self.config.limits.nudge_at,
            self.config.limits.stop_at,
            self.config.tools_repr,
            self.steps()
        )
    }
}

/// Validates `tools=` with the reference's own `check_tools` (one set of rules and
/// messages), and takes the policies it returns; also their repr.
fn tools_arg(
    py: Python<'_>,
    tools: Option<&Bound<'_, PyAny>>,
) -> PyResult<(ToolSpecs, Py<PyDict>, String)> {
    let tools = match tools {
        Some(t) if !t.is_none() => t.clone(),
        _ => {
            return Ok((
                NameMap::default(),
                PyDict::new(py).unbind(),
                "{}".to_string(),
            ))
        }
    };
    let (checked, shown): (Bound<'_, PyDict>, String) = reference(py)?
        .check_tools
        .bind(py)
        .call1((tools,))?
        .extract()?;
    Ok((specs_of(&checked)?, checked.unbind(), shown))
}

/// Tool specs from a dict of the reference's `ToolPolicy` objects by tool name.
pub(crate) fn specs_of(checked: &Bound<'_, PyDict>) -> PyResult<ToolSpecs> {
    let mut specs = NameMap::default();
    for (name, policy) in checked.iter() {
        let name = name.cast_into::<PyString>()?;
        specs.insert(
            wtf8_of(&name)?.into_boxed_slice(),
            Arc::new(spec_of_policy(policy)?),
        );
    }
    Ok(specs)
}
