//! The guard's decision logic (docs/design/guard.md), free of Python: the window of recent calls,
//! the step count, the stop latch, the call-id memory, the read-result cache, and what the
//! observed results say about progress (issue #6; `tripwire/_guard.py` documents the rules
//! and is the reference this mirrors).
//!
//! Verdicts (`V`), cached results (`R`) and tool names (`N`) are opaque here, so the Python
//! layer can keep its own objects in them. Anything the state lets go of is handed back as [`Released`] rather
//! than dropped in place: dropping a Python object can run arbitrary Python code, which must
//! not happen while the caller holds the guard's lock.

use std::collections::{HashMap, VecDeque};

use smallvec::SmallVec;

use crate::key::Key;

pub use crate::call_ids::CALL_ID_MEMORY;
pub(crate) use crate::call_ids::{CallIds, Remembered};
pub use crate::counts::{Counts, COUNTED_CALLS};
pub use crate::name_map::{Fnv, NameMap};

/// How many read results a guard keeps; the oldest go first.
pub const CACHE_ENTRIES: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Allow,
    Nudge,
    Stop,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Nudge => "nudge",
            Action::Stop => "stop",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    LoopDetected,
    BudgetExhausted,
    NoProgress,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::LoopDetected => "loop_detected",
            Reason::BudgetExhausted => "budget_exhausted",
            Reason::NoProgress => "no_progress",
        }
    }
}

/// What a verdict's message is about, beyond its action and reason (the reference's
/// `Detail` tuples; the texts are written once, in Python).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Nothing observed that the message could say.
    Plain,
    /// The repeats' results were observed, and two or more were equal.
    Unchanged,
    /// The repeats failed: this many of them with the error whose digest this is
    /// ([`RunState::error_text`] has its text).
    Failed(Key, u32),
    /// This many calls in a row to the call's tool failed with this error.
    Errors(u32, Key),
    /// This many calls in a row to these tools (ids, in order) came back empty.
    Empty(u32, Vec<u32>),
    /// The last calls went twice round a cycle of these tools (ids from `intern_tool`);
    /// `true` when it mixes writes and reads: only the writes' results had to be the same.
    Cycle(Vec<u32>, bool),
    /// A poll tool reached this limit.
    PollLimit(u32),
}

/// Tool names a run keeps beyond twice its window's before it forgets those no entry holds
/// (`RunState::forget_tools`).
pub const TOOL_NAMES_SLACK: usize = 256;

/// How many times a run may repeat one call to a poll tool, unless its policy says.
pub const DEFAULT_MAX_POLLS: u32 = 20;

/// What the decision needs to know of a call's tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolRule {
    pub policy: Policy,
    pub max_polls: u32,
}

/// A tool's policy, declared beside the tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Its results may be served from the run's cache.
    Read,
    /// Changes the world: never cached, and makes every cached read stale.
    Write,
    /// A read whose answer moves faster than a run (builds, queues, live metrics): never cached.
    Volatile,
    /// A volatile read that is meant to be repeated while waiting: never a loop, up to a
    /// number of polls a run.
    Poll,
    /// Runs a command whose output, whatever its exit status, is its answer (the reference
    /// reads its results so); otherwise judged as a tool with no policy.
    Shell,
}

impl Policy {
    pub fn parse(name: &str) -> Option<Policy> {
        match name {
            "read" => Some(Policy::Read),
            "write" => Some(Policy::Write),
            "volatile" => Some(Policy::Volatile),
            "poll" => Some(Policy::Poll),
            "shell" => Some(Policy::Shell),
            _ => None,
        }
    }
}

/// How many transient failures of one call a run may retry before they count as repeats.
pub const TRANSIENT_RETRIES: u32 = 3;

/// The numbers a guard is configured with. Validated by the Python layer
/// (`tripwire._checks.check_limits`, the one source of those checks and their messages):
/// `window >= 1`, `2 <= nudge_at <= stop_at <= window + 1`, `max_steps >= 1`.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub window: usize,
    pub nudge_at: u32,
    pub stop_at: u32,
    pub max_steps: Option<u64>,
}

/// What the counts say about one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub reason: Option<Reason>,
    pub repeats: u32,
    pub step: u64,
    pub detail: Detail,
}

/// Objects the state let go of, to be dropped by the caller once its lock is released.
/// Results are kept inline: in a steady state, every allowed check lets go of the arguments
/// the window's oldest call was holding, and a check should not allocate for that.
pub struct Released<V, R, N> {
    pub verdicts: Vec<V>,
    pub results: SmallVec<[R; 2]>,
    pub names: Vec<N>,
}

impl<V, R, N> Default for Released<V, R, N> {
    fn default() -> Self {
        Released {
            verdicts: Vec::new(),
            results: SmallVec::new(),
            names: Vec::new(),
        }
    }
}

impl<V, R, N> Released<V, R, N> {
    pub fn absorb(&mut self, mut other: Released<V, R, N>) {
        // Nearly always empty: skip the (non-inlined) copies then.
        if !other.verdicts.is_empty() {
            self.verdicts.append(&mut other.verdicts);
        }
        if !other.results.is_empty() {
            self.results.append(&mut other.results);
        }
        if !other.names.is_empty() {
            self.names.append(&mut other.names);
        }
    }
}

/// What a call asks (the reference's `tripwire._question`, which computes it): the digests
/// of its raw arguments and of its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Question {
    pub raw: Key,
    pub shape: Key,
}

/// Whether two calls ask the same question (the reference's `same_question`); unknown is
/// not the same.
fn same_question(a: Option<Question>, b: Option<Question>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.shape == b.shape)
}

/// What came after a nudge in a run of empty results or of one error (the reference's
/// `AfterNudge`): no nudge; its newest call was nudged (this one runs, to show whether the
/// nudge was ignored); or a call came back after the nudge and kept the run going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterNudge {
    None,
    Pending,
    Shown,
}

/// A tool that may change the world when it runs: a write, a shell, or one with no policy.
fn may_change(policy: Option<Policy>) -> bool {
    matches!(policy, None | Some(Policy::Write | Policy::Shell))
}

/// One call in the window (the reference's `_Entry`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) key: Key,
    pub(crate) tool: u32,
    pub(crate) step: u64,
    /// The user turn it was made in ([`RunState::user_message`]).
    pub(crate) turn: u32,
    /// Nudged: it never ran.
    pub(crate) nudged: bool,
    /// An allowed call to a `write` tool.
    pub(crate) writes: bool,
    /// An allowed call that may change the world: a write, or a tool with no policy.
    pub(crate) changes: bool,
    /// Once observed: the result's key (a failure's is its error text's), whether it was
    /// empty, whether it failed, and whether that failure was a transient one that a retry
    /// need not answer for.
    pub(crate) result: Option<Key>,
    pub(crate) empty: bool,
    pub(crate) failed: bool,
    pub(crate) retry: bool,
    /// What it asks, once told (see the reference's `_Entry`).
    pub(crate) question: Option<Question>,
}

impl Entry {
    /// Came back empty, or failed for good: what the rules over varied arguments read.
    pub(crate) fn marked(&self) -> bool {
        self.empty || (self.failed && !self.retry)
    }

    /// A failed call whose raw arguments differ from this call's: a correction.
    fn corrected(&self, question: Option<Question>) -> bool {
        self.failed && matches!((self.question, question), (Some(a), Some(b)) if a.raw != b.raw)
    }

    /// May have changed the world: a write that did not fail, or a tool of unknown kind (a
    /// shell command that fails may still have written files).
    fn changed(&self) -> bool {
        self.changes && !(self.writes && self.failed)
    }
}

/// What `observe` learnt of a result (the reference's `describe_result`).
pub struct Outcome<N> {
    /// `None`: the result could not be keyed, so nothing is known of it.
    pub result: Option<Key>,
    pub empty: bool,
    pub failed: bool,
    pub transient: bool,
    /// A failure's text, kept for messages.
    pub error: Option<N>,
}

/// What `observe` hands back of a call whose question is to be told: its held arguments and
/// whether they are JSON text, if the state held them.
pub type Held<R> = Option<(R, bool)>;

/// One run's state. Nothing is allocated until the first call.
pub struct RunState<V, R, N> {
    pub(crate) window: VecDeque<Entry>,
    pub(crate) steps: u64,
    pub(crate) stopped: Option<V>,
    /// The verdict given to each recent call id (the reference's `_Remembered`).
    pub(crate) call_ids: CallIds<V>,
    /// The part of the snapshot this state was restored from that its verdicts kept as
    /// bytes refer to (the stop latch and the call-id memory's): one copy for all of them,
    /// so a verdict kept so is a range, not bytes of its own.
    pub(crate) restored: Box<[u8]>,
    pub(crate) cache: HashMap<Key, R>,
    pub(crate) cache_order: VecDeque<Key>,
    /// Checks of each poll tool's call so far this run (not only in the window), and
    /// transient failures of each call: [`Counts`] (bounded).
    pub(crate) polls: Counts,
    pub(crate) retries: Counts,
    /// User messages so far this run.
    pub(crate) turn: u32,
    /// The texts of the failures in the window, by their digest, for messages.
    pub(crate) error_texts: HashMap<Key, N>,
    /// Whether any result was observed this run: until one is, the verdicts are the
    /// hash-only ones and the progress checks are skipped (the common, cheapest path).
    pub(crate) observed: bool,
    /// Tool names seen this run, by id: entries hold ids, messages need names.
    pub(crate) tool_ids: NameMap<u32>,
    pub(crate) tool_names: Vec<N>,
    /// Names by id (the map's keys, again), and the last tool interned: agents call the
    /// same tool again and again, and a comparison is cheaper than hashing.
    pub(crate) tool_bytes: Vec<Box<[u8]>>,
    pub(crate) last_tool: Option<u32>,
    /// The arguments of allowed calls whose results are not observed yet, by step (as the
    /// harness's objects, and whether they are JSON text: the caller tells their question if
    /// a result comes back empty or failed). At most one per entry in the window.
    pub(crate) args: VecDeque<(u64, R, bool)>,
    /// Whether a new call's question must be told: a result in the window came back empty
    /// or failed (the reference's `_wants_question`).
    pub(crate) wants: bool,
}

impl<V, R, N> Default for RunState<V, R, N> {
    fn default() -> Self {
        RunState {
            window: VecDeque::new(),
            steps: 0,
            stopped: None,
            call_ids: CallIds::default(),
            restored: Box::default(),
            cache: HashMap::new(),
            cache_order: VecDeque::new(),
            polls: Counts::default(),
            retries: Counts::default(),
            turn: 0,
            error_texts: HashMap::new(),
            observed: false,
            tool_ids: NameMap::default(),
            tool_names: Vec::new(),
            tool_bytes: Vec::new(),
            last_tool: None,
            args: VecDeque::new(),
            wants: false,
        }
    }
}

/// What the reference's `_repeats` says of a call: its occurrences since the last change,
/// this one included; how many count toward a nudge or a stop; and what the message may say.
struct Repeats {
    count: u32,
    counted: u32,
    detail: Detail,
}

impl<V, R, N> RunState<V, R, N> {
    /// The verdict a retried delivery gets: the one given to the same call id for the same
    /// call, still unanswered.
    pub fn recall(&self, call_id: Option<&[u8]>, key: Key) -> Option<&V> {
        call_id
            .and_then(|id| self.call_ids.get(id))
            .filter(|r| r.key == key && !r.answered)
            .map(|r| &r.verdict)
    }

    /// The stop the run ended with, if it has.
    pub fn stopped(&self) -> Option<&V> {
        self.stopped.as_ref()
    }

    /// True when this call id was given to this very call, still unanswered: a retried
    /// delivery.
    pub fn retried(&self, call_id: &[u8], key: Key) -> bool {
        self.call_ids
            .get(call_id)
            .is_some_and(|r| r.key == key && !r.answered)
    }

    /// The id of a tool, by its name's bytes; `name` makes its handle the first time.
    pub fn intern_tool(&mut self, bytes: &[u8], name: impl FnOnce() -> N) -> u32 {
        if let Some(id) = self.last_tool {
            if *self.tool_bytes[id as usize] == *bytes {
                return id;
            }
        }
        let id = match self.tool_ids.get(bytes) {
            Some(&id) => id,
            None => {
                let id = self.tool_names.len() as u32;
                self.tool_ids.insert(bytes.into(), id);
                self.tool_bytes.push(bytes.into());
                self.tool_names.push(name());
                id
            }
        };
        self.last_tool = Some(id);
        id
    }

    /// The handle of a tool id from `intern_tool`.
    pub fn tool_name(&self, id: u32) -> Option<&N> {
        self.tool_names.get(id as usize)
    }

    /// The text of a failure in the window, by its digest.
    pub fn error_text(&self, digest: Key) -> Option<&N> {
        self.error_texts.get(&digest)
    }

    /// Says what to do with a call; changes nothing. `rule` is `None` for a tool with no
    /// policy (of unknown kind); `question`: what the call asks, where it was told (while a
    /// result in the window is empty or failed: [`RunState::wants`]).
    pub fn decide(
        &self,
        limits: &Limits,
        key: Key,
        rule: Option<ToolRule>,
        question: Option<Question>,
    ) -> Decision {
        // Saturates, as the reference's does (a restored state can be at 2^64 - 1).
        let step = self.steps.saturating_add(1);
        // Past 2^64 - 1 steps, as past a budget, every check stops (the reference's `_judge`).
        let over_budget =
            self.steps == u64::MAX || limits.max_steps.is_some_and(|budget| self.steps >= budget);
        let decision = |action, reason, repeats, detail| Decision {
            action,
            reason,
            repeats,
            step,
            detail,
        };
        if let Some(ToolRule {
            policy: Policy::Poll,
            max_polls,
        }) = rule
        {
            let polls = self.polls.get(key).saturating_add(1);
            return if polls > max_polls {
                decision(
                    Action::Stop,
                    Some(Reason::LoopDetected),
                    polls,
                    Detail::PollLimit(max_polls),
                )
            } else if over_budget {
                decision(
                    Action::Stop,
                    Some(Reason::BudgetExhausted),
                    polls,
                    Detail::Plain,
                )
            } else {
                decision(Action::Allow, None, polls, Detail::Plain)
            };
        }
        if !self.observed {
            // No results yet: the hash-only verdict.
            let repeats = self.window.iter().filter(|e| e.key == key).count() as u32 + 1;
            let (action, reason) = if repeats >= limits.stop_at {
                (Action::Stop, Some(Reason::LoopDetected))
            } else if over_budget {
                (Action::Stop, Some(Reason::BudgetExhausted))
            } else if repeats >= limits.nudge_at {
                (Action::Nudge, None)
            } else {
                (Action::Allow, None)
            };
            return decision(action, reason, repeats, Detail::Plain);
        }
        self.decide_observed(limits, key, rule, question, step, over_budget)
    }

    /// `decide` once results are observed: the progress-aware rules. Not inlined, so that
    /// the hash-only path stays small and its code the same whatever these rules become
    /// (an edit here moved the allow path's time by a tenth, through its layout alone).
    #[inline(never)]
    fn decide_observed(
        &self,
        limits: &Limits,
        key: Key,
        rule: Option<ToolRule>,
        question: Option<Question>,
        step: u64,
        over_budget: bool,
    ) -> Decision {
        let decision = |action, reason, repeats, detail| Decision {
            action,
            reason,
            repeats,
            step,
            detail,
        };
        let policy = rule.map(|r| r.policy);
        let Repeats {
            count: repeats,
            counted,
            detail,
        } = self.repeats(limits, key, question, policy);
        let (fruitless, after_nudge, fruitless_detail) = self.fruitless_run(question);
        if counted >= limits.stop_at {
            return decision(Action::Stop, Some(Reason::LoopDetected), repeats, detail);
        }
        if let Some((tools, writes)) = self.cycle(key) {
            let detail = Detail::Cycle(tools, writes);
            return decision(Action::Stop, Some(Reason::NoProgress), repeats, detail);
        }
        if fruitless > limits.stop_at && after_nudge == AfterNudge::Shown {
            return decision(
                Action::Stop,
                Some(Reason::NoProgress),
                repeats,
                fruitless_detail,
            );
        }
        if over_budget {
            return decision(
                Action::Stop,
                Some(Reason::BudgetExhausted),
                repeats,
                Detail::Plain,
            );
        }
        if counted >= limits.nudge_at {
            return decision(Action::Nudge, None, repeats, detail);
        }
        if fruitless > limits.nudge_at && after_nudge != AfterNudge::Pending {
            return decision(Action::Nudge, None, repeats, fruitless_detail);
        }
        decision(Action::Allow, None, repeats, Detail::Plain)
    }

    /// The reference's `_repeats`: see its docstring for the rules.
    fn repeats(
        &self,
        limits: &Limits,
        key: Key,
        question: Option<Question>,
        policy: Option<Policy>,
    ) -> Repeats {
        // The newest earlier occurrence with a result, counting those without one on the
        // way: one pass, where a call with no earlier occurrence (most calls) reads the
        // window once.
        let mut unobserved = 0u32;
        let mut latest = None;
        for e in self.window.iter().rev() {
            if e.key == key && !e.retry && !e.corrected(question) {
                if e.result.is_some() {
                    latest = Some(e);
                    break;
                }
                unobserved += 1;
            }
        }
        let Some(latest) = latest else {
            let count = unobserved + 1;
            return Repeats {
                count,
                counted: count,
                detail: Detail::Plain,
            };
        };
        let (mut same, mut nudged) = (0u32, 0u32);
        let mut newest_nudged: Option<bool> = None;
        for entry in self.window.iter().rev() {
            if entry.key != key {
                if entry.changed() {
                    break;
                }
                continue;
            }
            if entry.retry || entry.corrected(question) {
                continue;
            }
            newest_nudged.get_or_insert(entry.nudged);
            if entry.nudged {
                nudged += 1;
                continue;
            }
            if entry.result.is_some_and(|r| Some(r) != latest.result) {
                break;
            }
            if entry.turn != self.turn && !latest.failed {
                break;
            }
            same += u32::from(entry.result.is_some());
        }
        let detail = match latest.result {
            Some(error) if latest.failed => Detail::Failed(error, same),
            _ if same >= 2 => Detail::Unchanged,
            _ => Detail::Plain,
        };
        let counted = if nudged == 0 {
            // A shell or a tool with no policy may change the world itself: its first repeat
            // is run and judged by its result.
            same + 1 - u32::from(matches!(policy, None | Some(Policy::Shell)))
        } else if policy == Some(Policy::Write) || same >= limits.stop_at - 1 {
            limits.stop_at
        } else if newest_nudged == Some(true) {
            0
        } else {
            (same + 1).max(limits.nudge_at)
        };
        Repeats {
            count: same + nudged + 1,
            counted,
            detail,
        }
    }

    /// The run of empty results, or else of one error, that a call asking `question` would
    /// extend (see the reference): how many results it holds, what came after a nudge in it,
    /// and the message detail.
    fn fruitless_run(&self, question: Option<Question>) -> (u32, AfterNudge, Detail) {
        let empty = self.empty_run(question);
        if empty.0 > 0 {
            return empty;
        }
        self.error_run(question)
    }

    /// How many calls at the end of the window `fits` or were nudged, back to the last user
    /// message, each asking the same question as `question` or as a later call of the run.
    fn tail_len(&self, question: Option<Question>, fits: impl Fn(&Entry) -> bool) -> usize {
        let mut asked: SmallVec<[Option<Question>; 16]> = SmallVec::new();
        asked.push(question);
        for entry in self.window.iter().rev() {
            if entry.turn != self.turn || !(entry.nudged || fits(entry)) {
                break;
            }
            if !asked
                .iter()
                .any(|&other| same_question(entry.question, other))
            {
                break;
            }
            asked.push(entry.question);
        }
        asked.len() - 1
    }

    /// The reference's `_run_counts`: the results of the run's calls that ran, and what
    /// came after a nudge in it.
    fn run_counts<'a>(run: impl DoubleEndedIterator<Item = &'a Entry>) -> (u32, AfterNudge) {
        let (mut results, mut nudged_at) = (0u32, None);
        for (i, entry) in run.rev().enumerate() {
            if entry.nudged {
                nudged_at.get_or_insert(i);
            } else {
                results += 1;
            }
        }
        let after = match nudged_at {
            None => AfterNudge::None,
            Some(0) => AfterNudge::Pending,
            Some(_) => AfterNudge::Shown,
        };
        (results, after)
    }

    /// The calls at the end of the window that came back empty (or were nudged) asking this
    /// call's question; with the message detail: how many came back empty, and their tools.
    fn empty_run(&self, question: Option<Question>) -> (u32, AfterNudge, Detail) {
        let run = self.tail_len(question, |e| e.empty);
        let tail = self.window.range(self.window.len() - run..);
        let (empties, after) = Self::run_counts(tail.clone());
        if empties == 0 {
            return (0, AfterNudge::None, Detail::Plain);
        }
        // The tools that came back empty, in order; one that was only nudged returned nothing.
        let mut tools: Vec<u32> = Vec::new();
        for entry in tail.filter(|e| e.empty) {
            if !tools.contains(&entry.tool) {
                tools.push(entry.tool);
            }
        }
        (empties, after, Detail::Empty(empties, tools))
    }

    /// The calls at the end of the window that failed with one error (not a transient one),
    /// or were nudged, asking this call's question; with the message detail: the failures and
    /// the error.
    fn error_run(&self, question: Option<Question>) -> (u32, AfterNudge, Detail) {
        let none = (0, AfterNudge::None, Detail::Plain);
        let Some(last) = self.window.iter().rev().find(|e| !e.nudged) else {
            return none;
        };
        let Some(error) = last.result.filter(|_| last.failed && !last.retry) else {
            return none;
        };
        let run = self.tail_len(question, |e| {
            e.failed && !e.retry && e.result == Some(error)
        });
        let tail = self.window.range(self.window.len() - run..);
        let (failures, after) = Self::run_counts(tail);
        if failures == 0 {
            return none;
        }
        (failures, after, Detail::Errors(failures, error))
    }

    /// The tools of the shortest cycle the window went round twice with the same results
    /// that a call of `key` would start a third round of.
    fn cycle(&self, key: Key) -> Option<(Vec<u32>, bool)> {
        let n = self.window.len();
        // Most calls start no cycle: their key is nowhere a first lap of two calls or more
        // could begin (one pass over the window, not an indexed probe per period).
        if n < 4 || !self.window.range(..n - 3).any(|e| e.key == key) {
            return None;
        }
        for period in 2..=n / 2 {
            let start = n - 2 * period;
            let lap = |i: usize| &self.window[start + i];
            // Transient failures retried in between are no lap of a cycle.
            if lap(0).key != key
                || lap(0).turn != self.turn
                || (0..2 * period).any(|i| lap(i).result.is_none() || lap(i).retry)
            {
                continue;
            }
            // With writes in the cycle, their results are what must repeat: the writes put
            // the world back, and what the reads in between print may be noise.
            let writes = (0..period).any(|i| lap(i).writes);
            let same = (0..period).all(|i| {
                let (a, b) = (lap(i), lap(period + i));
                a.key == b.key && (a.result == b.result || (writes && !a.writes))
            });
            let distinct = (1..period).any(|i| lap(i).key != lap(0).key);
            if same && distinct {
                // Reads whose results were let differ: "the same results of its writes".
                let mixed = writes && !(0..period).all(|i| lap(i).writes);
                return Some(((0..period).map(|i| lap(i).tool).collect(), mixed));
            }
        }
        None
    }

    /// The cached result for `key`, if an allowed call of a declared `read` tool may use it.
    pub fn cached(&self, decision: &Decision, cacheable: bool, key: Key) -> Option<&R> {
        if decision.action == Action::Allow && cacheable {
            self.cache.get(&key)
        } else {
            None
        }
    }

    /// Applies a decision: counts the step, appends the call or latches the stop, remembers
    /// the call id, counts polls, and forgets cached reads when a call that may write is let
    /// through. `policy` is `None` for a tool with no policy; `latched` is the verdict to
    /// answer every later call with, for a stop; `question` what the call asks, if told, and
    /// `args` its arguments, held until its result is observed when it was not.
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &mut self,
        limits: &Limits,
        key: Key,
        tool: u32,
        decision: &Decision,
        policy: Option<Policy>,
        latched: Option<V>,
        remembered: Option<(&[u8], V)>,
        question: Option<Question>,
        args: Option<(R, bool)>,
    ) -> Released<V, R, N> {
        let mut released = Released::default();
        self.commit_into(
            limits,
            key,
            tool,
            decision,
            policy,
            latched,
            remembered,
            question,
            args,
            &mut released,
        );
        released
    }

    /// `commit`, adding what it lets go of to `released` (the caller's: no `Released` is
    /// made, moved and merged per check).
    #[allow(clippy::too_many_arguments)]
    pub fn commit_into(
        &mut self,
        limits: &Limits,
        key: Key,
        tool: u32,
        decision: &Decision,
        policy: Option<Policy>,
        latched: Option<V>,
        remembered: Option<(&[u8], V)>,
        question: Option<Question>,
        args: Option<(R, bool)>,
        released: &mut Released<V, R, N>,
    ) {
        self.steps = decision.step;
        let allowed = decision.action == Action::Allow;
        if decision.action == Action::Stop {
            if let Some(old) = std::mem::replace(&mut self.stopped, latched) {
                released.verdicts.push(old);
            }
            released.results.extend(args.map(|(a, _)| a));
        } else {
            if self.window.len() >= limits.window {
                if let Some(gone) = self.window.pop_front() {
                    if self
                        .args
                        .front()
                        .is_some_and(|(step, _, _)| *step == gone.step)
                    {
                        // `push`, not `extend`: inlined, where `extend` is a call that
                        // reserves first (a check's every allow comes here).
                        if let Some((_, args, _)) = self.args.pop_front() {
                            released.results.push(args);
                        }
                    }
                }
            }
            self.window.push_back(Entry {
                key,
                tool,
                step: decision.step,
                turn: self.turn,
                nudged: decision.action == Action::Nudge,
                writes: allowed && policy == Some(Policy::Write),
                changes: allowed && may_change(policy),
                result: None,
                empty: false,
                failed: false,
                retry: false,
                question: None,
            });
            if question.is_some() {
                // Set on its own: built into the entry, the question was copied through a
                // stack slot read back across two stores, a stall on every push (most calls
                // have no question told: then nothing is copied).
                if let Some(entry) = self.window.back_mut() {
                    entry.question = question;
                }
            }
            match args {
                // A nudged call never runs, so nothing of it is observed.
                Some((args, text)) if allowed && question.is_none() => {
                    self.args.push_back((decision.step, args, text))
                }
                Some((args, _)) => released.results.push(args),
                None => {}
            }
            self.forget_errors(released);
            self.forget_tools(released);
            if self.wants {
                // The call dropped may have been the one marked. Without a mark there is
                // nothing to update: the call added has no result yet, so marks none.
                self.update_wants();
            }
        }
        if allowed && may_change(policy) {
            released.results.extend(self.cache.drain().map(|(_, r)| r));
            self.cache_order.clear();
        }
        if allowed && policy == Some(Policy::Poll) {
            let polls = self.polls.get(key).saturating_add(1);
            self.polls.set(key, polls);
        }
        if let Some((call_id, verdict)) = remembered {
            let answered = decision.action == Action::Nudge;
            self.remember(call_id, key, decision.step, verdict, answered, released);
        }
    }

    /// Whether a result in the window came back empty or failed, so that a new call's
    /// question must be told ([`RunState::wants`]).
    fn update_wants(&mut self) {
        self.wants = self.window.iter().any(Entry::marked);
    }

    /// Forgets the tool names no entry of the window holds, once there are many: names come
    /// from the model, and a run that makes up a new one each call would otherwise keep
    /// every one until `reset` (the reference keeps a name only in its entries). The names
    /// still held are numbered afresh, in window order; ids live only in entries (a
    /// decision's details are made into names before its commit, and snapshots write the
    /// names). At least [`TOOL_NAMES_SLACK`] plus the window's length new names come between
    /// two compactions, each linear in the window and the names: amortised O(1) a call.
    fn forget_tools(&mut self, released: &mut Released<V, R, N>) {
        if self.tool_names.len() < 2 * self.window.len() + TOOL_NAMES_SLACK {
            return;
        }
        let mut names: Vec<Option<N>> = std::mem::take(&mut self.tool_names)
            .into_iter()
            .map(Some)
            .collect();
        let mut bytes: Vec<Option<Box<[u8]>>> = std::mem::take(&mut self.tool_bytes)
            .into_iter()
            .map(Some)
            .collect();
        let mut ids = NameMap::default();
        let mut renumbered: Vec<Option<u32>> = vec![None; names.len()];
        for entry in &mut self.window {
            let old = entry.tool as usize;
            let id = match renumbered.get(old).copied().flatten() {
                Some(id) => id,
                None => {
                    let (Some(name), Some(name_bytes)) = (
                        names.get_mut(old).and_then(Option::take),
                        bytes.get_mut(old).and_then(Option::take),
                    ) else {
                        continue; // not an interned id: cannot happen, and nothing to keep
                    };
                    let id = self.tool_names.len() as u32;
                    ids.insert(name_bytes.clone(), id);
                    self.tool_bytes.push(name_bytes);
                    self.tool_names.push(name);
                    if let Some(slot) = renumbered.get_mut(old) {
                        *slot = Some(id);
                    }
                    id
                }
            };
            entry.tool = id;
        }
        self.tool_ids = ids;
        self.last_tool = None;
        released.names.extend(names.into_iter().flatten());
    }

    /// Drops the texts of failures that have left the window, once there are more of them
    /// than calls in it (so the work is paid for by the calls that made it).
    fn forget_errors(&mut self, released: &mut Released<V, R, N>) {
        if self.error_texts.len() <= self.window.len() + 8 {
            return;
        }
        let live: Vec<Key> = self.window.iter().filter_map(|e| e.result).collect();
        let dead: Vec<Key> = self
            .error_texts
            .keys()
            .filter(|k| !live.contains(k))
            .copied()
            .collect();
        for key in dead {
            released.names.extend(self.error_texts.remove(&key));
        }
    }

    /// Records what the call checked at `step` with `key` returned, if it is still in the
    /// window; hands back what it let go of, and, where the call came back empty or failed
    /// and its question is not known, `Some` of its held arguments (if the state held them):
    /// the caller tells the question ([`RunState::set_question`]).
    pub fn observe(
        &mut self,
        step: u64,
        key: Key,
        call_id: Option<&[u8]>,
        outcome: Outcome<N>,
    ) -> (Released<V, R, N>, Option<Held<R>>) {
        let mut released = Released::default();
        let ask = self.observe_into(step, key, call_id, outcome, &mut released);
        (released, ask)
    }

    /// `observe`, adding what it lets go of to `released` (the caller's, as `commit_into`).
    pub fn observe_into(
        &mut self,
        step: u64,
        key: Key,
        call_id: Option<&[u8]>,
        outcome: Outcome<N>,
        released: &mut Released<V, R, N>,
    ) -> Option<Held<R>> {
        if let Some(remembered) = call_id.and_then(|id| self.call_ids.get_mut(id)) {
            if remembered.step == step {
                remembered.answered = true;
            }
        }
        let Some(index) = self
            .window
            .iter()
            .rposition(|e| e.step == step && e.key == key)
            // A nudged call never ran: nothing is observed of it (a verdict given by another
            // state, loaded since, can name its step and key), as the reference's `_entry_of`.
            .filter(|&i| !self.window[i].nudged)
        else {
            released.names.extend(outcome.error);
            return None;
        };
        if outcome.result.is_none() && !outcome.failed {
            // Nothing to compare it by: as if not observed.
            released.names.extend(outcome.error);
            return None;
        }
        // A retry is counted once per call, however often it is observed.
        let was_retry = self.window[index].retry;
        let mut retry = false;
        if outcome.failed && outcome.transient {
            let retries = self.retries.get(key);
            if was_retry || retries < TRANSIENT_RETRIES {
                if !was_retry {
                    self.retries.set(key, retries + 1);
                }
                retry = true;
            }
        }
        let entry = &mut self.window[index];
        entry.result = outcome.result;
        entry.empty = outcome.empty;
        entry.failed = outcome.failed;
        entry.retry = retry;
        self.observed = true;
        match (outcome.result, outcome.error) {
            (Some(digest), Some(text)) if outcome.failed => {
                if let Some(old) = self.error_texts.insert(digest, text) {
                    released.names.push(old);
                }
            }
            (_, text) => released.names.extend(text),
        }
        // The arguments of the call observed are nearly always the newest held.
        let held = if self.args.back().is_some_and(|(at, _, _)| *at == step) {
            // `pop_back`: `remove` is a call that shifts, even for the last one.
            self.args.pop_back()
        } else {
            self.args
                .iter()
                .rposition(|(at, _, _)| *at == step)
                .and_then(|i| self.args.remove(i))
        }
        .map(|(_, args, text)| (args, text));
        let entry = &mut self.window[index];
        if !entry.marked() {
            // Only a call that came back empty or failed is read for what it asked (the
            // reference's `observe` says why).
            entry.question = None;
        }
        let marked = entry.marked();
        let ask = marked && entry.question.is_none();
        if marked {
            self.wants = true;
        } else if self.wants {
            // Another entry may still be marked, or this one no longer is.
            self.update_wants();
        }
        if ask {
            return Some(held);
        }
        if let Some((args, _)) = held {
            released.results.push(args);
        }
        None
    }

    /// Hands over every call's held arguments, with its step, key and tool, for their
    /// questions to be told before a snapshot is written (a snapshot holds no arguments, so
    /// the guard restored from it must know what its calls asked: see `set_question`).
    pub fn take_args(&mut self) -> Vec<(u64, Key, u32, R, bool)> {
        let mut taken = Vec::with_capacity(self.args.len());
        for (step, args, text) in self.args.drain(..) {
            if let Some(entry) = self.window.iter().rev().find(|e| e.step == step) {
                taken.push((step, entry.key, entry.tool, args, text));
            }
        }
        taken
    }

    /// Sets the question of the call checked at `step` with `key`, told after its result
    /// came back empty or failed, if it is still in the window and its question unknown.
    pub fn set_question(&mut self, step: u64, key: Key, question: Option<Question>) {
        if let Some(entry) = self
            .window
            .iter_mut()
            .rev()
            .find(|e| e.step == step && e.key == key)
        {
            if entry.question.is_none() && !entry.nudged {
                entry.question = question;
            }
        }
    }

    /// A human message arrived: see the reference's `user_message`.
    pub fn user_message(&mut self) {
        self.turn = self.turn.saturating_add(1);
    }

    /// Remembers the verdict given at `step` to a call id for the call with `key`;
    /// `answered`: the verdict is the call's answer (a nudge: the model was given the guard's
    /// message as its result, so the same call asked again under the id is counted, as the
    /// reference's `_remember_call_id` says).
    pub fn remember(
        &mut self,
        call_id: &[u8],
        key: Key,
        step: u64,
        verdict: V,
        answered: bool,
        released: &mut Released<V, R, N>,
    ) {
        let remembered = Remembered {
            key,
            step,
            verdict,
            answered,
        };
        released
            .verdicts
            .extend(self.call_ids.remember(call_id, remembered));
    }

    /// Stores the result of an allowed `read` call for later allowed checks of the same key.
    pub fn store_result(&mut self, key: Key, result: R) -> Released<V, R, N> {
        let mut released = Released::default();
        if let Some(old) = self.cache.insert(key, result) {
            released.results.push(old);
            self.cache_order.retain(|&k| k != key);
        }
        self.cache_order.push_back(key);
        if self.cache_order.len() > CACHE_ENTRIES {
            if let Some(oldest) = self.cache_order.pop_front() {
                released.results.extend(self.cache.remove(&oldest));
            }
        }
        released
    }

    /// Forgets the run, handing back everything it held.
    pub fn reset(&mut self) -> Released<V, R, N> {
        let old = std::mem::take(self);
        Released {
            verdicts: old
                .stopped
                .into_iter()
                .chain(old.call_ids.into_verdicts())
                .collect(),
            results: old
                .cache
                .into_values()
                .chain(old.args.into_iter().map(|(_, args, _)| args))
                .collect(),
            names: old
                .tool_names
                .into_iter()
                .chain(old.error_texts.into_values())
                .collect(),
        }
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// The window's keys, oldest first.
    pub fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.window.iter().map(|e| e.key)
    }

    pub fn len(&self) -> usize {
        self.window.len()
    }

    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type State = RunState<&'static str, u32, &'static str>;

    fn run(state: &mut State, limits: &Limits, key: Key) -> Decision {
        run_tool(state, limits, key, 0, None)
    }

    fn run_tool(
        state: &mut State,
        limits: &Limits,
        key: Key,
        tool: u32,
        rule: Option<ToolRule>,
    ) -> Decision {
        run_asking(state, limits, key, tool, rule, None)
    }

    /// `run_tool` of a call asking `question`.
    fn run_asking(
        state: &mut State,
        limits: &Limits,
        key: Key,
        tool: u32,
        rule: Option<ToolRule>,
        question: Option<Question>,
    ) -> Decision {
        let decision = state.decide(limits, key, rule, question);
        let latched = (decision.action == Action::Stop).then_some("stop");
        let policy = rule.map(|r| r.policy);
        state.commit(
            limits, key, tool, &decision, policy, latched, None, question, None,
        );
        decision
    }

    /// A question of one shape and form, told by its raw arguments.
    fn asking(raw: Key) -> Option<Question> {
        Some(Question { raw, shape: 1 })
    }

    /// Checks, and when allowed observes `result` (0 meaning an empty result).
    fn run_observed(
        state: &mut State,
        key: Key,
        tool: u32,
        rule: Option<ToolRule>,
        result: Key,
    ) -> Decision {
        run_observed_asking(state, key, tool, rule, result, None)
    }

    fn run_observed_asking(
        state: &mut State,
        key: Key,
        tool: u32,
        rule: Option<ToolRule>,
        result: Key,
        question: Option<Question>,
    ) -> Decision {
        let decision = run_asking(state, &seed_limits(), key, tool, rule, question);
        if decision.action == Action::Allow {
            let outcome = Outcome {
                result: Some(result),
                empty: result == 0,
                failed: false,
                transient: false,
                error: None,
            };
            state.observe(decision.step, key, None, outcome);
        }
        decision
    }

    #[test]
    fn polls_repeat_until_their_limit() {
        let mut state = State::default();
        let rule = Some(ToolRule {
            policy: Policy::Poll,
            max_polls: 4,
        });
        let actions: Vec<_> = (0..5)
            .map(|_| run_observed(&mut state, 7, 0, rule, 1).action)
            .collect();
        use Action::*;
        assert_eq!(actions, [Allow, Allow, Allow, Allow, Stop]);
        assert_eq!(state.stopped(), Some(&"stop"));
    }

    #[test]
    fn changed_results_are_progress_and_unchanged_ones_a_loop() {
        let mut state = State::default();
        let write = Some(ToolRule {
            policy: Policy::Write,
            max_polls: DEFAULT_MAX_POLLS,
        });
        // read, write, read, write, read: each read follows a write, so none is a repeat.
        for (key, tool, rule, result) in [
            (1, 0, None, 10),
            (2, 1, write, 5),
            (1, 0, None, 11),
            (3, 1, write, 5),
            (1, 0, None, 12),
        ] {
            assert_eq!(
                run_observed(&mut state, key, tool, rule, result).action,
                Action::Allow
            );
        }
        // A read repeated with nothing between: nudged at the second; the call after the
        // nudge runs, and, the same result seen twice, the next stops (issue 25). "Has not
        // changed" only once two equal results were seen (the nudged call never ran).
        let read = Some(ToolRule {
            policy: Policy::Read,
            max_polls: DEFAULT_MAX_POLLS,
        });
        let mut state = State::default();
        let verdicts: Vec<_> = (0..4)
            .map(|_| run_observed(&mut state, 1, 0, read, 7))
            .map(|d| (d.action, d.detail))
            .collect();
        use Action::*;
        assert_eq!(
            verdicts,
            [
                (Allow, Detail::Plain),
                (Nudge, Detail::Plain),
                (Allow, Detail::Plain),
                (Stop, Detail::Unchanged)
            ]
        );
        // A tool of unknown kind may have changed the world: each repeat runs and is judged
        // by its result, so the thresholds move up by one.
        let mut state = State::default();
        let verdicts: Vec<_> = (0..4)
            .map(|_| run_observed(&mut state, 1, 0, None, 7))
            .map(|d| (d.action, d.repeats, d.detail))
            .collect();
        assert_eq!(
            verdicts,
            [
                (Allow, 1, Detail::Plain),
                (Allow, 2, Detail::Plain),
                (Nudge, 3, Detail::Unchanged),
                (Stop, 4, Detail::Unchanged),
            ]
        );
    }

    #[test]
    fn transient_failures_are_retried_and_the_same_error_counts() {
        let read = Some(ToolRule {
            policy: Policy::Read,
            max_polls: DEFAULT_MAX_POLLS,
        });
        let limits = seed_limits();
        let mut state = State::default();
        let check = |state: &mut State, failed: bool, transient: bool| {
            let decision = run_tool(state, &limits, 1, 0, read);
            if decision.action == Action::Allow {
                let outcome = Outcome {
                    result: Some(if failed { 66 } else { 5 }),
                    empty: false,
                    failed,
                    transient,
                    error: None,
                };
                state.observe(decision.step, 1, None, outcome);
            }
            (decision.action, decision.repeats)
        };
        use Action::*;
        // 503, 503, success: the retries are not repeats.
        assert_eq!(check(&mut state, true, true), (Allow, 1));
        assert_eq!(check(&mut state, true, true), (Allow, 1));
        assert_eq!(check(&mut state, false, false), (Allow, 1));
        // The same deterministic error again: a loop, stopped once it failed the same way
        // after the nudge.
        let mut state = State::default();
        assert_eq!(check(&mut state, true, false), (Allow, 1));
        assert_eq!(check(&mut state, true, false), (Nudge, 2));
        assert_eq!(check(&mut state, true, false), (Allow, 3));
        assert_eq!(check(&mut state, true, false), (Stop, 4));
        // Past the retries a call has, transient failures count.
        let mut state = State::default();
        for _ in 0..TRANSIENT_RETRIES {
            assert_eq!(check(&mut state, true, true), (Allow, 1));
        }
        assert_eq!(check(&mut state, true, true), (Allow, 1));
        assert_eq!(check(&mut state, true, true).0, Nudge);
    }

    #[test]
    fn a_user_message_ends_the_count_unless_the_call_keeps_failing() {
        let read = Some(ToolRule {
            policy: Policy::Read,
            max_polls: DEFAULT_MAX_POLLS,
        });
        let mut state = State::default();
        for _ in 0..4 {
            assert_eq!(
                run_observed(&mut state, 1, 0, read, 5).action,
                Action::Allow
            );
            state.user_message();
        }
        let limits = seed_limits();
        let mut state = State::default();
        let mut actions = Vec::new();
        for _ in 0..4 {
            let decision = run_tool(&mut state, &limits, 1, 0, read);
            if decision.action == Action::Allow {
                let outcome = Outcome {
                    result: Some(66),
                    empty: false,
                    failed: true,
                    transient: false,
                    error: None,
                };
                state.observe(decision.step, 1, None, outcome);
            }
            actions.push(decision.action);
            state.user_message();
        }
        use Action::*;
        assert_eq!(actions, [Allow, Nudge, Allow, Stop]);
    }

    #[test]
    fn a_cycle_gone_round_twice_stops_before_the_third_round() {
        let mut state = State::default();
        let write = Some(ToolRule {
            policy: Policy::Write,
            max_polls: DEFAULT_MAX_POLLS,
        });
        let lap = [
            (1, 0, None, 21),
            (2, 1, write, 5),
            (1, 0, None, 22),
            (3, 1, write, 5),
        ];
        for (key, tool, rule, result) in lap.iter().chain(&lap) {
            assert_eq!(
                run_observed(&mut state, *key, *tool, *rule, *result).action,
                Action::Allow
            );
        }
        let stop = run_observed(&mut state, 1, 0, None, 21);
        assert_eq!(stop.reason, Some(Reason::NoProgress));
        assert_eq!(stop.detail, Detail::Cycle(vec![0, 1, 0, 1], true));
    }

    #[test]
    fn empty_results_in_a_row_nudge_then_stop() {
        // One question reworded: nudged after three empty answers, then run once more, and
        // stopped once that came back empty too.
        let mut state = State::default();
        let actions: Vec<_> = (10..16)
            .map(|key| run_observed_asking(&mut state, key, 0, None, 0, asking(key)))
            .map(|d| (d.action, d.detail))
            .collect();
        use Action::*;
        assert_eq!(
            actions,
            [
                (Allow, Detail::Plain),
                (Allow, Detail::Plain),
                (Allow, Detail::Plain),
                (Nudge, Detail::Empty(3, vec![0])),
                (Allow, Detail::Plain),
                (Stop, Detail::Empty(4, vec![0])),
            ]
        );
        // Other questions (another shape each): exploration, never a run.
        let mut state = State::default();
        for key in 10..16 {
            let question = Some(Question {
                raw: key,
                shape: key,
            });
            let decision = run_observed_asking(&mut state, key, 0, None, 0, question);
            assert_eq!(decision.action, Allow);
        }
    }

    #[test]
    fn a_failed_call_corrected_is_not_a_repeat() {
        // {"x": null} failed; {} has the same key and other raw arguments: a correction.
        let read = Some(ToolRule {
            policy: Policy::Read,
            max_polls: DEFAULT_MAX_POLLS,
        });
        let limits = seed_limits();
        let mut state = State::default();
        let first = run_asking(&mut state, &limits, 1, 0, read, asking(100));
        let failure = Outcome {
            result: Some(66),
            empty: false,
            failed: true,
            transient: false,
            error: None,
        };
        state.observe(first.step, 1, None, failure);
        let fixed = run_asking(&mut state, &limits, 1, 0, read, asking(101));
        assert_eq!((fixed.action, fixed.repeats), (Action::Allow, 1));
        let again = run_asking(&mut state, &limits, 1, 0, read, asking(100));
        assert_eq!(again.action, Action::Nudge);
    }

    fn limits(window: usize, nudge_at: u32, stop_at: u32, max_steps: Option<u64>) -> Limits {
        Limits {
            window,
            nudge_at,
            stop_at,
            max_steps,
        }
    }

    fn seed_limits() -> Limits {
        limits(12, 2, 3, None)
    }

    #[test]
    fn third_occurrence_stops_and_second_nudges() {
        let limits = seed_limits();
        let mut state = State::default();
        let actions: Vec<_> = [1, 2, 3, 4, 4, 4]
            .into_iter()
            .map(|k| run(&mut state, &limits, k).action)
            .collect();
        use Action::*;
        assert_eq!(actions, [Allow, Allow, Allow, Allow, Nudge, Stop]);
        assert_eq!(state.steps(), 6);
        assert_eq!(state.len(), 5, "the stopped call is not appended");
        assert_eq!(state.stopped(), Some(&"stop"));
    }

    #[test]
    fn the_window_forgets_old_visits() {
        let limits = seed_limits();
        let mut state = State::default();
        run(&mut state, &limits, 99);
        for k in 0..12 {
            run(&mut state, &limits, k);
        }
        assert_eq!(run(&mut state, &limits, 99).action, Action::Allow);
    }

    #[test]
    fn budget_is_a_different_reason() {
        let limits = limits(12, 2, 3, Some(2));
        let mut state = State::default();
        run(&mut state, &limits, 1);
        run(&mut state, &limits, 2);
        let third = run(&mut state, &limits, 3);
        assert_eq!(third.reason, Some(Reason::BudgetExhausted));
        assert_eq!(third.step, 3);
    }

    #[test]
    fn writes_clear_the_cache_and_reads_use_it() {
        let limits = limits(12, 5, 6, None);
        let mut state = State::default();
        let d = state.decide(&limits, 7, None, None);
        state.commit(
            &limits,
            7,
            0,
            &d,
            Some(Policy::Read),
            None,
            None,
            None,
            None,
        );
        state.store_result(7, 42);
        let again = state.decide(&limits, 7, None, None);
        assert_eq!(state.cached(&again, true, 7), Some(&42));
        assert_eq!(state.cached(&again, false, 7), None);
        let write = state.decide(&limits, 8, None, None);
        let released = state.commit(
            &limits,
            8,
            1,
            &write,
            Some(Policy::Write),
            None,
            None,
            None,
            None,
        );
        assert_eq!(released.results[..], [42]);
        assert_eq!(state.cached(&again, true, 7), None);
    }

    #[test]
    fn call_ids_are_remembered_within_bounds() {
        let mut state = State::default();
        let mut released = Released::default();
        for i in 0..(CALL_ID_MEMORY + 5) {
            state.remember(format!("id{i}").as_bytes(), 9, 1, "v", false, &mut released);
        }
        assert_eq!(released.verdicts.len(), 5);
        assert!(!state.retried(b"id0", 9));
        let newest = format!("id{}", CALL_ID_MEMORY + 4);
        assert!(state.retried(newest.as_bytes(), 9));
        // The same id on another call is not a retried delivery.
        assert!(!state.retried(newest.as_bytes(), 8));
    }

    #[test]
    fn tool_names_are_kept_only_while_the_window_holds_them() {
        // Thousands of distinct names, and a few kept in the window: the names the state holds
        // stay bounded, every entry still names its own tool, and the forgotten names are
        // handed back.
        let limits = seed_limits();
        let names: Vec<&'static str> = (0..10_000)
            .map(|i| &*Box::leak(format!("tool-{i}").into_boxed_str()))
            .collect();
        let mut state = State::default();
        let mut released = 0;
        let mut most = 0;
        for (i, name) in names.iter().enumerate() {
            // Every other call is to one of three recurring tools.
            let name = if i % 2 == 0 { names[i % 3] } else { name };
            let tool = state.intern_tool(name.as_bytes(), || name);
            let decision = state.decide(&limits, i as Key, None, None);
            let latched = (decision.action == Action::Stop).then_some("stop");
            released += state
                .commit(
                    &limits, i as Key, tool, &decision, None, latched, None, None, None,
                )
                .names
                .len();
            most = most.max(state.tool_names.len());
            let entry = state.window.back().map(|e| e.tool);
            assert_eq!(entry.and_then(|id| state.tool_name(id)), Some(&name));
        }
        assert!(most <= 2 * limits.window + TOOL_NAMES_SLACK, "{most}");
        assert!(released > 4_000);
        for entry in &state.window {
            let name = state.tool_name(entry.tool).copied();
            let bytes = &state.tool_bytes[entry.tool as usize];
            assert_eq!(name.map(str::as_bytes), Some(&**bytes));
            assert_eq!(state.tool_ids.get(&**bytes), Some(&entry.tool));
        }
    }

    #[test]
    fn reset_hands_everything_back() {
        let limits = seed_limits();
        let mut state = State::default();
        for k in [1, 1, 1] {
            run(&mut state, &limits, k);
        }
        state.store_result(1, 5);
        let released = state.reset();
        assert_eq!(released.verdicts, vec!["stop"]);
        assert_eq!(released.results[..], [5]);
        assert_eq!(state.steps(), 0);
        assert!(state.is_empty());
    }
}
