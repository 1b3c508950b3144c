//! The guard's decision logic (DESIGN.md §2), free of Python: the window of recent keys,
//! the step count, the stop latch, the call-id memory and the read-result cache.
//!
//! Verdicts (`V`) and cached results (`R`) are opaque here, so the Python layer can keep its
//! own objects in them. Anything the state lets go of is handed back as [`Released`] rather
//! than dropped in place: dropping a Python object can run arbitrary Python code, which must
//! not happen while the caller holds the guard's lock.

use std::collections::{HashMap, VecDeque};

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
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::LoopDetected => "loop_detected",
            Reason::BudgetExhausted => "budget_exhausted",
        }
    }
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
}

impl Policy {
    pub const NAMES: [&'static str; 3] = ["read", "write", "volatile"];

    pub fn parse(name: &str) -> Option<Policy> {
        match name {
            "read" => Some(Policy::Read),
            "write" => Some(Policy::Write),
            "volatile" => Some(Policy::Volatile),
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub reason: Option<Reason>,
    pub repeats: u32,
    pub step: u64,
}

/// Objects the state let go of, to be dropped by the caller once its lock is released.
pub struct Released<V, R> {
    pub verdicts: Vec<V>,
    pub results: Vec<R>,
}

impl<V, R> Default for Released<V, R> {
    fn default() -> Self {
        Released {
            verdicts: Vec::new(),
            results: Vec::new(),
        }
    }
}

/// One run's state. Nothing is allocated until the first call.
pub struct RunState<V, R> {
    window: VecDeque<Key>,
    steps: u64,
    stopped: Option<V>,
    by_call_id: HashMap<Box<[u8]>, V>,
    call_id_order: VecDeque<Box<[u8]>>,
    cache: HashMap<Key, R>,
    cache_order: VecDeque<Key>,
}

impl<V, R> Default for RunState<V, R> {
    fn default() -> Self {
        RunState {
            window: VecDeque::new(),
            steps: 0,
            stopped: None,
            by_call_id: HashMap::new(),
            call_id_order: VecDeque::new(),
            cache: HashMap::new(),
            cache_order: VecDeque::new(),
        }
    }
}

impl<V, R> RunState<V, R> {
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

    /// Counts `key` against the window and says what to do; changes nothing.
    pub fn decide(&self, limits: &Limits, key: Key) -> Decision {
        let repeats = self.window.iter().filter(|&&k| k == key).count() as u32 + 1;
        let step = self.steps + 1;
        let (action, reason) = if repeats >= limits.stop_at {
            (Action::Stop, Some(Reason::LoopDetected))
        } else if limits.max_steps.is_some_and(|budget| self.steps >= budget) {
            (Action::Stop, Some(Reason::BudgetExhausted))
        } else if repeats >= limits.nudge_at {
            (Action::Nudge, None)
        } else {
            (Action::Allow, None)
        };
        Decision {
            action,
            reason,
            repeats,
            step,
        }
    }

    /// The cached result for `key`, if an allowed call of a `read` tool may use it.
    pub fn cached(&self, decision: &Decision, policy: Option<Policy>, key: Key) -> Option<&R> {
        if decision.action == Action::Allow && policy == Some(Policy::Read) {
            self.cache.get(&key)
        } else {
            None
        }
    }

    /// Applies a decision: counts the step, appends the key or latches the stop, remembers
    /// the call id, and forgets cached reads when a call that may write is let through.
    /// `latched` is the verdict to answer every later call with, for a stop.
    pub fn commit(
        &mut self,
        limits: &Limits,
        key: Key,
        decision: &Decision,
        policy: Option<Policy>,
        latched: Option<V>,
        remembered: Option<(&[u8], V)>,
    ) -> Released<V, R> {
        let mut released = Released::default();
        self.steps = decision.step;
        if decision.action == Action::Stop {
            if let Some(old) = std::mem::replace(&mut self.stopped, latched) {
                released.verdicts.push(old);
            }
        } else {
            if self.window.len() >= limits.window {
                self.window.pop_front();
            }
            self.window.push_back(key);
        }
        if decision.action == Action::Allow && matches!(policy, None | Some(Policy::Write)) {
            released.results.extend(self.cache.drain().map(|(_, r)| r));
            self.cache_order.clear();
        }
        if let Some((call_id, verdict)) = remembered {
            self.remember(call_id, verdict, &mut released);
        }
        released
    }

    /// Remembers the verdict given to a call id.
    pub fn remember(&mut self, call_id: &[u8], verdict: V, released: &mut Released<V, R>) {
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
    pub fn store_result(&mut self, key: Key, result: R) -> Released<V, R> {
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
    pub fn reset(&mut self) -> Released<V, R> {
        let old = std::mem::take(self);
        Released {
            verdicts: old
                .stopped
                .into_iter()
                .chain(old.by_call_id.into_values())
                .collect(),
            results: old.cache.into_values().collect(),
        }
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// The window, oldest first.
    pub fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.window.iter().copied()
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

    type State = RunState<&'static str, u32>;

    fn run(state: &mut State, limits: &Limits, key: Key) -> Decision {
        let decision = state.decide(limits, key);
        let latched = (decision.action == Action::Stop).then_some("stop");
        state.commit(limits, key, &decision, None, latched, None);
        decision
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
        let d = state.decide(&limits, 7);
        state.commit(&limits, 7, &d, Some(Policy::Read), None, None);
        state.store_result(7, 42);
        let again = state.decide(&limits, 7);
        assert_eq!(state.cached(&again, Some(Policy::Read), 7), Some(&42));
        assert_eq!(state.cached(&again, Some(Policy::Volatile), 7), None);
        let write = state.decide(&limits, 8);
        let released = state.commit(&limits, 8, &write, Some(Policy::Write), None, None);
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
