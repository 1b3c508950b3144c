//! The guard's decision logic (DESIGN.md §2), free of Python: the window of recent calls,
//! the step count, the stop latch, the call-id memory, the read-result cache, and what the
//! observed results say about progress (issue #6; `tripwire/_guard.py` documents the rules
//! and is the reference this mirrors).
//!
//! Verdicts (`V`), cached results (`R`) and tool names (`N`) are opaque here, so the Python
//! layer can keep its own objects in them. Anything the state lets go of is handed back as [`Released`] rather
//! than dropped in place: dropping a Python object can run arbitrary Python code, which must
//! not happen while the caller holds the guard's lock.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::key::Key;

/// How many recent call ids a guard remembers, so a retried delivery gets its first answer.
pub const CALL_ID_MEMORY: usize = 128;
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

/// What a verdict's message is about, beyond its action and reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    /// No results observed: the hash-only verdict.
    Plain,
    /// Repeats whose results were observed and did not change.
    Unchanged,
    /// This many calls in a row to these tools (ids, in order) came back empty.
    Empty(u32, Vec<u32>),
    /// The last calls went twice round a cycle of these tools (ids from `intern_tool`);
    /// `true` when it mixes writes and reads: only the writes' results had to be the same.
    Cycle(Vec<u32>, bool),
    /// A poll tool reached this limit.
    PollLimit(u32),
}

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
}

impl Policy {
    pub fn parse(name: &str) -> Option<Policy> {
        match name {
            "read" => Some(Policy::Read),
            "write" => Some(Policy::Write),
            "volatile" => Some(Policy::Volatile),
            "poll" => Some(Policy::Poll),
            _ => None,
        }
    }
}

/// The numbers a guard is configured with, validated.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub window: usize,
    pub nudge_at: u32,
    pub stop_at: u32,
    pub max_steps: Option<u64>,
}

impl Limits {
    /// Validates the configuration with the reference's messages.
    pub fn new(
        window: usize,
        nudge_at: u32,
        stop_at: u32,
        max_steps: Option<u64>,
    ) -> Result<Limits, String> {
        if window < 1 {
            return Err(format!("window must be at least 1, got {window}"));
        }
        if nudge_at < 2 {
            return Err(format!("nudge_at must be at least 2, got {nudge_at}"));
        }
        if stop_at < 2 {
            return Err(format!("stop_at must be at least 2, got {stop_at}"));
        }
        if stop_at < nudge_at {
            return Err(format!(
                "stop_at ({stop_at}) must not be less than nudge_at ({nudge_at})"
            ));
        }
        if stop_at as usize > window + 1 {
            return Err(format!(
                "stop_at ({stop_at}) can never be reached with window={window}: a window of \
                 {window} holds at most {} occurrences, this one included",
                window + 1
            ));
        }
        if max_steps == Some(0) {
            return Err("max_steps must be at least 1, got 0".to_string());
        }
        Ok(Limits {
            window,
            nudge_at,
            stop_at,
            max_steps,
        })
    }
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
pub struct Released<V, R, N> {
    pub verdicts: Vec<V>,
    pub results: Vec<R>,
    pub names: Vec<N>,
}

impl<V, R, N> Default for Released<V, R, N> {
    fn default() -> Self {
        Released {
            verdicts: Vec::new(),
            results: Vec::new(),
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

/// One call in the window.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: Key,
    tool: u32,
    step: u64,
    /// Nudged: it never ran.
    nudged: bool,
    /// An allowed call to a `write` tool.
    writes: bool,
    /// Once observed: the result's key, and whether it was empty.
    result: Option<Key>,
    empty: bool,
}

/// FNV-1a, for maps keyed by short byte strings (tool names) that are looked up on every
/// check: much cheaper than the default SipHash, and these keys come from the harness's own
/// tool list, not from an adversary.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf29ce484222325
        } else {
            self.0
        };
        for &b in bytes {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        self.0 = hash;
    }
}

/// A map keyed by tool names.
pub type NameMap<V> = HashMap<Box<[u8]>, V, BuildHasherDefault<Fnv>>;

/// One run's state. Nothing is allocated until the first call.
pub struct RunState<V, R, N> {
    window: VecDeque<Entry>,
    steps: u64,
    stopped: Option<V>,
    by_call_id: HashMap<Box<[u8]>, V>,
    call_id_order: VecDeque<Box<[u8]>>,
    cache: HashMap<Key, R>,
    cache_order: VecDeque<Key>,
    /// Checks of each poll tool's call so far this run (not only in the window).
    polls: HashMap<Key, u32>,
    /// Whether any result was observed this run: until one is, the verdicts are the
    /// hash-only ones and the progress checks are skipped (the common, cheapest path).
    observed: bool,
    /// Tool names seen this run, by id: entries hold ids, messages need names.
    tool_ids: NameMap<u32>,
    tool_names: Vec<N>,
    /// Names by id (the map's keys, again), and the last tool interned: agents call the
    /// same tool again and again, and a comparison is cheaper than hashing.
    tool_bytes: Vec<Box<[u8]>>,
    last_tool: Option<u32>,
}

impl<V, R, N> Default for RunState<V, R, N> {
    fn default() -> Self {
        RunState {
            window: VecDeque::new(),
            steps: 0,
            stopped: None,
            by_call_id: HashMap::new(),
            call_id_order: VecDeque::new(),
            cache: HashMap::new(),
            cache_order: VecDeque::new(),
            polls: HashMap::new(),
            observed: false,
            tool_ids: NameMap::default(),
            tool_names: Vec::new(),
            tool_bytes: Vec::new(),
            last_tool: None,
        }
    }
}

impl<V, R, N> RunState<V, R, N> {
    /// The verdict a call already has: the one given to the same call id before, or the
    /// stop the run ended with.
    pub fn recall(&self, call_id: Option<&[u8]>) -> Option<&V> {
        call_id
            .and_then(|id| self.by_call_id.get(id))
            .or(self.stopped.as_ref())
    }

    /// True when this call id has a verdict already.
    pub fn knows_call_id(&self, call_id: &[u8]) -> bool {
        self.by_call_id.contains_key(call_id)
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

    /// Says what to do with a call; changes nothing.
    pub fn decide(&self, limits: &Limits, key: Key, tool: u32, rule: Option<ToolRule>) -> Decision {
        let step = self.steps + 1;
        let over_budget = limits.max_steps.is_some_and(|budget| self.steps >= budget);
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
            let polls = self.polls.get(&key).copied().unwrap_or(0) + 1;
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
        let (repeats, unchanged) = self.unchanged_repeats(key);
        let repeat_detail = if unchanged {
            Detail::Unchanged
        } else {
            Detail::Plain
        };
        if !self.observed {
            // No results yet: the hash-only verdict.
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
        let (empty_run, empty_detail) = self.empty_run(tool);
        if repeats >= limits.stop_at {
            return decision(
                Action::Stop,
                Some(Reason::LoopDetected),
                repeats,
                repeat_detail,
            );
        }
        if let Some((tools, writes)) = self.cycle(key) {
            let detail = Detail::Cycle(tools, writes);
            return decision(Action::Stop, Some(Reason::NoProgress), repeats, detail);
        }
        if empty_run > limits.stop_at {
            return decision(
                Action::Stop,
                Some(Reason::NoProgress),
                repeats,
                empty_detail,
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
        if repeats >= limits.nudge_at {
            return decision(Action::Nudge, None, repeats, repeat_detail);
        }
        if empty_run > limits.nudge_at {
            return decision(Action::Nudge, None, repeats, empty_detail);
        }
        decision(Action::Allow, None, repeats, Detail::Plain)
    }

    /// Occurrences of `key` since the world last changed, this one included, and whether any
    /// had its result observed (see `_unchanged_repeats` in the reference).
    fn unchanged_repeats(&self, key: Key) -> (u32, bool) {
        let earlier = || self.window.iter().filter(|e| e.key == key);
        if !self.observed {
            return (earlier().count() as u32 + 1, false);
        }
        let Some(last) = earlier().filter_map(|e| e.result).next_back() else {
            return (earlier().count() as u32 + 1, false);
        };
        let mut count = 0;
        let mut wrote = false;
        for entry in self.window.iter().rev() {
            if entry.key == key {
                if wrote || entry.result.is_some_and(|r| r != last) {
                    break;
                }
                count += 1;
            }
            wrote |= entry.writes;
        }
        (count + 1, true)
    }

    /// The calls at the end of the window that came back empty or were nudged, if at least
    /// one came back empty and `tool` is among their tools; with the message detail: how
    /// many came back empty, and their tools in order.
    fn empty_run(&self, tool: u32) -> (u32, Detail) {
        let run = self
            .window
            .iter()
            .rev()
            .take_while(|e| e.empty || e.nudged)
            .count();
        let tail = self.window.range(self.window.len() - run..);
        let empties = tail.clone().filter(|e| e.empty).count() as u32;
        if empties == 0 || !tail.clone().any(|e| e.empty && e.tool == tool) {
            return (0, Detail::Plain);
        }
        // The tools that came back empty, in order; one that was only nudged returned nothing.
        let mut tools: Vec<u32> = Vec::new();
        for entry in tail.filter(|e| e.empty) {
            if !tools.contains(&entry.tool) {
                tools.push(entry.tool);
            }
        }
        (run as u32, Detail::Empty(empties, tools))
    }

    /// The tools of the shortest cycle the window went round twice with the same results
    /// that a call of `key` would start a third round of.
    fn cycle(&self, key: Key) -> Option<(Vec<u32>, bool)> {
        let n = self.window.len();
        for period in 2..=n / 2 {
            let start = n - 2 * period;
            let lap = |i: usize| &self.window[start + i];
            if lap(0).key != key || (0..2 * period).any(|i| lap(i).result.is_none()) {
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

    /// The cached result for `key`, if an allowed call of a `read` tool may use it.
    pub fn cached(&self, decision: &Decision, policy: Option<Policy>, key: Key) -> Option<&R> {
        if decision.action == Action::Allow && policy == Some(Policy::Read) {
            self.cache.get(&key)
        } else {
            None
        }
    }

    /// Applies a decision: counts the step, appends the call or latches the stop, remembers
    /// the call id, counts polls, and forgets cached reads when a call that may write is let
    /// through. `latched` is the verdict to answer every later call with, for a stop.
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
    ) -> Released<V, R, N> {
        let mut released = Released::default();
        self.steps = decision.step;
        let allowed = decision.action == Action::Allow;
        if decision.action == Action::Stop {
            if let Some(old) = std::mem::replace(&mut self.stopped, latched) {
                released.verdicts.push(old);
            }
        } else {
            if self.window.len() >= limits.window {
                self.window.pop_front();
            }
            self.window.push_back(Entry {
                key,
                tool,
                step: decision.step,
                nudged: decision.action == Action::Nudge,
                writes: allowed && policy == Some(Policy::Write),
                result: None,
                empty: false,
            });
        }
        if allowed && matches!(policy, None | Some(Policy::Write)) {
            released.results.extend(self.cache.drain().map(|(_, r)| r));
            self.cache_order.clear();
        }
        if allowed && policy == Some(Policy::Poll) {
            *self.polls.entry(key).or_insert(0) += 1;
        }
        if let Some((call_id, verdict)) = remembered {
            self.remember(call_id, verdict, &mut released);
        }
        released
    }

    /// Records what the call checked at `step` with `key` returned, if it is still in the
    /// window.
    pub fn observe(&mut self, step: u64, key: Key, result: Key, empty: bool) {
        if let Some(entry) = self
            .window
            .iter_mut()
            .rev()
            .find(|e| e.step == step && e.key == key)
        {
            entry.result = Some(result);
            entry.empty = empty;
            self.observed = true;
        }
    }

    /// Remembers the verdict given to a call id.
    pub fn remember(&mut self, call_id: &[u8], verdict: V, released: &mut Released<V, R, N>) {
        let id: Box<[u8]> = call_id.into();
        if let Some(old) = self.by_call_id.insert(id.clone(), verdict) {
            released.verdicts.push(old);
        } else {
            self.call_id_order.push_back(id);
        }
        if self.call_id_order.len() > CALL_ID_MEMORY {
            if let Some(oldest) = self.call_id_order.pop_front() {
                released.verdicts.extend(self.by_call_id.remove(&oldest));
            }
        }
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
                .chain(old.by_call_id.into_values())
                .collect(),
            results: old.cache.into_values().collect(),
            names: old.tool_names,
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
        let decision = state.decide(limits, key, tool, rule);
        let latched = (decision.action == Action::Stop).then_some("stop");
        let policy = rule.map(|r| r.policy);
        state.commit(limits, key, tool, &decision, policy, latched, None);
        decision
    }

    /// Checks, and when allowed observes `result` (0 meaning an empty result).
    fn run_observed(
        state: &mut State,
        key: Key,
        tool: u32,
        rule: Option<ToolRule>,
        result: Key,
    ) -> Decision {
        let decision = run_tool(state, &seed_limits(), key, tool, rule);
        if decision.action == Action::Allow {
            state.observe(decision.step, key, result, result == 0);
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
        let last = state.recall(None);
        assert_eq!(last, Some(&"stop"));
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
        let mut state = State::default();
        assert_eq!(
            run_observed(&mut state, 1, 0, None, 0).action,
            Action::Allow
        );
        let nudge = run_observed(&mut state, 1, 0, None, 0);
        assert_eq!(
            (nudge.action, nudge.detail),
            (Action::Nudge, Detail::Unchanged)
        );
        let stop = run_observed(&mut state, 1, 0, None, 0);
        assert_eq!(
            (stop.action, stop.reason),
            (Action::Stop, Some(Reason::LoopDetected))
        );
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
        let mut state = State::default();
        let actions: Vec<_> = (10..15)
            .map(|key| run_observed(&mut state, key, 0, None, 0))
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
                (Stop, Detail::Empty(3, vec![0])),
            ]
        );
    }

    fn seed_limits() -> Limits {
        Limits::new(12, 2, 3, None).unwrap()
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
        assert_eq!(state.recall(None), Some(&"stop"));
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
        let limits = Limits::new(12, 2, 3, Some(2)).unwrap();
        let mut state = State::default();
        run(&mut state, &limits, 1);
        run(&mut state, &limits, 2);
        let third = run(&mut state, &limits, 3);
        assert_eq!(third.reason, Some(Reason::BudgetExhausted));
        assert_eq!(third.step, 3);
    }

    #[test]
    fn invalid_limits_are_refused() {
        assert!(Limits::new(0, 2, 3, None).is_err());
        assert!(Limits::new(12, 3, 2, None).is_err());
        assert!(Limits::new(12, 1, 3, None).is_err());
        assert!(Limits::new(1, 2, 3, None).is_err());
        assert!(Limits::new(12, 2, 3, Some(0)).is_err());
    }

    #[test]
    fn writes_clear_the_cache_and_reads_use_it() {
        let limits = Limits::new(12, 5, 6, None).unwrap();
        let mut state = State::default();
        let d = state.decide(&limits, 7, 0, None);
        state.commit(&limits, 7, 0, &d, Some(Policy::Read), None, None);
        state.store_result(7, 42);
        let again = state.decide(&limits, 7, 0, None);
        assert_eq!(state.cached(&again, Some(Policy::Read), 7), Some(&42));
        assert_eq!(state.cached(&again, Some(Policy::Volatile), 7), None);
        let write = state.decide(&limits, 8, 1, None);
        let released = state.commit(&limits, 8, 1, &write, Some(Policy::Write), None, None);
        assert_eq!(released.results, vec![42]);
        assert_eq!(state.cached(&again, Some(Policy::Read), 7), None);
    }

    #[test]
    fn call_ids_are_remembered_within_bounds() {
        let mut state = State::default();
        let mut released = Released::default();
        for i in 0..(CALL_ID_MEMORY + 5) {
            state.remember(format!("id{i}").as_bytes(), "v", &mut released);
        }
        assert_eq!(released.verdicts.len(), 5);
        assert!(!state.knows_call_id(b"id0"));
        assert!(state.knows_call_id(format!("id{}", CALL_ID_MEMORY + 4).as_bytes()));
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
        assert_eq!(released.results, vec![5]);
        assert_eq!(state.steps(), 0);
        assert!(state.is_empty());
    }
}
