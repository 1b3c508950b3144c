//! The replay of the events format's JSONL (`tripwire/replay/formats/events.py`, read by
//! `files.Reader`, replayed by `simulate.Fleet`), line by line, free of Python: each line's
//! members are found by `jsonl.rs` and its call goes through `TableReplay::call`, the one
//! per-run machinery the table replay uses too (run state, keys, money, results).
//!
//! What differs from a table is how runs come: interleaved. As `Fleet` does, up to
//! `max_open` runs are held open, the one not seen for longest finished early past that
//! (and should it come back, it goes on as a new part), and the rest finished at the end of
//! the file in the order they started.
//!
//! Scope: every line an object with `tool`, read by `Lines.feed` without a problem, and no
//! `turn` (one call a model turn: its `usage` as `parse_usage` reads it, `usage.rs` where it
//! is plain, else tokens estimated from the line's size); or an earlier call's result on a
//! line of its own (`result_of`); gzip read through. A file with any other line is given up
//! at that line ([`EventsReplay::line`] says why): the Python side replays into a fleet of
//! its own and throws it away then, and the per-call path reads the file whole. Giving up
//! late costs a native pass (a tenth of the per-call one); a pre-scan deciding first cost
//! every file a second pass over its bytes.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};

use flate2::read::MultiGzDecoder;

use crate::arrow_replay::{Args, Call, CallId, Cold, Open, Returned, TableReplay, UsageRead};
use crate::guard::NameMap;
use crate::jsonl::{self, Decoded, Fields, Kind, Refused, Value, Why};
use crate::usage;

/// Bytes read from the file at a time (a longer line grows the buffer to hold it).
pub const CHUNK: usize = 4 << 20;

/// A line's call, its members resolved as `Lines.feed` resolves them.
struct Resolved<'a> {
    run: &'a [u8],
    tool: &'a [u8],
    args: Args<'a>,
    call_id: Option<CallId<'a>>,
    result: Option<Returned<'a>>,
    model: Option<&'a [u8]>,
    /// The `usage` member's JSON text, unless null.
    usage: Option<&'a [u8]>,
}

/// Buffers for the strings of a line that hold escapes, unescaped (the long ones as they
/// are scanned, in `decoded`).
#[derive(Default)]
struct Scratch {
    run: Vec<u8>,
    tool: Vec<u8>,
    args: Vec<u8>,
    result: Vec<u8>,
    call_id: Vec<u8>,
    model: Vec<u8>,
    decoded: Decoded,
}

/// A string's text: as it is, or unescaped into `buffer`; `Err` for a lone surrogate (not
/// UTF-8).
fn text<'a>(value: Value<'a>, buffer: &'a mut Vec<u8>) -> Result<&'a [u8], Why> {
    if value.decoded || !value.escaped {
        return Ok(value.raw);
    }
    buffer.clear();
    if !jsonl::unescape(value.raw, buffer) {
        return Err("a lone surrogate in a string");
    }
    Ok(buffer)
}

/// The call of a line (`Lines.feed`): run, tool, arguments, call id, result and model.
fn resolve<'a>(
    fields: &Fields<'a>,
    scratch: &'a mut Scratch,
    default_run: &'a [u8],
    number: u64,
) -> Result<Resolved<'a>, Why> {
    let Scratch {
        run: run_buffer,
        tool: tool_buffer,
        args: args_buffer,
        result: result_buffer,
        call_id: id_buffer,
        model: model_buffer,
        decoded,
    } = scratch;
    if fields.turn.is_some_and(|v| !v.is_null()) {
        return Err("a line with a turn");
    }
    let run = run_name(fields, run_buffer, default_run)?;
    let tool = match fields.tool {
        Some(v) if v.kind == Kind::Str && !v.raw.is_empty() => text(v, tool_buffer)?,
        Some(_) => return Err("a tool that is not a name"),
        None => return Err("a line without a tool"),
    };
    // `args` unless null, else `arguments` (null too), else `input`.
    let (args, scanned) = match (fields.args, fields.arguments) {
        (Some(args), _) if !args.is_null() => (Some(args), &decoded.args),
        (_, Some(arguments)) => (Some(arguments), &decoded.arguments),
        _ => (fields.input, &decoded.input),
    };
    let args = match args {
        None => Args::Null,
        Some(v) => match v.kind {
            Kind::Null => Args::Null,
            Kind::Str if v.decoded => Args::Text(scanned),
            Kind::Str => Args::Text(text(v, args_buffer)?),
            _ => Args::Value(v.raw),
        },
    };
    let call_id = match fields.call_id {
        Some(v) if v.kind == Kind::Str => Some(CallId::Given(text(v, id_buffer)?)),
        Some(v) if v.kind == Kind::Int => Some(CallId::Given(jsonl::int_text(v.raw))),
        _ => None,
    };
    let result = match fields.result {
        None => None,
        Some(v) => Some(returned(v, &decoded.result, result_buffer)?),
    };
    // A call with a result on its line is linked to it by its id, or by one only this line
    // has (an empty id too: `call_id or ...`).
    let call_id = match (call_id, result.is_some()) {
        (Some(CallId::Given([])), true) => Some(CallId::Row(number)),
        (None, true) => Some(CallId::Row(number)),
        (id, _) => id,
    };
    let model = match fields.model {
        Some(v) if v.kind == Kind::Str => Some(text(v, model_buffer)?),
        _ => None,
    };
    Ok(Resolved {
        run,
        tool,
        args,
        call_id,
        result,
        model,
        usage: fields.usage.filter(|v| !v.is_null()).map(|v| v.raw),
    })
}

/// The run a line names (`Lines.feed`): `run` unless null, else `run_id` (null too), else
/// the file's (`default_run`).
fn run_name<'a>(
    fields: &Fields<'a>,
    buffer: &'a mut Vec<u8>,
    default_run: &'a [u8],
) -> Result<&'a [u8], Why> {
    let run = match (fields.run, fields.run_id) {
        (Some(run), _) if !run.is_null() => Some(run),
        (_, run_id) => run_id,
    };
    match run {
        None => Ok(default_run),
        Some(v) if v.kind == Kind::Str && !v.raw.is_empty() => text(v, buffer),
        Some(v) if v.kind == Kind::Int => Ok(jsonl::int_text(v.raw)),
        Some(_) => Err("a run that is not a name"),
    }
}

/// A `result` member as the guard is told it: a string's text (unescaped as it was scanned,
/// `decoded`, or into `buffer`), else the JSON value's text.
fn returned<'a>(
    v: Value<'a>,
    decoded: &'a [u8],
    buffer: &'a mut Vec<u8>,
) -> Result<Returned<'a>, Why> {
    Ok(match v.kind {
        Kind::Str if v.decoded => Returned::Text(decoded),
        Kind::Str => Returned::Text(text(v, buffer)?),
        _ => Returned::Value(v.raw),
    })
}

/// A line that gives an earlier call's result (`{"run", "result_of": ID, "result"}`:
/// `Lines._result_line`): its run, the call's id and the result. Read before any `turn` or
/// `usage` the line has, which the per-call path does not look at for it either.
fn resolve_result<'a>(
    fields: &Fields<'a>,
    scratch: &'a mut Scratch,
    default_run: &'a [u8],
) -> Result<(&'a [u8], &'a [u8], Returned<'a>), Why> {
    let Scratch {
        run: run_buffer,
        result: result_buffer,
        call_id: id_buffer,
        decoded,
        ..
    } = scratch;
    let run = run_name(fields, run_buffer, default_run)?;
    // Another id, or no result: a problem the per-call path words (with the value's repr).
    let call_id = match fields.result_of {
        Some(v) if v.kind == Kind::Str => text(v, id_buffer)?,
        Some(v) if v.kind == Kind::Int => jsonl::int_text(v.raw),
        _ => return Err("a result_of that is not a call id"),
    };
    let Some(result) = fields.result else {
        return Err("a result_of without a result");
    };
    Ok((
        run,
        call_id,
        returned(result, &decoded.result, result_buffer)?,
    ))
}

/// Gzip's first bytes (`files.GZIP_MAGIC`): such a file is read through its decompression.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A file as its lines are read from it: as it is, or through gzip's decompression.
enum Source {
    Plain(File),
    Gzip(Box<MultiGzDecoder<BufReader<File>>>),
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Plain(file) => file.read(buf),
            Source::Gzip(decoder) => decoder.read(buf),
        }
    }
}

/// Reads a file's lines, each with its newline (the last may have none), to its end; a gzip
/// file (by its first bytes, as `files.Reader` tells it) decompressed, every member of it,
/// as `gzip.GzipFile` reads it (a damaged one is an error, and the per-call path reports it).
pub struct LineReader {
    file: Source,
    /// Lines longer than this (its newline aside) may be refused with an error.
    max_line: usize,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Bytes handed out in lines so far.
    pub position: u64,
}

impl LineReader {
    /// The file at `path`, read to its end, in lines of at most `max_line` bytes (a longer
    /// one may be an error).
    pub fn open(path: &str, max_line: usize) -> io::Result<LineReader> {
        let mut file = File::open(path)?;
        let mut head = Vec::with_capacity(GZIP_MAGIC.len());
        (&mut file)
            .take(GZIP_MAGIC.len() as u64)
            .read_to_end(&mut head)?;
        file.rewind()?;
        let file = if head == GZIP_MAGIC {
            let buffered = BufReader::with_capacity(1 << 20, file);
            Source::Gzip(Box::new(MultiGzDecoder::new(buffered)))
        } else {
            Source::Plain(file)
        };
        Ok(LineReader {
            file,
            max_line,
            buffer: vec![0; CHUNK],
            start: 0,
            end: 0,
            eof: false,
            position: 0,
        })
    }

    /// How far the reading is into the file on disk: the bytes handed out in lines, or of a
    /// gzip file, the compressed bytes read (what the progress bar measures, as the per-call
    /// path's does).
    pub fn progress(&self) -> u64 {
        match &self.file {
            Source::Plain(_) => self.position,
            Source::Gzip(decoder) => {
                let mut file: &File = decoder.get_ref().get_ref();
                file.stream_position().unwrap_or(0)
            }
        }
    }

    /// The next line; `None` at the end of the file.
    pub fn next_line(&mut self) -> io::Result<Option<&[u8]>> {
        let mut searched = self.start;
        loop {
            if let Some(at) = jsonl::find(b'\n', &self.buffer[searched..self.end]) {
                let line_end = searched + at + 1;
                let line = self.start..line_end;
                self.start = line_end;
                self.position += (line.end - line.start) as u64;
                return Ok(Some(&self.buffer[line]));
            }
            searched = self.end;
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                let line = self.start..self.end;
                self.start = self.end;
                self.position += (line.end - line.start) as u64;
                return Ok(Some(&self.buffer[line]));
            }
            // Room for more: the partial line moved to the front, the buffer grown if full.
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                searched -= self.start;
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buffer.len() {
                // A line longer than any the caller reads ends the reading here, before the
                // buffer outgrows it (a file of one endless line must not fill memory).
                if self.end > self.max_line {
                    return Err(io::Error::other("a line over the line limit"));
                }
                self.buffer.resize(self.buffer.len() * 2, 0);
            }
            let read = loop {
                match self.file.read(&mut self.buffer[self.end..]) {
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other?,
                }
            };
            if read == 0 {
                self.eof = true;
            }
            self.end += read;
        }
    }
}

/// A line without its newline (`\n`; a `\r` before it is the line's, as `json` reads it).
fn content(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

/// An open run, aside while another line's run is replayed.
struct Parked {
    open: Option<Box<Open>>,
    /// The order runs started in: the end of the file finishes them in it.
    seq: u64,
}

/// The replay of one events file: lines in, finished runs and problems out (in `core`).
pub struct EventsReplay {
    pub core: TableReplay,
    open: Lru<Parked>,
    /// Runs finished early, by name: their part, the oldest forgotten past `max_evicted`.
    evicted: Lru<u32>,
    pub max_open: usize,
    pub max_evicted: usize,
    started: u64,
    /// Runs that came back after being finished early (`Fleet.split_runs`).
    pub split_runs: u64,
    /// Results on lines of their own whose run was not open (`Fleet.orphan_results`).
    pub orphan_results: u64,
    default_run: Vec<u8>,
    /// Lines longer than this (their newline aside) are not read natively.
    line_limit: usize,
    /// Whether a line with a call was read: a problem before one is the first line's, which
    /// decides what the file is (`files.Reader`), and the file is given up.
    pub read_a_call: bool,
    /// Boxed, so that taking it out for a line moves a pointer.
    scratch: Option<Box<Scratch>>,
}

impl EventsReplay {
    pub fn new(
        mut core: TableReplay,
        default_run: Vec<u8>,
        max_open: usize,
        max_evicted: usize,
        line_limit: usize,
    ) -> Self {
        // Lines are replayed only once found UTF-8 (those that are not are reported, never
        // replayed), and unescaping makes nothing else.
        core.texts_utf8 = true;
        EventsReplay {
            core,
            open: Lru::default(),
            evicted: Lru::default(),
            max_open,
            max_evicted,
            started: 0,
            split_runs: 0,
            orphan_results: 0,
            default_run,
            line_limit,
            read_a_call: false,
            scratch: Some(Box::default()),
        }
    }

    /// One line (its newline kept: its size is the turn's), the `number`-th of the file.
    /// `Err(why)`: a line not read natively; the file must be given up (what was replayed
    /// of it thrown away).
    pub fn line<C: Cold>(
        &mut self,
        cold: &mut C,
        line: &[u8],
        number: u64,
    ) -> Result<Result<(), Why>, C::Error> {
        let text = content(line);
        if text.len() > self.line_limit {
            return Ok(Err("a line over the line limit"));
        }
        if jsonl::blank(text) {
            return Ok(Ok(()));
        }
        // Taken out for the call, whose resolved members borrow them.
        let mut scratch = self.scratch.take().unwrap_or_default();
        let mut fields = Fields::default();
        // UTF-8 first (strings are scanned as bytes); `is_ascii` first: most lines are, and it
        // is several times cheaper.
        let read = if !text.is_ascii() && std::str::from_utf8(text).is_err() {
            Err("a line that is not UTF-8")
        } else {
            jsonl::scan_decoding(text, &mut fields, Some(&mut scratch.decoded))
        };
        if let Err(why) = read {
            self.scratch = Some(scratch);
            return Ok(match jsonl::refused(text) {
                Refused::Blank => Ok(()),
                Refused::Problem(_) if !self.read_a_call => Err(why),
                Refused::Problem(message) => {
                    let skipped = format!("{message}; line skipped");
                    self.core.problems.push((number, skipped));
                    Ok(())
                }
                Refused::Unsupported => Err(why),
            });
        }
        let default_run = std::mem::take(&mut self.default_run);
        // A call's line, or (no `tool`) an earlier call's result, as `Lines.feed` tells them.
        let outcome = if fields.tool.is_none() && fields.result_of.is_some() {
            self.result_line(cold, &fields, &mut scratch, &default_run, number)
        } else {
            let produced = line.len() as u64;
            self.call(cold, &fields, &mut scratch, &default_run, produced, number)
        };
        self.scratch = Some(scratch);
        self.default_run = default_run;
        outcome
    }

    fn call<C: Cold>(
        &mut self,
        cold: &mut C,
        fields: &Fields<'_>,
        scratch: &mut Scratch,
        default_run: &[u8],
        produced: u64,
        number: u64,
    ) -> Result<Result<(), Why>, C::Error> {
        let call = match resolve(fields, scratch, default_run, number) {
            Ok(call) => call,
            Err(why) => return Ok(Err(why)),
        };
        // The turn's usage, as `Lines.feed` reads it before the turn (a problem first).
        let usage = match call.usage {
            None => None,
            Some(raw) => match usage::plain_usage(raw)
                .map_or_else(|| cold.usage(raw), |counts| Ok(UsageRead::Counts(counts)))?
            {
                UsageRead::Counts(counts) => Some(counts),
                UsageRead::Problem(why) => {
                    let problem = format!("{why}; tokens estimated");
                    self.core.problems.push((number, problem));
                    None
                }
                UsageRead::Unsupported => return Ok(Err("a usage of counts too big")),
            },
        };
        self.read_a_call = true;
        let slot = match self.open.find(call.run) {
            Some(slot) => {
                self.open.touch(slot);
                slot
            }
            None => self.start(call.run, number),
        };
        let call = Call {
            tool: call.tool,
            args: call.args,
            produced,
            model: call.model,
            number,
            call_id: call.call_id,
            result: call.result,
            error: None,
            usage,
        };
        self.in_run(slot, |core| core.call(cold, call)).map(Ok)
    }

    /// `replay` with the run parked in `slot` as the core's open run, parked again after.
    fn in_run<R>(&mut self, slot: usize, replay: impl FnOnce(&mut TableReplay) -> R) -> R {
        let open = self.open.value_mut(slot).open.take();
        self.core.swap_open(open);
        let done = replay(&mut self.core);
        self.open.value_mut(slot).open = self.core.swap_open(None);
        done
    }

    /// An earlier call's result, on a line of its own (`Fleet._result`): to the open run it
    /// names, linked to the newest verdict waiting under its id; a run not open (not started
    /// yet, or finished early) counts it as an orphan. Ignored unless results are observed.
    fn result_line<C: Cold>(
        &mut self,
        cold: &mut C,
        fields: &Fields<'_>,
        scratch: &mut Scratch,
        default_run: &[u8],
        number: u64,
    ) -> Result<Result<(), Why>, C::Error> {
        let (run, call_id, result) = match resolve_result(fields, scratch, default_run) {
            Ok(found) => found,
            Err(why) => return Ok(Err(why)),
        };
        if !self.core.observes() {
            return Ok(Ok(()));
        }
        let Some(slot) = self.open.find(run) else {
            self.orphan_results += 1;
            return Ok(Ok(()));
        };
        self.open.touch(slot);
        self.in_run(slot, |core| {
            core.result_apart(cold, CallId::Given(call_id), result, number)
        })
        .map(Ok)
    }

    /// A run's first line (`Fleet._start`): a new part if it was finished early; past
    /// `max_open` open runs, the one not seen for longest is finished.
    fn start(&mut self, name: &[u8], number: u64) -> usize {
        let part = self.evicted.remove(name).map_or(1, |part| part + 1);
        if part > 1 {
            self.split_runs += 1;
        }
        let open = Open::new(String::from_utf8_lossy(name).into_owned(), number, part);
        let seq = self.started;
        self.started += 1;
        let slot = self.open.push(
            name,
            Parked {
                open: Some(open),
                seq,
            },
        );
        if self.open.len() > self.max_open {
            if let Some((old_name, old)) = self.open.pop_front() {
                if let Some(run) = old.open {
                    self.evicted.push(&old_name, run.part());
                    if self.evicted.len() > self.max_evicted {
                        self.evicted.pop_front();
                    }
                    self.finish(run);
                }
            }
        }
        slot
    }

    fn finish(&mut self, run: Box<Open>) {
        let none = self.core.swap_open(Some(run));
        debug_assert!(none.is_none());
        self.core.end();
    }

    /// The end of the file: runs still open are finished in the order they started
    /// (`Fleet.close_file`).
    pub fn end(&mut self) {
        let mut open: Vec<Parked> = self.open.drain().collect();
        open.sort_by_key(|parked| parked.seq);
        for parked in open {
            if let Some(run) = parked.open {
                self.finish(run);
            }
        }
        self.evicted = Lru::default();
    }
}

const NIL: usize = usize::MAX;

struct Slot<V> {
    key: Box<[u8]>,
    value: Option<V>,
    prev: usize,
    next: usize,
}

/// A map by name kept in the order its entries were last touched (an `OrderedDict` with
/// `move_to_end`): a list threaded through a slab, so touching is O(1).
struct Lru<V> {
    index: NameMap<usize>,
    slots: Vec<Slot<V>>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    /// The slot last found: lines of one run tend to come together.
    last: usize,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Lru {
            index: NameMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            last: NIL,
        }
    }
}

impl<V> Lru<V> {
    fn len(&self) -> usize {
        self.index.len()
    }

    fn find(&mut self, key: &[u8]) -> Option<usize> {
        if let Some(slot) = self.slots.get(self.last) {
            if slot.value.is_some() && *slot.key == *key {
                return Some(self.last);
            }
        }
        let found = self.index.get(key).copied();
        if let Some(at) = found {
            self.last = at;
        }
        found
    }

    fn value_mut(&mut self, slot: usize) -> &mut V {
        self.slots[slot].value.as_mut().expect("a live slot")
    }

    fn unlink(&mut self, at: usize) {
        let (prev, next) = (self.slots[at].prev, self.slots[at].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n].prev = prev,
        }
    }

    fn link_back(&mut self, at: usize) {
        self.slots[at].prev = self.tail;
        self.slots[at].next = NIL;
        match self.tail {
            NIL => self.head = at,
            t => self.slots[t].next = at,
        }
        self.tail = at;
    }

    /// Moves an entry to the back (most recently seen).
    fn touch(&mut self, at: usize) {
        if self.tail != at {
            self.unlink(at);
            self.link_back(at);
        }
    }

    /// Adds an entry (the key must not be in the map) at the back.
    fn push(&mut self, key: &[u8], value: V) -> usize {
        let slot = Slot {
            key: key.into(),
            value: Some(value),
            prev: NIL,
            next: NIL,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.slots[at] = slot;
                at
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.index.insert(key.into(), at);
        self.link_back(at);
        at
    }

    fn take(&mut self, at: usize) -> (Box<[u8]>, V) {
        self.unlink(at);
        let key = std::mem::take(&mut self.slots[at].key);
        let value = self.slots[at].value.take().expect("a live slot");
        self.index.remove(&key);
        self.free.push(at);
        (key, value)
    }

    fn pop_front(&mut self) -> Option<(Box<[u8]>, V)> {
        (self.head != NIL).then(|| self.take(self.head))
    }

    fn remove(&mut self, key: &[u8]) -> Option<V> {
        let at = self.index.get(key).copied()?;
        Some(self.take(at).1)
    }

    /// Every value, emptying the map.
    fn drain(&mut self) -> impl Iterator<Item = V> {
        let slots = std::mem::take(&mut self.slots);
        *self = Lru::default();
        slots.into_iter().filter_map(|slot| slot.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lru_keeps_the_order_entries_were_last_touched() {
        let mut lru: Lru<u32> = Lru::default();
        let a = lru.push(b"a", 1);
        lru.push(b"b", 2);
        lru.push(b"c", 3);
        lru.touch(a);
        assert_eq!(
            lru.pop_front().map(|(k, v)| (k.to_vec(), v)),
            Some((b"b".to_vec(), 2))
        );
        assert_eq!(lru.remove(b"c"), Some(3));
        assert_eq!(lru.find(b"a"), Some(a));
        lru.push(b"d", 4);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.pop_front().map(|(_, v)| v), Some(1));
        assert_eq!(lru.pop_front().map(|(_, v)| v), Some(4));
        assert!(lru.pop_front().is_none());
    }

    #[test]
    fn lines_are_read_whole_with_their_newlines() {
        let path = std::env::temp_dir().join(format!("tripwire-lines-{}", std::process::id()));
        let long = "x".repeat(CHUNK + 10);
        let text = format!("a\n\n{long}\nb\r\nlast");
        std::fs::write(&path, &text).expect("written");
        let read = || {
            let mut reader =
                LineReader::open(path.to_str().expect("utf-8"), usize::MAX).expect("open");
            let mut lines = Vec::new();
            while let Some(line) = reader.next_line().expect("read") {
                lines.push(String::from_utf8(line.to_vec()).expect("utf-8"));
            }
            (lines, reader.position)
        };
        let (all, position) = read();
        assert_eq!(all, ["a\n", "\n", &format!("{long}\n"), "b\r\n", "last"]);
        assert_eq!(position, text.len() as u64);
        // A line longer than the reader reads is an error once it outgrows the buffer.
        let mut reader = LineReader::open(path.to_str().expect("utf-8"), 10).expect("open");
        assert_eq!(reader.next_line().expect("read"), Some(&b"a\n"[..]));
        reader.next_line().expect("read");
        assert!(reader.next_line().is_err());
        std::fs::remove_file(&path).expect("removed");
    }

    fn resolved(line: &str) -> Result<(Vec<u8>, Vec<u8>), Why> {
        let mut fields = Fields::default();
        jsonl::scan(line.as_bytes(), &mut fields)?;
        let mut scratch = Scratch::default();
        let call = resolve(&fields, &mut scratch, b"file", 7)?;
        Ok((call.run.to_vec(), call.tool.to_vec()))
    }

    #[test]
    fn members_resolve_as_lines_feed_reads_them() {
        assert_eq!(
            resolved(r#"{"tool": "t"}"#),
            Ok((b"file".to_vec(), b"t".to_vec()))
        );
        assert_eq!(
            resolved(r#"{"run": null, "run_id": 7, "tool": "t"}"#).map(|r| r.0),
            Ok(b"7".to_vec())
        );
        assert_eq!(
            resolved(r#"{"run": "a\"b", "tool": "t"}"#).map(|r| r.0),
            Ok(b"a\"b".to_vec())
        );
        assert!(resolved(r#"{"run": "", "tool": "t"}"#).is_err());
        assert!(resolved(r#"{"run": true, "tool": "t"}"#).is_err());
        assert!(resolved(r#"{"run": null, "run_id": null, "tool": "t"}"#).is_err());
        assert!(resolved(r#"{"tool": ""}"#).is_err());
        assert!(resolved(r#"{"tool": "t", "turn": 1}"#).is_err());
        assert!(resolved(r#"{"tool": "t", "usage": null, "turn": null}"#).is_ok());
        assert!(resolved(r#"{"tool": "t", "args": "\ud800"}"#).is_err());
    }
}
