//! The replay of a long table of calls (`tripwire/replay/formats/table.py`), row by row over
//! Arrow batches, free of Python: each run's calls go through the guard's own `RunState`
//! (`guard.rs`, the one source of the decisions), and whatever only the reference knows
//! (a tool's policy, keys the native parser does not make, what an unusual result means,
//! prices, messages) is asked of a [`Cold`] implementation, once per tool name, model or
//! stop where it can be, and per call only on the rare paths. `simulate.py` is the
//! reference for everything here: the figures a run gets, in the order it gets them.
//!
//! Scope (the Python side sends every other table down its own per-call path): one call a
//! model turn (no `turn` column), arguments as JSON text, results as text, `error` as a
//! boolean, no `usage`; `run`, `tool`, `model`, `label`, `call_id` as the table format
//! reads them.
//!
//! The per-run machinery (a run's guard state, keys, tokens and money, timeline, the calls
//! that led to a stop, results linked to their calls) is [`TableReplay::call`], on the run
//! held open; the events format's JSONL replay (`events_replay.rs`), whose runs interleave,
//! parks its other open runs and puts each line's run in place ([`TableReplay::swap_open`]).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::arrow_ffi::Cell;
use crate::canon::Text;
use crate::guard::{
    Action, Decision, Detail, Limits, Outcome, Question, Reason, RunState, ToolRule,
};
use crate::json::{self, VolatileNames};
use crate::key::{key_of, Key};

/// Steps of a run's timeline kept (`simulate.MAX_TIMELINE`).
pub const MAX_TIMELINE: usize = 2000;
/// `RunOut::sources`: a turn's tokens were estimated; the trace gave a turn's usage.
pub const ESTIMATED: u8 = 1;
pub const USAGE: u8 = 2;

/// Verdicts of calls waiting for their results, per run (`simulate.MAX_PENDING`).
pub const MAX_PENDING: usize = 256;
/// Tool names (and their policies) kept for the whole table: names come from the model, so
/// past this many a new one is looked up each time it comes (the guard bounds its own).
pub const MAX_NAMES: usize = 4096;

/// A tool's policy as the guard uses it (`py_guard::ToolSpec`, reduced to what replay reads).
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub rule: Option<ToolRule>,
    /// Keyed by the native parser (string arguments collapsed): not a whitespace-keeping tool.
    pub native_key: bool,
    /// Results judged by the built-in rules alone (`py_guard::ToolSpec::plain_results`).
    pub plain_results: bool,
}

/// A stop's message detail, with names and texts resolved (the guard's `Detail`).
#[derive(Clone, Debug)]
pub enum StopDetail {
    Plain,
    Unchanged,
    Failed(Arc<str>, u32),
    Errors(u32, Arc<str>),
    Empty(u32, Vec<Arc<str>>),
    Cycle(Vec<Arc<str>>, bool),
    PollLimit(u32),
}

/// A call's arguments as logged: `null` (keyed as `{}`), JSON text (a string the harness
/// gave, keyed as `check_json` keys it), or a JSON value's own text (keyed alike, by the key
/// contract, but shown as the value it is).
#[derive(Clone, Copy, Debug)]
pub enum Args<'a> {
    Null,
    Text(&'a [u8]),
    Value(&'a [u8]),
}

impl<'a> Args<'a> {
    /// The JSON text keyed: `{}` for null.
    fn keyed(self) -> &'a [u8] {
        match self {
            Args::Null => b"{}",
            Args::Text(text) | Args::Value(text) => text,
        }
    }

    fn logged(self) -> Logged {
        let owned = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        match self {
            Args::Null => Logged::Null,
            Args::Text(text) => Logged::Text(owned(text)),
            Args::Value(text) => Logged::Value(owned(text)),
        }
    }
}

/// Arguments as logged, kept for a stop's report (see [`Args`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Logged {
    Null,
    Text(String),
    Value(String),
}

/// A tool result as logged: text (what `content_value` reads as text, JSON or plain) or a
/// JSON value's own text (an object, a list, a number, `null`...).
#[derive(Clone, Copy, Debug)]
pub enum Returned<'a> {
    Text(&'a [u8]),
    Value(&'a [u8]),
}

impl<'a> Returned<'a> {
    fn bytes(self) -> &'a [u8] {
        match self {
            Returned::Text(bytes) | Returned::Value(bytes) => bytes,
        }
    }
}

/// One call, its run resolved: what [`TableReplay::call`] replays.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub tool: &'a [u8],
    pub args: Args<'a>,
    /// Bytes the model produced in this turn, for the token estimate (`Turn.produced`).
    pub produced: u64,
    pub model: Option<&'a [u8]>,
    /// Its row or line: where problems and the stop are.
    pub number: u64,
    /// The id its result is linked by; `None`: its verdict is not kept for a result.
    pub call_id: Option<CallId<'a>>,
    pub result: Option<Returned<'a>>,
    pub error: Option<bool>,
    /// The turn's token counts as the trace gives them (input, output, cache reads, cache
    /// writes: `cost.Usage`); `None`: estimated.
    pub usage: Option<[u64; 4]>,
}

/// A trace's `usage` as the reference reads it (`cost.parse_usage`).
pub enum UsageRead {
    /// Input, output, cache reads, cache writes.
    Counts([u64; 4]),
    /// Not token counts: reported (`"...; tokens estimated"`), and the turn's estimated.
    Problem(String),
    /// None the native core takes (counts too big to sum here): the file is given up.
    Unsupported,
}

/// What only the reference knows. `E`: an error that ends the replay (a Python exception).
pub trait Cold {
    type Error;
    fn spec(&mut self, tool: &[u8]) -> Result<Spec, Self::Error>;
    /// The key of a call the native parser does not key, and whether its arguments were
    /// invalid JSON (keyed by their text); `Ok(Err(why))`: the guard refuses the call.
    fn slow_key(
        &mut self,
        tool: &[u8],
        args: &[u8],
    ) -> Result<Result<(Key, bool), String>, Self::Error>;
    /// What a result says, by the guard's rules (`Guard.observe`); `Ok(Err(why))`: the
    /// guard refuses the result (it is reported, not observed).
    fn describe(
        &mut self,
        tool: &[u8],
        result: Returned<'_>,
        error: Option<bool>,
    ) -> Result<Result<Outcome<Arc<str>>, String>, Self::Error>;
    fn question(&mut self, tool: &[u8], args: &[u8]) -> Result<Option<Question>, Self::Error>;
    /// (input, output, cache read, cache write) dollars per million tokens.
    fn price(&mut self, model: Option<&[u8]>) -> Result<[f64; 4], Self::Error>;
    fn message(&mut self, stop: &Stop, detail: &StopDetail) -> Result<String, Self::Error>;
    /// A `usage` member's JSON text read as token counts.
    fn usage(&mut self, raw: &[u8]) -> Result<UsageRead, Self::Error>;
}

/// A run's figures (`simulate.Counts`).
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub steps: u64,
    pub steps_saved: u64,
    pub turns: u64,
    pub turns_saved: u64,
    pub nudges: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Parts of `input_tokens`: read from, and written to, a prompt cache.
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
    pub input_tokens_saved: u64,
    pub output_tokens_saved: u64,
    pub cost: f64,
    pub cost_guarded: f64,
    pub invalid_arguments: u64,
    pub skipped_calls: u64,
    pub results: u64,
    pub results_unlinked: u64,
}

/// The stop of a run.
#[derive(Clone, Debug)]
pub struct Stop {
    pub step: u64,
    pub reason: Reason,
    pub tool: Arc<str>,
    pub repeats: u32,
    pub key: Key,
    pub row: u64,
    pub message: String,
    /// The stopped call: tool, arguments as logged.
    pub call: (Arc<str>, Logged),
    /// The calls that led to it, the stop last: step, action, tool, arguments.
    pub lead: Vec<(u64, Action, Arc<str>, Logged)>,
}

/// One run, replayed.
#[derive(Debug)]
pub struct RunOut {
    pub name: String,
    pub counts: Counts,
    pub nudge: Option<(u64, Arc<str>)>,
    pub stop: Option<Stop>,
    pub timeline: Vec<u8>,
    pub model: Option<String>,
    pub reward: Option<f64>,
    /// Nudges by tool, in the order the tools were first nudged.
    pub tool_nudges: Vec<(Arc<str>, u64)>,
    /// Model calls by model named, in the order first named.
    pub models: Vec<(String, u64)>,
    /// Where its token figures came from (`Source`): `ESTIMATED` and `USAGE` bits, both for
    /// "mixed", none for "none".
    pub sources: u8,
    /// The row or line of its first call, and its part (a run finished early and seen again
    /// goes on as a new part: `simulate.RunResult.part`).
    pub line: u64,
    pub part: u32,
}

/// Bad input, skipped: the row and the message (`Problem(path, None, message, "row N")`).
pub type RowProblem = (u64, String);

type State = RunState<(), u64, Arc<str>>;

/// (input, output, cache read, cache write) dollars per million tokens.
type Prices = [f64; 4];

/// A verdict waiting for its call's result.
#[derive(Clone)]
struct Waiting {
    step: u64,
    key: Key,
    action: Action,
    tool: Arc<str>,
}

/// A call's id as the trace gives it, or the row's (line's) own for a call without one.
#[derive(Clone, Copy)]
pub enum CallId<'a> {
    Given(&'a [u8]),
    Row(u64),
}

impl CallId<'_> {
    fn owned(self) -> OwnedId {
        match self {
            CallId::Given(bytes) => OwnedId::Given(bytes.into()),
            CallId::Row(n) => OwnedId::Row(n),
        }
    }
}

enum OwnedId {
    Given(Box<[u8]>),
    Row(u64),
}

impl OwnedId {
    fn is(&self, id: CallId<'_>) -> bool {
        match (self, id) {
            (OwnedId::Given(a), CallId::Given(b)) => **a == *b,
            (OwnedId::Row(a), CallId::Row(b)) => *a == b,
            _ => false,
        }
    }
}

/// A call in the lead (`simulate._Run.lead`): its arguments' buffer is reused.
struct LeadCall {
    step: u64,
    action: Action,
    tool: Arc<str>,
    args: Vec<u8>,
    kind: Kind,
}

/// What a lead call's arguments were ([`Args`], its text in the buffer).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Text,
    Value,
}

/// A run being replayed.
pub struct Open {
    name: String,
    state: State,
    counts: Counts,
    nudge: Option<(u64, Arc<str>)>,
    stop: Option<Stop>,
    timeline: Vec<u8>,
    lead: VecDeque<LeadCall>,
    transcript: u64,
    model: Option<String>,
    label: Option<f64>,
    tool_nudges: Vec<(Arc<str>, u64)>,
    models: Vec<(String, u64)>,
    pending: VecDeque<(OwnedId, Waiting)>,
    sources: u8,
    line: u64,
    part: u32,
}

impl Open {
    pub fn new(name: String, line: u64, part: u32) -> Box<Open> {
        Box::new(Open {
            name,
            state: State::default(),
            counts: Counts::default(),
            nudge: None,
            stop: None,
            timeline: Vec::new(),
            lead: VecDeque::new(),
            transcript: 0,
            model: None,
            label: None,
            tool_nudges: Vec::new(),
            models: Vec::new(),
            pending: VecDeque::new(),
            sources: 0,
            line,
            part,
        })
    }

    pub fn part(&self) -> u32 {
        self.part
    }
}

/// One row's cells, as the Python side mapped the columns.
pub struct Row<'a> {
    pub run: Cell<'a>,
    pub tool: Cell<'a>,
    pub args: Cell<'a>,
    pub result: Cell<'a>,
    pub error: Cell<'a>,
    pub call_id: Cell<'a>,
    pub model: Cell<'a>,
    pub label: Cell<'a>,
}

/// The replay of one table: rows in, finished runs and problems out.
pub struct TableReplay {
    limits: Limits,
    /// Verdicts waiting for their results a run holds, the oldest forgotten past it
    /// (`simulate.MAX_PENDING`).
    pub max_pending: usize,
    observe: bool,
    /// The guard's volatile keys, and the default ones (results are keyed with those).
    volatile: Arc<VolatileNames>,
    default_volatile: Arc<VolatileNames>,
    /// The guard's volatile keys can be compared natively (all exact `str`s).
    native_keys: bool,
    specs: crate::guard::NameMap<(Spec, Arc<str>)>,
    /// Prices by model name (at most `MAX_NAMES`), and of turns that name none.
    prices: crate::guard::NameMap<Prices>,
    unnamed_price: Option<Prices>,
    /// Its name's buffer is reused: the tool changes on most calls of some fleets.
    last_tool: Option<(Vec<u8>, Spec, Arc<str>)>,
    open: Option<Box<Open>>,
    pub row: u64,
    pub turns: u64,
    pub finished: Vec<RunOut>,
    pub problems: Vec<RowProblem>,
    buffer: Vec<u8>,
    /// Cells of text columns longer than this skip their row (`files.MAX_LINE_BYTES`), with
    /// the message given for the first such column of the row, in `Row`'s order.
    pub cell_limit: usize,
    pub too_long: [Option<String>; 8],
    /// Tools in the order the fleet's per-tool figures first hear of them (a run nudged on
    /// one, or finished stopped on one), each once; taken by the Python side, which makes
    /// their entries in that order (`Fleet.tool`), as the per-call path would.
    pub tools_heard: Vec<Arc<str>>,
    heard: crate::guard::NameMap<()>,
    /// Every text given is known to be UTF-8 (the events replay reads only such lines, and
    /// unescapes nothing else): not checked again.
    pub texts_utf8: bool,
}

fn text(cell: Cell<'_>) -> Option<&[u8]> {
    match cell {
        Cell::Text(bytes) => Some(bytes),
        _ => None,
    }
}

/// Python's `len()` of UTF-8 text: its code points.
fn chars(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| (b & 0xC0) != 0x80).count() as u64
}

/// `-(-n // 4)`: tokens of `n` bytes (`cost.estimate`).
fn tokens(n: u64) -> u64 {
    n.div_ceil(4)
}

/// Whether a JSON object text (already parsed once, so well formed) may be a harness's
/// envelope rather than a tool's value (the reference's `unwrap` reads `type`, `role`,
/// `content`, `tool_use_id` and `tool_call_id`): any of those names quoted anywhere in it, or
/// a `\\u` escape that could spell one. Conservative: such results go to the reference.
/// One pass over the text, from quote to quote and backslash to backslash (a search for
/// each name was a pass each, over results that are often long).
fn may_be_envelope(bytes: &[u8]) -> bool {
    const NAMES: [&[u8]; 5] = [
        b"type\"",
        b"role\"",
        b"content\"",
        b"tool_use_id\"",
        b"tool_call_id\"",
    ];
    let mut i = 0;
    while let Some(at) = crate::jsonl::find(b'"', &bytes[i..]) {
        let rest = &bytes[i + at + 1..];
        if NAMES.iter().any(|name| rest.starts_with(name)) {
            return true;
        }
        i += at + 1;
    }
    let mut i = 0;
    while let Some(at) = crate::jsonl::find(b'\\', &bytes[i..]) {
        if bytes.get(i + at + 1) == Some(&b'u') {
            return true;
        }
        i += at + 1;
    }
    false
}

/// Whether a JSON object text is `{}` (whitespace aside): the reference's `_is_empty`.
fn empty_object(text: &[u8]) -> bool {
    let mut inner = text
        .iter()
        .skip(1)
        .filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    inner.next() == Some(&b'}')
}

/// Whether no string in this JSON text holds whitespace (nor an escape that could be some):
/// then keeping strings' whitespace (a whitespace-keeping tool's key, the reference's
/// `verbatim_key_json`) and collapsing it key the call alike, and the native parser keys it.
/// ASCII only, and no whitespace byte anywhere, so a text with any is left to the reference.
fn nothing_to_collapse(text: &[u8]) -> bool {
    text.iter()
        .all(|&b| b.is_ascii() && b != b'\\' && !matches!(b, 0x09..=0x0D | 0x1C..=0x20))
}

impl TableReplay {
    pub fn new(
        limits: Limits,
        observe: bool,
        volatile: Arc<VolatileNames>,
        default_volatile: Arc<VolatileNames>,
        native_keys: bool,
    ) -> TableReplay {
        TableReplay {
            limits,
            max_pending: MAX_PENDING,
            observe,
            volatile,
            default_volatile,
            native_keys,
            specs: Default::default(),
            prices: Default::default(),
            unnamed_price: None,
            last_tool: None,
            open: None,
            row: 0,
            turns: 0,
            finished: Vec::new(),
            problems: Vec::new(),
            buffer: Vec::new(),
            cell_limit: usize::MAX,
            too_long: Default::default(),
            tools_heard: Vec::new(),
            heard: Default::default(),
            texts_utf8: false,
        }
    }

    /// A tool's policy, and its name kept with it (one copy a name), remembered as the last
    /// tool's: agents call one tool again and again. One map for both: the tool changes on
    /// most calls of some fleets.
    fn spec<C: Cold>(&mut self, cold: &mut C, tool: &[u8]) -> Result<Spec, C::Error> {
        if let Some((last, spec, _)) = &self.last_tool {
            if **last == *tool {
                return Ok(*spec);
            }
        }
        let (spec, name) = match self.specs.get(tool) {
            Some((spec, name)) => (*spec, name.clone()),
            None => {
                let spec = cold.spec(tool)?;
                let name: Arc<str> = String::from_utf8_lossy(tool).into();
                if self.specs.len() < MAX_NAMES {
                    self.specs.insert(tool.into(), (spec, name.clone()));
                }
                (spec, name)
            }
        };
        match &mut self.last_tool {
            Some((last, last_spec, last_name)) => {
                last.clear();
                last.extend_from_slice(tool);
                *last_spec = spec;
                *last_name = name;
            }
            None => self.last_tool = Some((tool.to_vec(), spec, name)),
        }
        Ok(spec)
    }

    /// The tool's name as kept: the last tool's (`spec` was just asked of it).
    fn tool_name(&mut self, tool: &[u8]) -> Arc<str> {
        match &self.last_tool {
            Some((last, _, name)) if **last == *tool => name.clone(),
            _ => String::from_utf8_lossy(tool).into(),
        }
    }

    fn price<C: Cold>(&mut self, cold: &mut C, model: Option<&[u8]>) -> Result<[f64; 4], C::Error> {
        let known = match model {
            Some(name) => self.prices.get(name).copied(),
            None => self.unnamed_price,
        };
        if let Some(price) = known {
            return Ok(price);
        }
        let price = cold.price(model)?;
        match model {
            Some(name) if self.prices.len() < MAX_NAMES => {
                self.prices.insert(name.into(), price);
            }
            Some(_) => {}
            None => self.unnamed_price = Some(price),
        }
        Ok(price)
    }

    /// The native key of a call, or `None` where only the reference keys it.
    fn native_key(&mut self, tool: &[u8], args: &[u8], volatile: bool) -> Option<Key> {
        if args.starts_with(b"\xEF\xBB\xBF")
            || !(self.texts_utf8 || std::str::from_utf8(args).is_ok())
        {
            return None; // json.loads refuses a BOM in a str; only valid UTF-8 is read here
        }
        let names = if volatile {
            &*self.volatile
        } else {
            &*self.default_volatile
        };
        let mut out = std::mem::take(&mut self.buffer);
        out.clear();
        let written = json::canonical_call_append(
            &mut out,
            json::ToolName::Text(Text::Wtf8(tool)),
            args,
            names,
            json::MIN_INT_DIGIT_LIMIT,
        );
        let key = written.ok().map(|()| key_of(&out));
        self.buffer = out;
        key
    }

    /// One row of the table (`table._Rows.batch`, then `Fleet.feed` on its events).
    pub fn row<C: Cold>(&mut self, cold: &mut C, row: Row<'_>) -> Result<(), C::Error> {
        self.row += 1;
        let number = self.row;
        let cells = [
            row.run,
            row.tool,
            row.args,
            row.result,
            row.error,
            row.call_id,
            row.model,
            row.label,
        ];
        for (cell, message) in cells.iter().zip(&self.too_long) {
            if let (Cell::Text(bytes), Some(message)) = (cell, message) {
                if bytes.len() > self.cell_limit {
                    self.problems.push((number, message.clone()));
                    return Ok(());
                }
            }
        }
        let mut digits = itoa::Buffer::new();
        let run_name: &[u8] = match row.run {
            Cell::Text(bytes) if !bytes.is_empty() => bytes,
            Cell::Int(n) => digits.format(n).as_bytes(),
            Cell::UInt(n) => digits.format(n).as_bytes(),
            Cell::Text(_) => {
                self.problems
                    .push((number, "run is '', not a name; row skipped".into()));
                return Ok(());
            }
            _ => {
                self.problems
                    .push((number, "run is None, not a name; row skipped".into()));
                return Ok(());
            }
        };
        if self
            .open
            .as_ref()
            .is_some_and(|o| *o.name.as_bytes() != *run_name)
        {
            self.end();
        }
        let tool = match text(row.tool) {
            Some(t) if !t.is_empty() => t,
            Some(_) => {
                self.problems
                    .push((number, "tool is '', not a name; row skipped".into()));
                return Ok(());
            }
            None => {
                self.problems
                    .push((number, "tool is None, not a name; row skipped".into()));
                return Ok(());
            }
        };
        let args = text(row.args);
        let label = match row.label {
            Cell::Bool(b) => Some(if b { 1.0 } else { 0.0 }),
            Cell::Int(n) => Some(n as f64),
            Cell::UInt(n) => Some(n as f64),
            Cell::Float(f) => Some(f),
            _ => None,
        };
        let model = text(row.model);
        let error = match row.error {
            Cell::Bool(b) => Some(b),
            _ => None,
        };
        let result = text(row.result);
        let mut id_digits = itoa::Buffer::new();
        let call_id = match row.call_id {
            Cell::Text(bytes) => CallId::Given(bytes),
            Cell::Int(n) => CallId::Given(id_digits.format(n).as_bytes()),
            Cell::UInt(n) => CallId::Given(id_digits.format(n).as_bytes()),
            // The table format's own id for a call without one: unique to its row.
            _ => CallId::Row(number),
        };
        if self.open.is_none() {
            let name = String::from_utf8_lossy(run_name).into_owned();
            self.open = Some(Open::new(name, number, 1));
        }
        if let (Some(label), Some(open)) = (label, self.open.as_mut()) {
            open.label = Some(label);
        }
        self.call(
            cold,
            Call {
                tool,
                args: args.map_or(Args::Null, Args::Text),
                // Tokens are estimated from the arguments' characters (`table._Rows`).
                produced: args.map_or(0, chars),
                model,
                number,
                call_id: Some(call_id),
                result: result.map(Returned::Text),
                error,
                usage: None,
            },
        )
    }

    /// Puts `run` in place as the open run (the one [`call`](Self::call) replays into) and
    /// hands back the one that was: a replay whose runs interleave keeps the others aside.
    pub fn swap_open(&mut self, run: Option<Box<Open>>) -> Option<Box<Open>> {
        std::mem::replace(&mut self.open, run)
    }

    /// One call of the open run, a model turn of its own (`Fleet._turn` with `_check`, then
    /// the call's result, `Fleet._result`, or its verdict kept for one).
    pub fn call<C: Cold>(&mut self, cold: &mut C, call: Call<'_>) -> Result<(), C::Error> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        self.turns += 1;
        let ran = open.stop.is_none();
        let mut checked: Option<Waiting> = None;
        if ran {
            checked = self.check(cold, call.tool, call.args, call.number)?;
        } else {
            open.counts.steps += 1;
            if open.timeline.len() < MAX_TIMELINE {
                open.timeline.push(b'.');
            }
        }
        self.money(cold, call.produced, call.model, call.usage, ran)?;
        if !self.observe {
            return Ok(());
        }
        // The result, after its turn (`_Rows._flush`, `Lines.feed`).
        match (call.result, call.call_id) {
            (Some(result), Some(call_id)) => {
                self.result(cold, call_id, checked, result, call.error, call.number)?;
            }
            (None, Some(call_id)) => {
                if let Some(waiting) = checked {
                    self.wait(call_id, waiting);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether results are given to the guard (`Fleet._observe`).
    pub fn observes(&self) -> bool {
        self.observe
    }

    /// A result given apart from its call (the events format's `result_of` line) to the open
    /// run: linked to the newest verdict waiting under its id (`Fleet._result`).
    pub fn result_apart<C: Cold>(
        &mut self,
        cold: &mut C,
        call_id: CallId<'_>,
        result: Returned<'_>,
        number: u64,
    ) -> Result<(), C::Error> {
        self.result(cold, call_id, None, result, None, number)
    }

    fn wait(&mut self, call_id: CallId<'_>, waiting: Waiting) {
        let Some(open) = self.open.as_mut() else {
            return;
        };
        if let Some(at) = open.pending.iter().rposition(|(id, _)| id.is(call_id)) {
            open.pending.remove(at);
        }
        open.pending.push_back((call_id.owned(), waiting));
        if open.pending.len() > self.max_pending {
            open.pending.pop_front();
        }
    }

    /// Checks the row's call (`Fleet._check`); the verdict to wait for its result, unless it
    /// stopped the run or was skipped.
    fn check<C: Cold>(
        &mut self,
        cold: &mut C,
        tool: &[u8],
        args: Args<'_>,
        number: u64,
    ) -> Result<Option<Waiting>, C::Error> {
        let spec = self.spec(cold, tool)?;
        let keyed = args.keyed();
        let native = if self.native_keys && (spec.native_key || nothing_to_collapse(keyed)) {
            self.native_key(tool, keyed, true)
        } else {
            None
        };
        let (key, invalid) = match native {
            Some(key) => (key, false),
            None => match cold.slow_key(tool, keyed)? {
                Ok(found) => found,
                Err(why) => {
                    let open = self.open.as_mut().expect("open run");
                    open.counts.skipped_calls += 1;
                    let name = String::from_utf8_lossy(tool);
                    self.problems
                        .push((number, format!("call to {name} skipped: {why}")));
                    return Ok(None);
                }
            },
        };
        let name = self.tool_name(tool);
        let wants = self.open.as_ref().is_some_and(|o| o.state.wants);
        let question = if wants {
            cold.question(tool, keyed)?
        } else {
            None
        };
        let open = self.open.as_mut().expect("open run");
        let state = &mut open.state;
        let tool_id = state.intern_tool(tool, || name.clone());
        let decision: Decision = state.decide(&self.limits, key, spec.rule, question);
        let action = decision.action;
        if invalid {
            open.counts.invalid_arguments += 1;
        }
        if open.timeline.len() < MAX_TIMELINE {
            open.timeline.push(match action {
                Action::Allow => b'a',
                Action::Nudge => b'n',
                Action::Stop => b's',
            });
        }
        // The lead: the last `window` calls, buffers reused.
        let mut call = if open.lead.len() >= self.limits.window {
            open.lead.pop_front().expect("non-empty")
        } else {
            LeadCall {
                step: 0,
                action,
                tool: name.clone(),
                args: Vec::new(),
                kind: Kind::Null,
            }
        };
        call.step = decision.step;
        call.action = action;
        call.tool = name.clone();
        call.args.clear();
        call.args.extend_from_slice(keyed);
        call.kind = match args {
            Args::Null => Kind::Null,
            Args::Text(_) => Kind::Text,
            Args::Value(_) => Kind::Value,
        };
        open.lead.push_back(call);
        let detail = if action == Action::Stop {
            let names = |ids: &[u32]| -> Vec<Arc<str>> {
                ids.iter()
                    .filter_map(|&id| state.tool_name(id).cloned())
                    .collect()
            };
            let error = |digest: &Key| -> Arc<str> {
                state
                    .error_text(*digest)
                    .cloned()
                    .unwrap_or_else(|| "".into())
            };
            Some(match &decision.detail {
                Detail::Plain => StopDetail::Plain,
                Detail::Unchanged => StopDetail::Unchanged,
                Detail::Failed(digest, n) => StopDetail::Failed(error(digest), *n),
                Detail::Errors(n, digest) => StopDetail::Errors(*n, error(digest)),
                Detail::Empty(n, ids) => StopDetail::Empty(*n, names(ids)),
                Detail::Cycle(ids, writes) => StopDetail::Cycle(names(ids), *writes),
                Detail::PollLimit(n) => StopDetail::PollLimit(*n),
            })
        } else {
            None
        };
        let policy = spec.rule.map(|r| r.policy);
        let held = (question.is_none() && action == Action::Allow).then_some(decision.step);
        let latched = (action == Action::Stop).then_some(());
        drop(state.commit(
            &self.limits,
            key,
            tool_id,
            &decision,
            policy,
            latched,
            None,
            question,
            held.map(|step| (step, true)),
        ));
        match action {
            Action::Nudge => {
                open.counts.nudges += 1;
                if open.nudge.is_none() {
                    open.nudge = Some((decision.step, name.clone()));
                }
                match open.tool_nudges.iter_mut().find(|(t, _)| *t == name) {
                    Some((_, n)) => *n += 1,
                    None => open.tool_nudges.push((name.clone(), 1)),
                }
                hear(&mut self.heard, &mut self.tools_heard, &name);
            }
            Action::Stop => {
                open.counts.steps += 1; // this turn's one distinct call (`_stopped`)
                open.pending.clear();
                let mut stop = Stop {
                    step: decision.step,
                    reason: decision.reason.unwrap_or(Reason::LoopDetected),
                    tool: name.clone(),
                    repeats: decision.repeats,
                    key,
                    row: number,
                    message: String::new(),
                    call: (name.clone(), args.logged()),
                    lead: open
                        .lead
                        .drain(..)
                        .map(|c| {
                            let args = match c.kind {
                                Kind::Null => Args::Null,
                                Kind::Text => Args::Text(&c.args),
                                Kind::Value => Args::Value(&c.args),
                            };
                            (c.step, c.action, c.tool, args.logged())
                        })
                        .collect(),
                };
                let detail = detail.unwrap_or(StopDetail::Plain);
                stop.message = cold.message(&stop, &detail)?;
                let open = self.open.as_mut().expect("open run");
                open.stop = Some(stop);
                return Ok(None);
            }
            Action::Allow => {}
        }
        open.counts.steps = open.state.steps();
        Ok(Some(Waiting {
            step: decision.step,
            key,
            action,
            tool: name,
        }))
    }

    /// The turn's tokens and money (`Fleet._turn`, after the check): the trace's usage, else
    /// estimated from the run's transcript.
    fn money<C: Cold>(
        &mut self,
        cold: &mut C,
        produced: u64,
        model: Option<&[u8]>,
        usage: Option<[u64; 4]>,
        ran: bool,
    ) -> Result<(), C::Error> {
        let price = self.price(cold, model)?;
        let open = self.open.as_mut().expect("open run");
        let [input, output, cached, written] = match usage {
            Some(counts) => {
                open.sources |= USAGE;
                counts
            }
            None => {
                open.sources |= ESTIMATED;
                [tokens(open.transcript), tokens(produced), 0, 0]
            }
        };
        open.transcript += produced;
        if let Some(model) = model {
            let model = String::from_utf8_lossy(model);
            open.model = Some(model.clone().into_owned());
            match open.models.iter_mut().find(|(m, _)| **m == *model) {
                Some((_, n)) => *n += 1,
                None => open.models.push((model.into_owned(), 1)),
            }
        }
        // As `Prices.cost`, term by term in its order (`parse_usage` keeps the cached and
        // written parts within the input).
        let [p_in, p_out, p_read, p_write] = price;
        let fresh = input.saturating_sub(cached).saturating_sub(written);
        let cost = (fresh as f64 * p_in
            + cached as f64 * p_read
            + written as f64 * p_write
            + output as f64 * p_out)
            / 1e6;
        let counts = &mut open.counts;
        counts.turns += 1;
        counts.input_tokens += input;
        counts.output_tokens += output;
        counts.cached_tokens += cached;
        counts.cache_write_tokens += written;
        counts.cost += cost;
        if ran {
            counts.cost_guarded += cost;
        } else {
            counts.turns_saved += 1;
            counts.input_tokens_saved += input;
            counts.output_tokens_saved += output;
        }
        Ok(())
    }

    /// A tool result (`Fleet._result`): to the guard, with its call's verdict.
    fn result<C: Cold>(
        &mut self,
        cold: &mut C,
        call_id: CallId<'_>,
        checked: Option<Waiting>,
        result: Returned<'_>,
        error: Option<bool>,
        number: u64,
    ) -> Result<(), C::Error> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if open.stop.is_some() {
            return Ok(()); // the run is over
        }
        // The call's own verdict is the newest waiting under its id (`_await_results`).
        let waiting = match checked {
            Some(waiting) => {
                if let Some(at) = open.pending.iter().rposition(|(id, _)| id.is(call_id)) {
                    open.pending.remove(at);
                }
                // The reference keeps it a moment (`_await_results`), forgetting the oldest
                // verdict waiting if that makes one too many, then takes it back.
                if open.pending.len() >= self.max_pending {
                    open.pending.pop_front();
                }
                Some(waiting)
            }
            None => open
                .pending
                .iter()
                .rposition(|(id, _)| id.is(call_id))
                .and_then(|at| open.pending.remove(at))
                .map(|(_, w)| w),
        };
        let Some(waiting) = waiting else {
            open.counts.results_unlinked += 1;
            return Ok(());
        };
        open.counts.results += 1;
        if waiting.action != Action::Allow {
            return Ok(());
        }
        let spec = self.spec(cold, waiting.tool.as_bytes())?;
        let outcome = match self.plain_outcome(&spec, result.bytes(), error) {
            Some(outcome) => outcome,
            None => match cold.describe(waiting.tool.as_bytes(), result, error)? {
                Ok(outcome) => outcome,
                Err(why) => {
                    // Not observed, as the reference's `_result` reports it.
                    self.problems
                        .push((number, format!("result not observed: {why}")));
                    return Ok(());
                }
            },
        };
        let open = self.open.as_mut().expect("open run");
        let (released, ask) = open.state.observe(waiting.step, waiting.key, None, outcome);
        drop(released);
        if let Some(Some((step, _))) = ask {
            let args = open
                .lead
                .iter()
                .rev()
                .find(|c| c.step == step)
                .map(|c| c.args.clone());
            if let Some(args) = args {
                let question = cold.question(waiting.tool.as_bytes(), &args)?;
                let open = self.open.as_mut().expect("open run");
                open.state.set_question(waiting.step, waiting.key, question);
            }
        }
        Ok(())
    }

    /// The commonest result natively: a JSON object that is no harness's envelope, told as
    /// no failure, of a tool whose results the built-in rules judge. Its digest is the
    /// reference's `call_key("result", json.loads(text))` (the key contract makes the JSON
    /// text's key that of its value), empty when it has no keys. `None`: the reference's.
    fn plain_outcome(
        &mut self,
        spec: &Spec,
        result: &[u8],
        error: Option<bool>,
    ) -> Option<Outcome<Arc<str>>> {
        if !spec.plain_results || error == Some(true) || result.first() != Some(&b'{') {
            return None;
        }
        let key = self.native_key(b"result", result, false)?;
        if may_be_envelope(result) {
            return None;
        }
        Some(Outcome {
            result: Some(key),
            empty: empty_object(result),
            failed: false,
            transient: false,
            error: None,
        })
    }

    /// The open run is over (`_Rows.end`, `Fleet._finish`).
    pub fn end(&mut self) {
        let Some(open) = self.open.take() else { return };
        let open = *open;
        let mut counts = open.counts;
        if let Some(stop) = &open.stop {
            counts.steps_saved = counts.steps - (stop.step - 1);
            hear(&mut self.heard, &mut self.tools_heard, &stop.tool);
        }
        self.finished.push(RunOut {
            name: open.name,
            counts,
            nudge: open.nudge,
            stop: open.stop,
            timeline: open.timeline,
            model: open.model,
            reward: open.label,
            tool_nudges: open.tool_nudges,
            models: open.models,
            sources: open.sources,
            line: open.line,
            part: open.part,
        });
    }
}

/// Notes a tool the fleet's figures hear of, the first time (see `tools_heard`).
fn hear(heard: &mut crate::guard::NameMap<()>, order: &mut Vec<Arc<str>>, tool: &Arc<str>) {
    if !heard.contains_key(tool.as_bytes()) {
        heard.insert(tool.as_bytes().into(), ());
        order.push(tool.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_and_empty_objects() {
        assert!(empty_object(b"{}"));
        assert!(empty_object(b"{ \n }"));
        assert!(!empty_object(br#"{"a": null}"#));
        assert!(!may_be_envelope(
            r#"{"ok": true, "text": "a type"}"#.as_bytes()
        ));
        assert!(may_be_envelope(r#"{"type": "text"}"#.as_bytes()));
        assert!(may_be_envelope(r#"{"tool_use_id": null}"#.as_bytes()));
        assert!(may_be_envelope(r#"{"t\u0079pe": 1}"#.as_bytes()));
        // As a search for each name (its twin), on texts made of pieces of the names.
        let twin = |text: &str| {
            [
                "\"type\"",
                "\"role\"",
                "\"content\"",
                "\"tool_use_id\"",
                "\"tool_call_id\"",
                "\\u",
            ]
            .iter()
            .any(|name| text.contains(name))
        };
        let pieces = [
            "\"",
            "type",
            "role",
            "content",
            "tool_use_id",
            "tool_call_id",
            "\\",
            "u",
            "x",
            "\\\"",
        ];
        let mut next = crate::test_rng::xorshift(0xe7e1);
        for _ in 0..20_000 {
            let text: String = (0..(next() % 12))
                .map(|_| pieces[(next() % 10) as usize])
                .collect();
            assert_eq!(may_be_envelope(text.as_bytes()), twin(&text), "{text}");
        }
    }

    /// The reference's answers, made up: every tool without a policy, a fixed price.
    struct Fixed;

    impl Cold for Fixed {
        type Error = String;
        fn spec(&mut self, _: &[u8]) -> Result<Spec, String> {
            Ok(Spec {
                rule: None,
                native_key: true,
                plain_results: true,
            })
        }
        fn slow_key(
            &mut self,
            _: &[u8],
            args: &[u8],
        ) -> Result<Result<(Key, bool), String>, String> {
            Ok(Ok((key_of(args), true)))
        }
        fn describe(
            &mut self,
            _: &[u8],
            _: Returned<'_>,
            _: Option<bool>,
        ) -> Result<Result<Outcome<Arc<str>>, String>, String> {
            Err("not asked in these tests".into())
        }
        fn question(&mut self, _: &[u8], _: &[u8]) -> Result<Option<Question>, String> {
            Ok(None)
        }
        fn price(&mut self, _: Option<&[u8]>) -> Result<[f64; 4], String> {
            Ok([3.0, 15.0, 0.3, 3.75])
        }
        fn message(&mut self, stop: &Stop, _: &StopDetail) -> Result<String, String> {
            Ok(format!("stopped at {}", stop.step))
        }
        fn usage(&mut self, _: &[u8]) -> Result<UsageRead, String> {
            Err("not asked in these tests".into())
        }
    }

    fn replay(rows: &[(&str, &str, Option<&str>)]) -> (Vec<RunOut>, Vec<RowProblem>) {
        let names = || Arc::new(VolatileNames::new(vec![b"request_id".to_vec()]));
        let limits = Limits {
            window: 12,
            nudge_at: 2,
            stop_at: 3,
            max_steps: None,
        };
        let mut core = TableReplay::new(limits, true, names(), names(), true);
        for (run, tool, result) in rows {
            core.row(
                &mut Fixed,
                Row {
                    run: Cell::Text(run.as_bytes()),
                    tool: Cell::Text(tool.as_bytes()),
                    args: Cell::Text(b"{\"q\": 1}"),
                    result: result.map_or(Cell::Null, |r| Cell::Text(r.as_bytes())),
                    error: Cell::Bool(false),
                    call_id: Cell::Null,
                    model: Cell::Null,
                    label: Cell::Null,
                },
            )
            .expect("no cold error");
        }
        core.end();
        (core.finished, core.problems)
    }

    #[test]
    fn a_repeated_call_is_stopped_and_the_rest_counted_as_saved() {
        let rows = [
            ("a", "t", None),
            ("a", "t", None),
            ("a", "t", None),
            ("a", "t", None),
            ("b", "", None),
        ];
        let (runs, problems) = replay(&rows);
        assert_eq!(
            problems,
            vec![(5, "tool is '', not a name; row skipped".to_string())]
        );
        let [run] = &runs[..] else { panic!("one run") };
        let stop = run.stop.as_ref().expect("stopped");
        assert_eq!((stop.step, stop.message.as_str()), (3, "stopped at 3"));
        assert_eq!(
            (run.counts.steps, run.counts.steps_saved, run.counts.nudges),
            (4, 2, 1)
        );
        assert_eq!(run.timeline, b"ans.");
        assert_eq!(stop.lead.len(), 3);
        // Tokens: each turn re-sends the transcript so far (8 characters of arguments a
        // turn, 4 to a token, rounded up).
        assert_eq!(run.counts.input_tokens, 2 + 4 + 6);
        assert_eq!(run.counts.turns_saved, 1);
    }

    #[test]
    fn results_that_change_are_progress() {
        let rows = [
            ("a", "t", Some(r#"{"n":1}"#)),
            ("a", "t", Some(r#"{"n":2}"#)),
            ("a", "t", Some(r#"{"n":3}"#)),
            ("a", "t", Some(r#"{"n":4}"#)),
        ];
        let (runs, _) = replay(&rows);
        assert!(runs[0].stop.is_none());
        assert_eq!(runs[0].counts.results, 4);
    }

    #[test]
    fn chars_counts_code_points() {
        assert_eq!(chars("a€😀".as_bytes()), 3);
        assert_eq!(tokens(0), 0);
        assert_eq!(tokens(5), 2);
    }

    #[test]
    fn collapsing_changes_nothing_only_without_whitespace() {
        assert!(nothing_to_collapse(br#"{"path":"a.py","line":3}"#));
        assert!(!nothing_to_collapse(br#"{"path": "a.py"}"#));
        assert!(!nothing_to_collapse(br#"{"code":"a\nb"}"#));
        assert!(!nothing_to_collapse("{\"x\":\"\u{3000}\"}".as_bytes()));
        assert!(!nothing_to_collapse(b"{\"x\":\"a\x1fb\"}"));
    }
}
