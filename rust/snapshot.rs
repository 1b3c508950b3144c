//! A guard's run state as bytes (issue 18), free of Python. The format is defined field by
//! field once, in `python/tripwire/_snapshot.py` (the reference writes it too); this module
//! writes and reads the same bytes for [`RunState`], so each backend restores the other's
//! snapshots and identical state gives identical bytes.
//!
//! The state's opaque values (verdicts, cached results, error texts) go through the
//! [`Encode`] and [`Decode`] the caller gives; verdicts are written and read as
//! [`VerdictData`], whose layout is here.
//! Reading validates everything a corrupt or foreign snapshot could get wrong and builds a
//! new state, so a failed read changes nothing and nothing read can make the guard panic.

use crate::guard::{
    Action, CallIds, Counts, Entry, Question, Reason, Remembered, RunState, CACHE_ENTRIES,
    CALL_ID_MEMORY, COUNTED_CALLS, TRANSIENT_RETRIES,
};
use crate::json::is_wtf8;
use crate::key::Key;

pub const MAGIC: &[u8; 4] = b"TWGS";
pub const VERSION: u8 = 1;
/// A snapshot with its configuration.
pub const FULL: u8 = 0;
/// A snapshot with the configuration's digest only.
pub const STATE_ONLY: u8 = 1;

const NUDGED: u8 = 1;
const WRITES: u8 = 2;
const CHANGES: u8 = 4;
const HAS_RESULT: u8 = 8;
const EMPTY: u8 = 16;
const FAILED: u8 = 32;
const RETRY: u8 = 64;
const QUESTION: u8 = 128;

/// The head bit of a verdict with a cached result.
pub const H_CACHED: u8 = 16;
const H_CALL_ID: u8 = 32;
const H_DUPLICATE: u8 = 64;
const H_INVALID: u8 = 128;

/// Why bytes are not a snapshot this guard can restore; the text says which part is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError(pub String);

pub type Result<T> = std::result::Result<T, SnapshotError>;

#[cold]
#[inline(never)]
fn fail<T>(why: impl Into<String>) -> Result<T> {
    Err(SnapshotError(format!(
        "not a tripwire guard snapshot: {}",
        why.into()
    )))
}

#[cold]
#[inline(never)]
fn truncated<T>() -> Result<T> {
    fail("truncated")
}

/// Appends the format's primitives.
#[derive(Default)]
pub struct Writer {
    pub out: Vec<u8>,
}

impl Writer {
    #[inline]
    pub fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.out.push((value as u8 & 0x7f) | 0x80);
            value >>= 7;
        }
        self.out.push(value as u8);
    }

    #[inline]
    pub fn u8(&mut self, value: u8) {
        self.out.push(value);
    }

    #[inline]
    pub fn key(&mut self, key: Key) {
        self.out.extend_from_slice(&key.to_be_bytes());
    }

    /// Bytes written before and read back whole ([`Reader::since`]), as they are.
    #[inline]
    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Length-prefixed bytes (texts are WTF-8: UTF-8 with lone surrogates in 3 bytes).
    #[inline]
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.varint(bytes.len() as u64);
        self.out.extend_from_slice(bytes);
    }
}

/// Reads the format's primitives, each checked. It keeps the bytes not yet read as a slice,
/// so each read is one length check (no position to check against the length again).
pub struct Reader<'a> {
    data: &'a [u8],
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, rest: data }
    }

    #[inline]
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// Where the next read starts.
    #[inline]
    pub fn position(&self) -> usize {
        self.data.len() - self.rest.len()
    }

    /// The bytes read since `start` (a [`Reader::position`]).
    #[inline]
    pub fn since(&self, start: usize) -> &'a [u8] {
        let end = self.position();
        &self.data[start.min(end)..end]
    }

    #[inline(always)]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let Some((chunk, rest)) = self.rest.split_at_checked(n) else {
            return truncated();
        };
        self.rest = rest;
        Ok(chunk)
    }

    /// The next byte, not read.
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8> {
        let Some((&byte, rest)) = self.rest.split_first() else {
            return truncated();
        };
        self.rest = rest;
        Ok(byte)
    }

    #[inline]
    pub fn flag(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => fail(format!("a flag byte is {other}")),
        }
    }

    /// A minimal LEB128 number of at most 10 bytes, no more than `limit`.
    #[inline(always)]
    pub fn varint_max(&mut self, limit: u64) -> Result<u64> {
        // Nearly every number in a snapshot is one byte: lengths, counts, flags' neighbours.
        if let Some((&byte, rest)) = self.rest.split_first() {
            if byte < 0x80 && u64::from(byte) <= limit {
                self.rest = rest;
                return Ok(u64::from(byte));
            }
        }
        self.varint_long(limit)
    }

    #[inline(never)]
    fn varint_long(&mut self, limit: u64) -> Result<u64> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = self.u8()?;
            let shift = 7 * i;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return fail("a number is out of range");
            }
            value |= bits << shift;
            if byte < 0x80 {
                if byte == 0 && i > 0 {
                    return fail("a number is not written minimally");
                }
                if value > limit {
                    return fail(format!("a number ({value}) is out of range"));
                }
                return Ok(value);
            }
        }
        fail("a number is longer than 10 bytes")
    }

    #[inline]
    pub fn varint(&mut self) -> Result<u64> {
        self.varint_max(u64::MAX)
    }

    #[inline(always)]
    pub fn u32(&mut self) -> Result<u32> {
        Ok(self.varint_max(u64::from(u32::MAX))? as u32)
    }

    /// A count of items, each at least a byte long, so never more than the bytes left.
    #[inline(always)]
    pub fn count(&mut self, limit: usize) -> Result<usize> {
        let limit = limit.min(self.remaining());
        Ok(self.varint_max(limit as u64)? as usize)
    }

    #[inline(always)]
    pub fn key(&mut self) -> Result<Key> {
        let Some((bytes, rest)) = self.rest.split_first_chunk::<8>() else {
            return truncated();
        };
        self.rest = rest;
        Ok(u64::from_be_bytes(*bytes))
    }

    #[inline(always)]
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = self.count(usize::MAX)?;
        self.take(len)
    }

    /// A text: WTF-8, as Python's "surrogatepass" writes a str.
    #[inline(always)]
    pub fn text(&mut self) -> Result<&'a [u8]> {
        let len = self.count(usize::MAX)?;
        let from = self.rest;
        let bytes = self.take(len)?;
        // A snapshot holds hundreds of short texts (call ids twice, tool names), nearly all
        // ASCII: checked a word at a time (`ascii_prefix`).
        if !ascii_prefix(from, len) && !is_wtf8(bytes) {
            return fail("a text is not UTF-8");
        }
        Ok(bytes)
    }
}

/// Whether the first `len` bytes of `from` (it has at least `len`) are all ASCII, by 8-byte
/// words: `[u8]::is_ascii` goes byte by byte below a word and aligns first above one, which
/// costs more than the check itself on texts this short (OpenAI's call ids are 29 bytes). A
/// text of up to 8 bytes is one load within `from` when it has 8 bytes there, the bytes past
/// the text masked off; a longer one is its whole words and its last 8 bytes.
#[inline(always)]
fn ascii_prefix(from: &[u8], len: usize) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LONGEST: usize = 64;
    let word = |at: usize| {
        let rest = from.get(at..)?;
        rest.first_chunk::<8>().map(|w| u64::from_le_bytes(*w))
    };
    if len <= 8 {
        if let Some(first) = word(0) {
            let mask = ((1u128 << (8 * len)) - 1) as u64;
            return first & mask & HIGH == 0;
        }
    } else if len <= LONGEST {
        let mut seen = word(len - 8).unwrap_or(HIGH);
        let mut at = 0;
        while at + 8 < len {
            seen |= word(at).unwrap_or(HIGH);
            at += 8;
        }
        return seen & HIGH == 0;
    }
    from[..len].is_ascii()
}

/// CRC-32 (zlib's), as Python's `zlib.crc32`.
fn crc(bytes: &[u8]) -> [u8; 4] {
    crc32fast::hash(bytes).to_le_bytes()
}

/// The whole snapshot: header, the configuration (`FULL`) or its digest (`STATE_ONLY`),
/// the state, the checksum.
pub fn frame(kind: u8, head: &[u8], state: &[u8]) -> Vec<u8> {
    let mut out = frame_start(kind, head, state.len());
    out.raw(state);
    frame_end(out)
}

/// A snapshot's header and configuration (or digest), for the state to be written after
/// it in place, with room for `state` bytes of it; [`frame_end`] adds the checksum.
pub fn frame_start(kind: u8, head: &[u8], state: usize) -> Writer {
    let mut out = Writer {
        out: Vec::with_capacity(state + head.len() + 20),
    };
    out.out.extend_from_slice(MAGIC);
    out.u8(VERSION);
    out.u8(kind);
    if kind == FULL {
        out.bytes(head);
    } else {
        out.out.extend_from_slice(head);
    }
    out
}

/// The snapshot begun by [`frame_start`], its state written: the checksum appended.
pub fn frame_end(mut out: Writer) -> Vec<u8> {
    let sum = crc(&out.out);
    out.out.extend_from_slice(&sum);
    out.out
}

/// The kind, the configuration (or its digest) and a reader at the state, the checksum
/// checked.
pub fn unframe(data: &[u8]) -> Result<(u8, &[u8], Reader<'_>)> {
    if data.len() < 10 || &data[..4] != MAGIC {
        return fail("no tripwire snapshot header");
    }
    if data[4] != VERSION {
        return fail(format!(
            "version {}, and this tripwire reads version {VERSION}",
            data[4]
        ));
    }
    let (body, sum) = data.split_at(data.len() - 4);
    if crc(body) != sum {
        return fail("its checksum does not match (corrupt or truncated)");
    }
    let mut reader = Reader {
        data: body,
        rest: &body[6..],
    };
    let head = match data[5] {
        FULL => reader.bytes()?,
        STATE_ONLY => reader.take(8)?,
        other => return fail(format!("unknown kind {other}")),
    };
    Ok((data[5], head, reader))
}

/// What a verdict's message is about, as written (`guard::Detail` with texts for names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetailData<S> {
    Plain,
    Unchanged,
    Failed(S, u32),
    Errors(u32, S),
    Empty(u32, Vec<S>),
    Cycle(Vec<S>, bool),
    PollLimit(u64),
    After(S, u32, Box<DetailData<S>>),
}

/// A verdict's fields as written; `S` holds a text's WTF-8 bytes (a JSON text for
/// `cached`). Its window and budget are the configuration's, so not written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictData<S> {
    pub action: Action,
    pub reason: Option<Reason>,
    pub tool: S,
    pub key: Key,
    pub repeats: u32,
    pub step: u64,
    pub cached: Option<S>,
    pub call_id: Option<S>,
    pub duplicate_of: Option<u32>,
    pub invalid_arguments: Option<S>,
    pub detail: DetailData<S>,
}

fn action_code(action: Action) -> u8 {
    match action {
        Action::Allow => 0,
        Action::Nudge => 1,
        Action::Stop => 2,
    }
}

fn reason_code(reason: Option<Reason>) -> u8 {
    match reason {
        None => 0,
        Some(Reason::LoopDetected) => 1,
        Some(Reason::BudgetExhausted) => 2,
        Some(Reason::NoProgress) => 3,
    }
}

impl<S: AsRef<[u8]>> VerdictData<S> {
    /// Writes the verdict; returns where its head byte is and where its cached result is
    /// (or would be: a caller may add one there, with [`H_CACHED`] set in the head).
    pub fn write(&self, out: &mut Writer) -> (usize, usize) {
        let at_head = out.out.len();
        let head = action_code(self.action)
            | reason_code(self.reason) << 2
            | if self.cached.is_some() { H_CACHED } else { 0 }
            | if self.call_id.is_some() { H_CALL_ID } else { 0 }
            | if self.duplicate_of.is_some() {
                H_DUPLICATE
            } else {
                0
            }
            | if self.invalid_arguments.is_some() {
                H_INVALID
            } else {
                0
            };
        out.u8(head);
        out.bytes(self.tool.as_ref());
        out.key(self.key);
        out.varint(u64::from(self.repeats));
        out.varint(self.step);
        let at_cached = out.out.len();
        if let Some(cached) = &self.cached {
            out.bytes(cached.as_ref());
        }
        if let Some(call_id) = &self.call_id {
            out.bytes(call_id.as_ref());
        }
        if let Some(index) = self.duplicate_of {
            out.varint(u64::from(index));
        }
        if let Some(invalid) = &self.invalid_arguments {
            out.bytes(invalid.as_ref());
        }
        write_detail(out, &self.detail);
        (at_head, at_cached)
    }
}

fn write_names<S: AsRef<[u8]>>(out: &mut Writer, names: &[S]) {
    out.varint(names.len() as u64);
    for name in names {
        out.bytes(name.as_ref());
    }
}

fn write_detail<S: AsRef<[u8]>>(out: &mut Writer, detail: &DetailData<S>) {
    match detail {
        DetailData::Plain => out.u8(0),
        DetailData::Unchanged => out.u8(1),
        DetailData::Failed(text, n) => {
            out.u8(2);
            out.bytes(text.as_ref());
            out.varint(u64::from(*n));
        }
        DetailData::Errors(n, text) => {
            out.u8(3);
            out.varint(u64::from(*n));
            out.bytes(text.as_ref());
        }
        DetailData::Empty(n, tools) => {
            out.u8(4);
            out.varint(u64::from(*n));
            write_names(out, tools);
        }
        DetailData::Cycle(tools, writes) => {
            out.u8(5);
            write_names(out, tools);
            out.u8(u8::from(*writes));
        }
        DetailData::PollLimit(n) => {
            out.u8(6);
            out.varint(*n);
        }
        DetailData::After(tool, n, inner) => {
            out.u8(7);
            out.bytes(tool.as_ref());
            out.varint(u64::from(*n));
            write_detail(out, inner);
        }
    }
}

impl<'a> VerdictData<&'a [u8]> {
    pub fn read(reader: &mut Reader<'a>) -> Result<Self> {
        let head = reader.u8()?;
        let action = match head & 3 {
            0 => Action::Allow,
            1 => Action::Nudge,
            2 => Action::Stop,
            _ => return fail("an unknown action"),
        };
        let reason = match head >> 2 & 3 {
            0 => None,
            1 => Some(Reason::LoopDetected),
            2 => Some(Reason::BudgetExhausted),
            _ => Some(Reason::NoProgress),
        };
        let tool = reader.text()?;
        let key = reader.key()?;
        let repeats = reader.u32()?;
        let step = reader.varint()?;
        let cached = (head & H_CACHED != 0).then(|| reader.bytes()).transpose()?;
        let call_id = (head & H_CALL_ID != 0).then(|| reader.text()).transpose()?;
        let duplicate_of = (head & H_DUPLICATE != 0)
            .then(|| reader.u32())
            .transpose()?;
        let invalid_arguments = (head & H_INVALID != 0).then(|| reader.text()).transpose()?;
        Ok(VerdictData {
            action,
            reason,
            tool,
            key,
            repeats,
            step,
            cached,
            call_id,
            duplicate_of,
            invalid_arguments,
            detail: read_detail(reader, false)?,
        })
    }
}

/// Reads a verdict without cached result for its checks only, building nothing: what
/// [`VerdictData::read`] accepts, with the same errors. Returns its step.
pub fn check_verdict(reader: &mut Reader<'_>) -> Result<u64> {
    let head = reader.u8()?;
    if head & 3 == 3 {
        return fail("an unknown action");
    }
    reader.text()?;
    reader.key()?;
    reader.u32()?;
    let step = reader.varint()?;
    if head & H_CACHED != 0 {
        reader.bytes()?;
    }
    if head & H_CALL_ID != 0 {
        reader.text()?;
    }
    if head & H_DUPLICATE != 0 {
        reader.u32()?;
    }
    if head & H_INVALID != 0 {
        reader.text()?;
    }
    check_detail(reader, false)?;
    Ok(step)
}

fn check_names(reader: &mut Reader<'_>) -> Result<()> {
    let n = reader.count(usize::MAX)?;
    for _ in 0..n {
        reader.text()?;
    }
    Ok(())
}

fn check_detail(reader: &mut Reader<'_>, nested: bool) -> Result<()> {
    match reader.u8()? {
        0 | 1 => {}
        2 => {
            reader.text()?;
            reader.u32()?;
        }
        3 => {
            reader.u32()?;
            reader.text()?;
        }
        4 => {
            reader.u32()?;
            check_names(reader)?;
        }
        5 => {
            check_names(reader)?;
            reader.flag()?;
        }
        6 => {
            reader.u32()?;
        }
        7 if !nested => {
            reader.text()?;
            reader.u32()?;
            check_detail(reader, true)?;
        }
        tag => return fail(format!("detail tag {tag}")),
    }
    Ok(())
}

fn read_names<'a>(reader: &mut Reader<'a>) -> Result<Vec<&'a [u8]>> {
    let n = reader.count(usize::MAX)?;
    (0..n).map(|_| reader.text()).collect()
}

fn read_detail<'a>(reader: &mut Reader<'a>, nested: bool) -> Result<DetailData<&'a [u8]>> {
    Ok(match reader.u8()? {
        0 => DetailData::Plain,
        1 => DetailData::Unchanged,
        2 => DetailData::Failed(reader.text()?, reader.u32()?),
        3 => DetailData::Errors(reader.u32()?, reader.text()?),
        4 => DetailData::Empty(reader.u32()?, read_names(reader)?),
        5 => DetailData::Cycle(read_names(reader)?, reader.flag()?),
        6 => DetailData::PollLimit(u64::from(reader.u32()?)),
        7 if !nested => DetailData::After(
            reader.text()?,
            reader.u32()?,
            Box::new(read_detail(reader, true)?),
        ),
        tag => return fail(format!("detail tag {tag}")),
    })
}

/// How a state's opaque values are written: verdicts, and texts (error texts) as bytes.
/// Cached results are not written here: turning them into JSON may take code the caller
/// must not run while it holds the state ([`RunState::cached_in_order`], [`write_cache`]).
pub trait Encode<V, N> {
    /// Writes a text's WTF-8 bytes ([`Writer::bytes`]).
    fn write_text(&mut self, out: &mut Writer, text: &N);
    /// Writes a verdict; `restored` is the state's [`RunState::restored`], for verdicts
    /// kept as a range of it.
    fn write_verdict(&mut self, out: &mut Writer, verdict: &V, restored: &[u8]);
}

/// How a state's opaque values are read back.
pub trait Decode<V, R, N> {
    /// Whether a text read back before has these WTF-8 bytes.
    fn same_text(&mut self, text: &N, bytes: &[u8]) -> bool;
    /// A handle for a text read back (already checked to be WTF-8).
    fn make_text(&mut self, bytes: &[u8]) -> Result<N>;
    /// A verdict; one may be kept as the range of `reader`'s bytes it was read from.
    fn read_verdict(&mut self, reader: &mut Reader<'_>) -> Result<V>;
    /// Whether verdicts read are kept as ranges of the bytes (so those bytes are kept).
    fn keeps_bytes(&self) -> bool;
    /// The step a verdict was given at (what `observe` compares to mark a call id answered).
    fn verdict_step(&self, verdict: &V) -> u64;
    fn read_result(&mut self, json: &[u8]) -> Result<R>;
}

/// Writes the format's `cache` (the last part of a state): results as JSON text, oldest
/// first, those that are not JSON values left out.
pub fn write_cache(out: &mut Writer, kept: &[(Key, Vec<u8>)]) {
    out.varint(kept.len() as u64);
    for (key, json) in kept {
        out.key(*key);
        out.bytes(json);
    }
}

impl<V, R, N> RunState<V, R, N> {
    /// Writes the run state (the format's `state`) up to its cache ([`write_cache`]).
    pub fn write_snapshot(&self, out: &mut Writer, codec: &mut impl Encode<V, N>) {
        // Room for the usual sizes (an entry about 30 bytes, a call id and its verdict
        // about 60), so a full guard's state is written without growing the buffer.
        out.out
            .reserve(64 + 40 * self.window.len() + 72 * self.call_ids.len());
        out.varint(self.steps);
        out.varint(u64::from(self.turn));
        out.varint(self.window.len() as u64);
        for entry in &self.window {
            out.key(entry.key);
            out.bytes(&self.tool_bytes[entry.tool as usize]);
            out.varint(entry.step);
            out.varint(u64::from(entry.turn));
            let bit = |on: bool, bit: u8| if on { bit } else { 0 };
            out.u8(bit(entry.nudged, NUDGED)
                | bit(entry.writes, WRITES)
                | bit(entry.changes, CHANGES)
                | bit(entry.result.is_some(), HAS_RESULT)
                | bit(entry.empty, EMPTY)
                | bit(entry.failed, FAILED)
                | bit(entry.retry, RETRY)
                | bit(entry.question.is_some(), QUESTION));
            if let Some(result) = entry.result {
                out.key(result);
            }
            if entry.failed {
                let text = entry.result.and_then(|r| self.error_texts.get(&r));
                match text {
                    Some(text) => codec.write_text(out, text),
                    None => out.bytes(b""),
                }
            }
            if let Some(question) = entry.question {
                out.key(question.raw);
                out.key(question.shape);
            }
        }
        out.u8(u8::from(self.stopped.is_some()));
        if let Some(stop) = &self.stopped {
            codec.write_verdict(out, stop, &self.restored);
        }
        out.varint(self.call_ids.len() as u64);
        for record in self.call_ids.in_order() {
            let remembered = &record.remembered;
            out.bytes(&record.id);
            out.key(remembered.key);
            out.u8(u8::from(remembered.answered));
            codec.write_verdict(out, &remembered.verdict, &self.restored);
        }
        for counts in [&self.polls, &self.retries] {
            out.varint(counts.len() as u64);
            for (key, count) in counts.in_order() {
                out.key(key);
                out.varint(u64::from(count));
            }
        }
    }

    /// The cached results, oldest first, for [`write_cache`].
    pub fn cached_in_order(&self) -> impl Iterator<Item = (Key, &R)> + '_ {
        self.cache_order
            .iter()
            .filter_map(|key| self.cache.get(key).map(|r| (*key, r)))
    }

    /// Reads a run state written by [`RunState::write_snapshot`] (or the reference) for a
    /// guard with this `window` size, up to the end of `reader`.
    pub fn read_snapshot(
        reader: &mut Reader<'_>,
        window: usize,
        codec: &mut impl Decode<V, R, N>,
    ) -> Result<Self> {
        let mut state = RunState::<V, R, N> {
            steps: reader.varint()?,
            turn: reader.u32()?,
            ..RunState::default()
        };
        let entries = reader.count(window)?;
        state.window.reserve_exact(entries);
        let (mut previous_step, mut previous_turn) = (0, 0);
        for _ in 0..entries {
            let key = reader.key()?;
            let tool = reader.text()?;
            let step = reader.varint()?;
            let turn = reader.u32()?;
            // The invariants are the reference's (`tripwire._snapshot`), in its order.
            if step <= previous_step || step > state.steps {
                return fail("an entry's step is out of order or past the steps");
            }
            if !(previous_turn..=state.turn).contains(&turn) {
                return fail("an entry's turn is out of order or past the turn");
            }
            (previous_step, previous_turn) = (step, turn);
            let flags = reader.u8()?;
            check_flags(flags)?;
            let result = (flags & HAS_RESULT != 0)
                .then(|| reader.key())
                .transpose()?;
            let failed = flags & FAILED != 0;
            if failed {
                let Some(digest) = result else {
                    return fail("a failure without digest");
                };
                let text = reader.text()?;
                match state.error_texts.get(&digest) {
                    Some(known) if !codec.same_text(known, text) => {
                        return fail("one digest, two errors")
                    }
                    Some(_) => {}
                    None => {
                        let text = codec.make_text(text)?;
                        state.error_texts.insert(digest, text);
                    }
                }
            }
            let question = if flags & QUESTION != 0 {
                Some(Question {
                    raw: reader.key()?,
                    shape: reader.key()?,
                })
            } else {
                None
            };
            let tool = state.intern_read(tool, codec)?;
            state.window.push_back(Entry {
                key,
                tool,
                step,
                turn,
                nudged: flags & NUDGED != 0,
                writes: flags & WRITES != 0,
                changes: flags & CHANGES != 0,
                result,
                empty: flags & EMPTY != 0,
                failed,
                retry: flags & RETRY != 0,
                question,
            });
        }
        // Whether a result was observed is the shortcut past the progress rules, which
        // give the hash-only verdicts anyway while no entry has a result.
        state.observed = state.window.iter().any(|e| e.result.is_some());
        state.wants = state.window.iter().any(Entry::marked);
        // The stop latch and the call ids are read from their own reader, so the positions
        // the codec keeps verdicts by are offsets into these bytes, copied once after.
        let mut part = Reader::new(reader.rest);
        if part.flag()? {
            let stop = part.peek().is_some_and(|head| head & 3 == 2);
            let verdict = codec.read_verdict(&mut part)?;
            if !stop || codec.verdict_step(&verdict) > state.steps {
                return fail("the stop is not a stop of this run");
            }
            state.stopped = Some(verdict);
        }
        let ids = part.count(CALL_ID_MEMORY)?;
        state.call_ids = CallIds::with_capacity(ids);
        for _ in 0..ids {
            let id = part.text()?;
            let key = part.key()?;
            let answered = part.flag()?;
            let verdict = codec.read_verdict(&mut part)?;
            let step = codec.verdict_step(&verdict);
            let remembered = Remembered {
                key,
                step,
                verdict,
                answered,
            };
            if !state.call_ids.push_read(id, remembered) {
                return fail("a call id twice");
            }
            if !(1..=state.steps).contains(&step) {
                return fail("a call id's verdict is past the steps");
            }
        }
        let read = part.position();
        if codec.keeps_bytes() {
            state.restored = reader.rest[..read].into();
        }
        reader.rest = &reader.rest[read..];
        state.polls = read_counts(reader, u32::MAX)?;
        state.retries = read_counts(reader, TRANSIENT_RETRIES)?;
        let cached = reader.count(CACHE_ENTRIES)?;
        for _ in 0..cached {
            let key = reader.key()?;
            let result = codec.read_result(reader.bytes()?)?;
            if state.cache.insert(key, result).is_some() {
                return fail("a cached key twice");
            }
            state.cache_order.push_back(key);
        }
        if reader.remaining() != 0 {
            return fail("bytes after the state");
        }
        state.last_tool = None;
        Ok(state)
    }

    fn intern_read(&mut self, bytes: &[u8], codec: &mut impl Decode<V, R, N>) -> Result<u32> {
        // A window is mostly one or two tools: the last one read is compared before hashing.
        if let Some(id) = self.last_tool {
            if *self.tool_bytes[id as usize] == *bytes {
                return Ok(id);
            }
        }
        if let Some(&id) = self.tool_ids.get(bytes) {
            self.last_tool = Some(id);
            return Ok(id);
        }
        let name = codec.make_text(bytes)?;
        Ok(self.intern_tool(bytes, || name))
    }
}

fn read_counts(reader: &mut Reader<'_>, limit: u32) -> Result<Counts> {
    let n = reader.count(COUNTED_CALLS)?;
    let mut counts = Counts::default();
    for _ in 0..n {
        let key = reader.key()?;
        let count = reader.varint_max(u64::from(limit))? as u32;
        if count == 0 {
            return fail("a call counted 0 times");
        }
        if !counts.push_read(key, count) {
            return fail("a call counted twice");
        }
    }
    Ok(counts)
}

/// An entry's flags, as the guard sets them (the reference's `_check_flags`, in its order).
fn check_flags(flags: u8) -> Result<()> {
    let observed = EMPTY | FAILED | RETRY | HAS_RESULT;
    if flags & NUDGED != 0 && flags & (WRITES | CHANGES | observed) != 0 {
        return fail(format!("a nudged call that ran (entry flags {flags:#x})"));
    }
    if flags & WRITES != 0 && flags & CHANGES == 0 {
        return fail(format!(
            "a write that changes nothing (entry flags {flags:#x})"
        ));
    }
    if flags & (EMPTY | FAILED) != 0 && flags & HAS_RESULT == 0 {
        return fail(format!("a result without digest (entry flags {flags:#x})"));
    }
    if flags & EMPTY != 0 && flags & FAILED != 0 {
        return fail(format!(
            "a failure that came back empty (entry flags {flags:#x})"
        ));
    }
    if flags & RETRY != 0 && flags & FAILED == 0 {
        return fail(format!(
            "a retry of a call that did not fail (entry flags {flags:#x})"
        ));
    }
    let marked = flags & EMPTY != 0 || flags & (FAILED | RETRY) == FAILED;
    if flags & QUESTION != 0 && flags & HAS_RESULT != 0 && !marked {
        return fail(format!(
            "a question kept for a plain result (entry flags {flags:#x})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::{Limits, Outcome, Policy, Question, ToolRule};

    type Data = VerdictData<Vec<u8>>;
    type State = RunState<Data, Vec<u8>, Vec<u8>>;

    /// Verdicts as their written fields, results as JSON text, names as bytes.
    struct Plain;

    fn owned(data: VerdictData<&[u8]>) -> Data {
        let own = |s: &[u8]| s.to_vec();
        let detail = match data.detail {
            DetailData::Plain => DetailData::Plain,
            DetailData::Unchanged => DetailData::Unchanged,
            DetailData::Failed(t, n) => DetailData::Failed(own(t), n),
            DetailData::Errors(n, t) => DetailData::Errors(n, own(t)),
            DetailData::Empty(n, ts) => DetailData::Empty(n, ts.into_iter().map(own).collect()),
            DetailData::Cycle(ts, w) => DetailData::Cycle(ts.into_iter().map(own).collect(), w),
            DetailData::PollLimit(n) => DetailData::PollLimit(n),
            DetailData::After(t, n, _) => DetailData::After(own(t), n, Box::new(DetailData::Plain)),
        };
        VerdictData {
            action: data.action,
            reason: data.reason,
            tool: own(data.tool),
            key: data.key,
            repeats: data.repeats,
            step: data.step,
            cached: data.cached.map(own),
            call_id: data.call_id.map(own),
            duplicate_of: data.duplicate_of,
            invalid_arguments: data.invalid_arguments.map(own),
            detail,
        }
    }

    impl Encode<Data, Vec<u8>> for Plain {
        fn write_text(&mut self, out: &mut Writer, text: &Vec<u8>) {
            out.bytes(text);
        }
        fn write_verdict(&mut self, out: &mut Writer, verdict: &Data, _: &[u8]) {
            verdict.write(out);
        }
    }

    impl Decode<Data, Vec<u8>, Vec<u8>> for Plain {
        fn same_text(&mut self, text: &Vec<u8>, bytes: &[u8]) -> bool {
            text.as_slice() == bytes
        }
        fn make_text(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
            Ok(bytes.to_vec())
        }
        fn read_verdict(&mut self, reader: &mut Reader<'_>) -> Result<Data> {
            VerdictData::read(reader).map(owned)
        }
        fn keeps_bytes(&self) -> bool {
            false
        }
        fn verdict_step(&self, verdict: &Data) -> u64 {
            verdict.step
        }
        fn read_result(&mut self, json: &[u8]) -> Result<Vec<u8>> {
            Ok(json.to_vec())
        }
    }

    fn verdict(step: u64, call_id: &[u8]) -> Data {
        VerdictData {
            action: Action::Allow,
            reason: None,
            tool: b"get_logs".to_vec(),
            key: 7,
            repeats: 1,
            step,
            cached: None,
            call_id: Some(call_id.to_vec()),
            duplicate_of: None,
            invalid_arguments: None,
            detail: DetailData::Cycle(vec![b"a".to_vec(), b"b\xed\xa0\x80".to_vec()], true),
        }
    }

    /// A state with every part filled: a full window with results and a failure, call ids,
    /// polls, retries, cached results (one not JSON), a stop.
    fn busy() -> State {
        let limits = Limits {
            window: 12,
            nudge_at: 2,
            stop_at: 3,
            max_steps: None,
        };
        let mut state = State::default();
        let poll = Some(ToolRule {
            policy: Policy::Poll,
            max_polls: 20,
        });
        for i in 0..140u64 {
            let tool = state.intern_tool(format!("tool{}", i % 3).as_bytes(), || b"t".to_vec());
            let key = i % 5;
            let rule = if i % 7 == 0 { poll } else { None };
            // Every third call's question told, so snapshots carry questions too.
            let question = (i % 3 == 0).then_some(Question {
                raw: i,
                shape: i % 2,
            });
            let decision = state.decide(&limits, key, rule, question);
            let id = format!("call-{i}");
            let remembered = Some((id.as_bytes(), verdict(decision.step, id.as_bytes())));
            let latched = None;
            state.commit(
                &limits,
                key,
                tool,
                &decision,
                rule.map(|r| r.policy),
                latched,
                remembered,
                question,
                None,
            );
            let failed = i % 4 == 0;
            let outcome = Outcome {
                result: Some(if failed { 99 } else { i % 2 }),
                empty: i % 2 == 0 && !failed,
                failed,
                transient: i % 8 == 0,
                error: failed.then(|| b"Error: 503".to_vec()),
            };
            state.observe(decision.step, key, Some(id.as_bytes()), outcome);
        }
        state.user_message();
        state.store_result(3, b"[1,2]".to_vec());
        state.store_result(4, b"not json".to_vec());
        let mut stop = verdict(140, b"x");
        (stop.action, stop.reason) = (Action::Stop, Some(Reason::NoProgress));
        state.stopped = Some(stop);
        state
    }

    fn snapshot(state: &State) -> Vec<u8> {
        let mut out = Writer::default();
        state.write_snapshot(&mut out, &mut Plain);
        let kept: Vec<(Key, Vec<u8>)> = state
            .cached_in_order()
            .filter(|(_, r)| *r != b"not json")
            .map(|(k, r)| (k, r.clone()))
            .collect();
        write_cache(&mut out, &kept);
        frame(STATE_ONLY, &[0; 8], &out.out)
    }

    fn restore(data: &[u8]) -> Result<State> {
        let (_, _, mut reader) = unframe(data)?;
        State::read_snapshot(&mut reader, 12, &mut Plain)
    }

    #[test]
    fn a_state_comes_back_as_it_was() {
        let state = busy();
        let data = snapshot(&state);
        let back = restore(&data).expect("restores");
        assert_eq!(snapshot(&back), data);
        assert_eq!(back.window.len(), 12);
        assert_eq!(back.call_ids.len(), CALL_ID_MEMORY);
        assert_eq!(
            back.cache.len(),
            1,
            "results that are not JSON are not kept"
        );
        assert_eq!(back.steps(), state.steps());
        assert_eq!(back.turn, state.turn);
        assert!(back.observed);
        // The same decisions from here on.
        let limits = Limits {
            window: 12,
            nudge_at: 2,
            stop_at: 3,
            max_steps: None,
        };
        for key in [1, 2, 3, 1, 1] {
            assert_eq!(
                state.decide(&limits, key, None, None),
                back.decide(&limits, key, None, None)
            );
        }
    }

    #[test]
    fn truncated_and_flipped_snapshots_are_errors_not_panics() {
        let data = snapshot(&busy());
        for len in 0..data.len() {
            assert!(restore(&data[..len]).is_err(), "truncated to {len}");
        }
        let mut rng = crate::test_rng::xorshift(0x5eed);
        for _ in 0..2000 {
            let mut bad = data.clone();
            let at = (rng() as usize) % bad.len();
            bad[at] ^= 1 << (rng() % 8);
            assert!(restore(&bad).is_err());
        }
    }

    #[test]
    fn corrupt_states_behind_a_good_checksum_are_errors_not_panics() {
        // The checksum recomputed over each change, so the state's own checks are what
        // refuse it (or it is a state, which must then write itself back the same).
        let data = snapshot(&busy());
        let (_, _, reader) = unframe(&data).expect("frames");
        let start = data.len() - 4 - reader.remaining();
        let mut rng = crate::test_rng::xorshift(42);
        for round in 0..3000 {
            let mut state = data[start..data.len() - 4].to_vec();
            let at = (rng() as usize) % state.len();
            match round % 3 {
                0 => state[at] = rng() as u8,
                1 => state.truncate(at),
                _ => state.insert(at, rng() as u8),
            }
            let framed = frame(STATE_ONLY, &[0; 8], &state);
            if let Ok(back) = restore(&framed) {
                assert_eq!(snapshot(&back), framed);
            }
        }
    }

    #[test]
    fn foreign_bytes_say_what_is_wrong() {
        let data = snapshot(&busy());
        let why = |bytes: &[u8]| restore(bytes).err().map(|e| e.0).unwrap_or_default();
        assert!(why(b"PK\x03\x04 a zip file").contains("no tripwire snapshot header"));
        let mut newer = data.clone();
        newer[4] = 2;
        assert!(why(&newer).contains("version 2"));
        let mut flipped = data.clone();
        flipped[20] ^= 1;
        assert!(why(&flipped).contains("checksum"));
    }

    #[test]
    fn checking_a_verdict_accepts_what_reading_it_does() {
        let mut written = Writer::default();
        let mut with_texts = verdict(9, b"call_1");
        with_texts.invalid_arguments = Some(b"{bad".to_vec());
        with_texts.duplicate_of = Some(3);
        with_texts.detail = DetailData::After(
            b"t".to_vec(),
            2,
            Box::new(DetailData::Failed(b"Error: \xed\xa0\x80".to_vec(), 4)),
        );
        with_texts.write(&mut written);
        verdict(300, b"x").write(&mut written);
        let data = written.out;
        let both = |bytes: &[u8]| {
            let (mut a, mut b) = (Reader::new(bytes), Reader::new(bytes));
            let read = VerdictData::read(&mut a).map(|v| (v.step, a.position()));
            let checked = check_verdict(&mut b).map(|step| (step, b.position()));
            (read, checked)
        };
        let (read, checked) = both(&data);
        assert_eq!(read, checked);
        assert_eq!(read.map(|r| r.0), Ok(9));
        let mut rng = crate::test_rng::xorshift(7);
        for round in 0..20_000 {
            let mut bad = data.clone();
            let at = (rng() as usize) % bad.len();
            match round % 3 {
                0 => bad[at] = rng() as u8,
                1 => bad.truncate(at),
                _ => bad.insert(at, rng() as u8),
            }
            let (read, checked) = both(&bad);
            assert_eq!(read, checked, "{bad:?}");
        }
    }

    #[test]
    fn texts_are_checked_whole_whatever_follows_them() {
        // Every length up to past the longest checked by words, a high byte at each place in the text or just
        // after it, and the text last in the bytes or followed by more.
        for len in 0..70 {
            for high in 0..=len {
                for after in [0, 3, 8, 12] {
                    let mut text = vec![b'a'; len];
                    let mut tail = vec![b'b'; after];
                    if high < len {
                        text[high] = 0xff;
                    } else if let Some(first) = tail.first_mut() {
                        *first = 0xff;
                    }
                    let mut out = Writer::default();
                    out.bytes(&text);
                    out.raw(&tail);
                    let read = Reader::new(&out.out).text();
                    assert_eq!(read.is_ok(), high >= len, "{len} {high} {after}");
                }
            }
        }
    }

    #[test]
    fn numbers_are_minimal_leb128() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Writer::default();
            out.varint(value);
            assert_eq!(Reader::new(&out.out).varint(), Ok(value));
        }
        assert!(Reader::new(&[0x80, 0x00]).varint().is_err());
        assert!(Reader::new(&[0xff; 10]).varint().is_err());
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x10]).u32().is_err());
    }
}
