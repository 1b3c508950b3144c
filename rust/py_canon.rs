//! Walks Python values into canonical bytes (docs/design/key.md).
//!
//! Exact `dict`, `list`, `str`, `int`, `float`, `bool` and `None` are written here, straight
//! into one buffer. Everything else (tuples, subclasses, non-`str` keys, Decimal, ...) is a
//! corner whose behaviour is whatever Python's `normalise` + `json.dumps` do, so it is handed
//! back to the reference helpers: normalised at once (so normalise errors come in the same
//! order as in the reference) and dumped only when the whole walk has succeeded (so dump
//! errors come after every normalise error, as they do in the reference).

use pyo3::exceptions::PyRecursionError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyList, PyString};
use pyo3::Borrowed;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::canon::{self, Text};
use crate::key::{Key, Progress, BLOCK};
use crate::numbers;
use crate::py_reference::{reference, refused};
use crate::shapes::{KeyHandle, ShapeCache};

pub use crate::canon::MAX_DEPTH;

static DEFAULT_VOLATILE: PyOnceLock<Arc<VolatileKeys>> = PyOnceLock::new();

/// The dict keys to drop, held both as a Python frozenset (for the reference helpers) and as
/// WTF-8 bytes (so exact `str` keys are tested without calling into Python).
pub struct VolatileKeys {
    /// Unique to this set, for the shapes chosen under it ([`ShapeCache`]).
    id: u64,
    set: Py<PyFrozenSet>,
    names: crate::json::VolatileNames,
    /// Bit n set when some name has n code points (n < 64): most keys are ruled out by
    /// their length alone, without comparing text.
    lengths: u64,
    /// False when the set holds something other than exact `str`s: such an element could
    /// compare equal to a `str` key in ways only Python can decide, so the whole call goes
    /// to the reference implementation.
    only_exact_str: bool,
}

impl VolatileKeys {
    /// Runs `f` on the set `arg` names: the default one (shared, not even counted) for
    /// `None`, else [`VolatileKeys::from_arg`]'s.
    pub fn with_arg<R>(
        py: Python<'_>,
        arg: Option<&Bound<'_, PyAny>>,
        f: impl FnOnce(&VolatileKeys) -> PyResult<R>,
    ) -> PyResult<R> {
        if arg.is_none_or(|obj| obj.is_none()) {
            if let Some(default) = DEFAULT_VOLATILE.get(py) {
                return f(default);
            }
        }
        f(&*Self::from_arg(py, arg)?)
    }

    /// `None` means the default set; anything else is an iterable replacing it.
    pub fn from_arg(py: Python<'_>, arg: Option<&Bound<'_, PyAny>>) -> PyResult<Arc<Self>> {
        let obj = match arg {
            Some(obj) if !obj.is_none() => obj,
            _ => {
                return DEFAULT_VOLATILE
                    .get_or_try_init(py, || {
                        let set = reference(py)?
                            .DEFAULT_VOLATILE_KEYS
                            .bind(py)
                            .clone()
                            .cast_into::<PyFrozenSet>()?;
                        Self::from_set(set).map(Arc::new)
                    })
                    .cloned()
            }
        };
        if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
            let checked = reference(py).and_then(|r| r.volatile_set.bind(py).call1((obj,)));
            return Err(refused(checked, "volatile_keys"));
        }
        if let Ok(set) = obj.cast_exact::<PyFrozenSet>() {
            return Self::from_frozenset(set);
        }
        let set = PyFrozenSet::new(py, obj.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
        Self::from_set(set).map(Arc::new)
    }

    /// The set for a frozenset, which (immutable) is used as it is: the same one as last
    /// time when the caller passes the same object call after call, as callers with a set
    /// of their own usually do, so that the layouts remembered under it serve again.
    fn from_frozenset(set: &Bound<'_, PyFrozenSet>) -> PyResult<Arc<Self>> {
        /// The last frozenset met, held by its `VolatileKeys` (so its address is its own).
        static LAST: Mutex<Option<Arc<VolatileKeys>>> = Mutex::new(None);
        let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = last.as_ref().filter(|k| k.set.as_ptr() == set.as_ptr()) {
            return Ok(Arc::clone(keys));
        }
        let keys = Arc::new(Self::from_set(set.clone())?);
        let replaced = last.replace(Arc::clone(&keys));
        drop(last);
        // Freed outside the lock: freeing a set's elements may run Python code, which may
        // key a call of its own.
        drop(replaced);
        Ok(keys)
    }

    fn from_set(set: Bound<'_, PyFrozenSet>) -> PyResult<Self> {
        let mut names = Vec::with_capacity(set.len());
        let mut only_exact_str = true;
        for item in set.iter() {
            if is_exact(&item, &raw mut ffi::PyUnicode_Type) {
                // SAFETY: checked above that `item` is an exact str.
                let text = unsafe { item.cast_unchecked::<PyString>() };
                names.push(wtf8_of(text)?);
            } else {
                only_exact_str = false;
            }
        }
        let lengths = names.iter().fold(0u64, |mask, name| {
            let count = Text::Wtf8(name).code_points().count();
            mask | if count < 64 { 1 << count } else { 1 << 63 }
        });
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(VolatileKeys {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            set: set.unbind(),
            names: crate::json::VolatileNames::new(names),
            lengths,
            only_exact_str,
        })
    }

    /// The WTF-8 names of the exact-`str` keys to drop, for the JSON parser.
    pub fn names(&self) -> &crate::json::VolatileNames {
        &self.names
    }

    pub fn only_exact_str(&self) -> bool {
        self.only_exact_str
    }

    pub fn set<'py>(&self, py: Python<'py>) -> &Bound<'py, PyFrozenSet> {
        self.set.bind(py)
    }

    fn contains(&self, key: Text<'_>) -> bool {
        let count = key.len();
        let bit = if count < 64 { 1u64 << count } else { 1 << 63 };
        if self.lengths & bit == 0 {
            return false;
        }
        // A set lookup, not a scan: a caller may pass thousands of volatile keys.
        match key {
            Text::Latin1(bytes) if bytes.is_ascii() => self.names.has(bytes),
            _ => {
                let mut wtf8 = Vec::with_capacity(count * 3);
                key.code_points()
                    .for_each(|c| canon::push_wtf8(&mut wtf8, c));
                self.names.has(&wtf8)
            }
        }
    }
}

/// The code points of a `str` as WTF-8, lone surrogates included.
pub fn wtf8_of(text: &Bound<'_, PyString>) -> PyResult<Vec<u8>> {
    let mut out = Vec::new();
    push_wtf8_of(&mut out, text)?;
    Ok(out)
}

/// Appends the code points of a `str` to `out` as WTF-8 ([`wtf8_of`]).
pub fn push_wtf8_of(out: &mut Vec<u8>, text: &Bound<'_, PyString>) -> PyResult<()> {
    // JSON text arrives as long non-ASCII strings (`ensure_ascii=False`) often enough for
    // this to matter: ASCII goes 16 units at a time, with room made once.
    match text_of(text)? {
        Text::Latin1(units) => {
            out.reserve(units.len() * 2);
            push_wtf8_chunked(out, units, narrow_latin1);
        }
        Text::Ucs2(units) => {
            out.reserve(units.len() * 3);
            push_wtf8_chunked(out, units, narrow_ucs2);
        }
        other => other.code_points().for_each(|c| canon::push_wtf8(out, c)),
    }
    Ok(())
}

/// Appends `units` as WTF-8, 16 at a time: `narrow` gives their low bytes and a mask of
/// the units that are not ASCII, which alone are encoded one by one (text that is mostly
/// ASCII has a word or two in other scripts: a name, a city).
fn push_wtf8_chunked<U: Copy + Into<u32>>(
    out: &mut Vec<u8>,
    units: &[U],
    narrow: impl Fn(&[U; 16]) -> ([u8; 16], u32),
) {
    let (chunks, rest) = units.as_chunks::<16>();
    for chunk in chunks {
        let (bytes, mut wide) = narrow(chunk);
        if wide == 0 {
            canon::push_small(out, &bytes);
            continue;
        }
        let mut k = 0;
        while wide != 0 {
            let at = wide.trailing_zeros() as usize;
            canon::push_small(out, &bytes[k..at]);
            push_bmp_units(out, &chunk[at..at + 1]);
            k = at + 1;
            wide &= wide - 1;
        }
        canon::push_small(out, &bytes[k..]);
    }
    push_bmp_units(out, rest);
}

/// Appends code units below U+10000 (Latin-1 or UCS-2; a surrogate as the three bytes of
/// its own code point) as WTF-8, into room made once for all of them.
fn push_bmp_units<U: Copy + Into<u32>>(out: &mut Vec<u8>, units: &[U]) {
    out.reserve(units.len() * 3);
    let len = out.len();
    let spare = &mut out.spare_capacity_mut()[..units.len() * 3];
    let mut n = 0;
    for &unit in units {
        let c: u32 = unit.into();
        if c < 0x80 {
            spare[n].write(c as u8);
            n += 1;
        } else if c < 0x800 {
            spare[n].write(0xc0 | (c >> 6) as u8);
            spare[n + 1].write(0x80 | (c & 0x3f) as u8);
            n += 2;
        } else {
            spare[n].write(0xe0 | (c >> 12 & 0x0f) as u8);
            spare[n + 1].write(0x80 | (c >> 6 & 0x3f) as u8);
            spare[n + 2].write(0x80 | (c & 0x3f) as u8);
            n += 3;
        }
    }
    // SAFETY: the loop wrote the first `n` bytes of the spare capacity.
    unsafe { out.set_len(len + n) };
}

/// 16 Latin-1 units as they are, with a mask of those from 0x80 up.
#[inline(always)]
fn narrow_latin1(units: &[u8; 16]) -> ([u8; 16], u32) {
    #[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
    // SAFETY: SSE2 is always available on x86_64; the load reads exactly `units`.
    let wide = unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_movemask_epi8};
        _mm_movemask_epi8(_mm_loadu_si128(units.as_ptr().cast::<__m128i>())) as u32
    };
    #[cfg(not(all(target_arch = "x86_64", not(feature = "portable"))))]
    let wide = non_ascii_mask(units);
    (*units, wide)
}

/// Bit k set when unit k is 0x80 or above (the portable twin of the SSE2 masks).
#[cfg(not(all(target_arch = "x86_64", not(feature = "portable"))))]
fn non_ascii_mask<U: Copy + Into<u32>>(units: &[U; 16]) -> u32 {
    units.iter().enumerate().fold(0, |mask, (k, &u)| {
        mask | u32::from(Into::<u32>::into(u) >= 0x80) << k
    })
}

/// The low bytes of 16 UCS-2 units, with a mask of the units from 0x80 up: one check and
/// one narrowing for all (SSE2), where unit by unit cost three times as much on CJK or
/// Greek JSON text.
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
#[inline(always)]
fn narrow_ucs2(units: &[u16; 16]) -> ([u8; 16], u32) {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi16, _mm_loadu_si128, _mm_movemask_epi8,
        _mm_packs_epi16, _mm_packus_epi16, _mm_set1_epi16, _mm_setzero_si128, _mm_storeu_si128,
    };
    // SAFETY: SSE2 is always available on x86_64; the loads read the 32 bytes of `units`
    // and the store writes the 16 of `bytes`.
    unsafe {
        let low = _mm_loadu_si128(units.as_ptr().cast::<__m128i>());
        let high = _mm_loadu_si128(units.as_ptr().add(8).cast::<__m128i>());
        let ascii =
            |v| _mm_cmpeq_epi16(_mm_and_si128(v, _mm_set1_epi16(-0x80)), _mm_setzero_si128());
        // One byte per unit, 0xff where it is ASCII.
        let ascii = _mm_packs_epi16(ascii(low), ascii(high));
        let wide = !(_mm_movemask_epi8(ascii) as u32) & 0xffff;
        let mut bytes = [0u8; 16];
        _mm_storeu_si128(
            bytes.as_mut_ptr().cast::<__m128i>(),
            _mm_packus_epi16(low, high),
        );
        (bytes, wide)
    }
}

#[cfg(not(all(target_arch = "x86_64", not(feature = "portable"))))]
fn narrow_ucs2(units: &[u16; 16]) -> ([u8; 16], u32) {
    (units.map(|u| u as u8), non_ascii_mask(units))
}

/// A key as the `str` users see: its 16 hex digits, written straight into a new ASCII
/// string (no UTF-8 decoding of a temporary).
pub fn key_str(py: Python<'_>, key: Key) -> PyResult<Bound<'_, PyString>> {
    let digits = crate::key::key_hex_digits(key);
    // SAFETY: PyUnicode_New(16, 127) makes a compact ASCII str with room for 16 one-byte
    // characters (plus its NUL), which are written before anyone else sees the object; a
    // NULL return (out of memory) becomes the raised error.
    unsafe {
        let ptr = ffi::PyUnicode_New(16, 127);
        let obj = Bound::from_owned_ptr_or_err(py, ptr)?;
        std::ptr::copy_nonoverlapping(digits.as_ptr(), ffi::PyUnicode_DATA(ptr).cast::<u8>(), 16);
        Ok(obj.cast_into_unchecked::<PyString>())
    }
}

/// The characters of a `str` that CPython stores as compact ASCII (it knows, and says so in
/// the object's header): most JSON text and keys. `None` for any other `str`.
pub fn ascii_of<'a>(text: &'a Bound<'_, PyString>) -> Option<&'a [u8]> {
    let ptr = text.as_ptr();
    // SAFETY: `ptr` is a str; a compact ASCII one keeps its characters right after its
    // header, and the slice borrows `text`, which outlives it; str objects are immutable.
    #[cfg(not(Py_3_14))]
    unsafe {
        (ffi::PyUnicode_IS_COMPACT_ASCII(ptr) != 0).then(|| {
            let len = ffi::PyUnicode_GET_LENGTH(ptr) as usize;
            std::slice::from_raw_parts(ffi::PyUnicode_DATA(ptr) as *const u8, len)
        })
    }
    // CPython 3.14 changed the header's bit fields, and PyO3 0.30 no longer reads them (no
    // `PyUnicode_IS_COMPACT_ASCII`): a one-byte str is taken as ASCII when its bytes are,
    // a scan of the text (SIMD in `is_ascii`) where earlier versions read one bit.
    // SAFETY: `ptr` is a str; `PyUnicode_DATA` points at its `PyUnicode_GET_LENGTH` code
    // units of `PyUnicode_KIND` bytes each, which the slice borrows with `text`, which
    // outlives it; str objects are immutable.
    #[cfg(Py_3_14)]
    unsafe {
        if ffi::PyUnicode_KIND(ptr) != ffi::PyUnicode_1BYTE_KIND {
            return None;
        }
        let len = ffi::PyUnicode_GET_LENGTH(ptr) as usize;
        let units = std::slice::from_raw_parts(ffi::PyUnicode_DATA(ptr) as *const u8, len);
        units.is_ascii().then_some(units)
    }
}

/// A view of a `str`'s own code units: no copy, no UTF-8 cache, lone surrogates intact
/// (PyO3's `to_str` fails on those and `to_string_lossy` changes them).
pub fn text_of<'a>(text: &'a Bound<'_, PyString>) -> PyResult<Text<'a>> {
    // Nearly every key and most values.
    if let Some(ascii) = ascii_of(text) {
        return Ok(Text::Latin1(ascii));
    }
    // SAFETY: the view borrows `text`, which the caller keeps alive while using it, and
    // str objects are immutable.
    Ok(match unsafe { text.data() }? {
        pyo3::types::string::PyStringData::Ucs1(units) => Text::Latin1(units),
        pyo3::types::string::PyStringData::Ucs2(units) => Text::Ucs2(units),
        pyo3::types::string::PyStringData::Ucs4(units) => Text::Ucs4(units),
    })
}

#[inline]
fn is_exact(obj: &Bound<'_, PyAny>, ty: *mut ffi::PyTypeObject) -> bool {
    std::ptr::eq(obj.get_type_ptr(), ty)
}

fn too_deep() -> PyErr {
    PyRecursionError::new_err(format!("arguments nested deeper than {MAX_DEPTH} levels"))
}

/// A dict key held by a remembered shape ([`ShapeCache`]).
struct HeldKey(Py<PyString>);

impl KeyHandle for HeldKey {
    fn address(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

/// A corner handed to Python: where its JSON text goes, and the normalised value.
struct Deferred<'py> {
    at: usize,
    value: Bound<'py, PyAny>,
}

/// One walk: the buffer, and the corners whose JSON text is spliced in at the end.
struct Walker<'a, 'py> {
    py: Python<'py>,
    volatile: &'a VolatileKeys,
    shapes: &'a mut ShapeCache<HeldKey>,
    out: Vec<u8>,
    deferred: Vec<Deferred<'py>>,
    /// The hashing of `out` so far, when the walk is for a key: blocks are hashed as they
    /// fill ([`Walker::absorb`]), until a corner is deferred.
    hashing: Option<&'a mut Progress>,
    /// The length of `out` at which its next block is complete (`usize::MAX`: not hashing).
    next_block_end: usize,
    /// The entries of the dicts being walked, (key, value), borrowed from them: no
    /// reference counting for the common walk, in which no Python code runs (owned, the
    /// references cost the 1 KB call 7% and the 100 KB call 3%).
    entries: Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>,
    /// The first this many entries hold a reference of the walk's own ([`Walker::pin_entries`]).
    pinned: usize,
    /// Strings' whitespace collapsed (the key contract); `false` for the guard's verbatim
    /// keys of the tools that see their arguments' whitespace (the reference's
    /// `verbatim_key`).
    collapse: bool,
}

impl<'py> Walker<'_, 'py> {
    /// Hashes the next block once it is written: a block at a time between values, part of
    /// SHA-256's work runs beside the walk's own instead of after it. Measured against
    /// hashing only at the end: 1 KB call 1.94-2.01 -> 1.78-1.83 µs, 100 KB call 98-104 ->
    /// 90-97 µs. (Finer steps, a few rounds between values, measured slower: 109-115 µs.)
    #[inline(always)]
    fn absorb(&mut self) {
        if self.out.len() >= self.next_block_end {
            self.absorb_block();
        }
    }

    fn absorb_block(&mut self) {
        // Text spliced in for a deferred corner goes at or after the first such corner's
        // offset: the bytes before it are final, the bytes after it are not.
        match self.hashing.as_deref_mut() {
            Some(progress) if self.deferred.is_empty() => {
                progress.absorb_block(&self.out);
                self.next_block_end = progress.hashed() + BLOCK;
            }
            _ => self.next_block_end = usize::MAX,
        }
    }

    /// Inlined into the dict and list loops, which stay out of line: a scalar then costs no
    /// call, where it cost a call with the containers' large frame (seed call 170 -> 164 ns,
    /// 100 KB call 94 -> 92 µs).
    #[inline(always)]
    fn value(&mut self, obj: &Bound<'py, PyAny>, depth: usize) -> PyResult<()> {
        let ty = obj.get_type_ptr();
        if std::ptr::eq(ty, &raw mut ffi::PyUnicode_Type) {
            // SAFETY: exact str, checked above.
            let text = unsafe { obj.cast_unchecked::<PyString>() };
            if self.collapse {
                canon::write_collapsed_str(&mut self.out, text_of(text)?);
            } else {
                canon::write_str(&mut self.out, text_of(text)?);
            }
        } else if std::ptr::eq(ty, &raw mut ffi::PyDict_Type) {
            // SAFETY: exact dict, checked above.
            self.dict(unsafe { obj.cast_unchecked::<PyDict>() }, depth)?;
        } else if std::ptr::eq(ty, &raw mut ffi::PyList_Type) {
            // SAFETY: exact list, checked above.
            self.list(unsafe { obj.cast_unchecked::<PyList>() }, depth)?;
        } else if std::ptr::eq(ty, &raw mut ffi::PyLong_Type) {
            self.int(obj);
        } else if std::ptr::eq(ty, &raw mut ffi::PyFloat_Type) {
            // SAFETY: exact float, checked above.
            numbers::write_float(&mut self.out, unsafe {
                ffi::PyFloat_AS_DOUBLE(obj.as_ptr())
            });
        } else if obj.is_none() {
            self.out.extend_from_slice(b"null");
        } else if std::ptr::eq(ty, &raw mut ffi::PyBool_Type) {
            // SAFETY: comparing pointers only.
            let truth = std::ptr::eq(obj.as_ptr(), unsafe { ffi::Py_True() });
            self.out
                .extend_from_slice(if truth { b"true" } else { b"false" });
        } else {
            self.hand_to_python(obj, depth)?;
        }
        Ok(())
    }

    fn int(&mut self, obj: &Bound<'py, PyAny>) {
        let mut overflow = 0;
        // SAFETY: `obj` is an exact int; the call cannot fail for one except by overflow,
        // which it reports in `overflow` rather than by raising.
        let value = unsafe { ffi::PyLong_AsLongLongAndOverflow(obj.as_ptr(), &mut overflow) };
        if overflow == 0 {
            numbers::write_i64(&mut self.out, value);
        } else {
            // Beyond 64 bits: Python writes it (and raises past its digit limit, at the same
            // point in the sequence of errors as the reference's json.dumps does).
            self.deferred.push(Deferred {
                at: self.out.len(),
                value: obj.clone(),
            });
        }
    }

    #[inline(never)]
    fn list(&mut self, list: &Bound<'py, PyList>, depth: usize) -> PyResult<()> {
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        self.out.push(b'[');
        // The length is read afresh at each step, as Python's own iteration does: a callback
        // into Python may grow or shrink the list, and the reference sees those items.
        let mut i = 0;
        while i < list.len() {
            if i > 0 {
                self.out.push(b',');
            }
            let item = list.get_item(i)?;
            self.value(&item, depth + 1)?;
            self.absorb();
            i += 1;
        }
        self.out.push(b']');
        Ok(())
    }

    #[inline(never)]
    fn dict(&mut self, dict: &Bound<'py, PyDict>, depth: usize) -> PyResult<()> {
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        let base = self.entries.len();
        let walked = self.dict_entries(dict, depth, base);
        self.release_entries(base);
        walked
    }

    /// Walks `dict`, its entries listed in `self.entries` from `base` on.
    fn dict_entries(
        &mut self,
        dict: &Bound<'py, PyDict>,
        depth: usize,
        base: usize,
    ) -> PyResult<()> {
        let mut pos: ffi::Py_ssize_t = 0;
        let mut key_ptr = std::ptr::null_mut();
        let mut value_ptr = std::ptr::null_mut();
        // SAFETY: `dict` is a dict; PyDict_Next hands out borrowed references, valid while
        // the dict is unchanged, and no Python code runs in this loop.
        while unsafe { ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut key_ptr, &mut value_ptr) }
            != 0
        {
            // SAFETY: comparing the type pointer of a live object.
            if unsafe { ffi::Py_TYPE(key_ptr) } != &raw mut ffi::PyUnicode_Type {
                // Non-str keys sort and compare as only Python knows: the whole dict goes back.
                return self.hand_to_python(dict.as_any(), depth);
            }
            self.entries.push((key_ptr, value_ptr));
        }
        let count = self.entries.len() - base;
        // SAFETY (for each `borrowed` below): the entries are the dict's own references,
        // still valid: no Python code has run since they were listed, or they were pinned
        // first (`hand_to_python`).
        let py = self.py;
        let borrowed = |ptr: *mut ffi::PyObject| unsafe { Borrowed::from_ptr(py, ptr) };
        // Which keys are written, in which order and how, depends on the keys alone: it is
        // worked out once per layout of keys (and volatile set) and remembered.
        let volatile = self.volatile;
        let entries = &self.entries[base..];
        let address = |i: usize| entries[i].0 as usize;
        let shape = match self.shapes.find_by_address(volatile.id, count, address) {
            Some(shape) => shape,
            None => {
                // SAFETY: every key was checked to be an exact str.
                let keys: SmallVec<[Borrowed<'_, 'py, PyString>; 8]> = entries
                    .iter()
                    .map(|&(key, _)| unsafe { borrowed(key).cast_unchecked::<PyString>() })
                    .collect();
                let texts = keys
                    .iter()
                    .map(|key| text_of(key))
                    .collect::<PyResult<SmallVec<[Text<'_>; 8]>>>()?;
                self.shapes.lookup(
                    volatile.id,
                    count,
                    |i| texts[i],
                    |i| HeldKey(keys[i].to_owned().unbind()),
                    |text| volatile.contains(text),
                )
            }
        };
        self.out.push(b'{');
        let mut first = true;
        for (index, rendered_key) in shape.kept() {
            let value = borrowed(self.entries[base + index].1);
            if value.is_none() {
                continue;
            }
            if !first {
                self.out.push(b',');
            }
            first = false;
            canon::push_small(&mut self.out, rendered_key);
            self.value(&value, depth + 1)?;
            self.absorb();
        }
        self.out.push(b'}');
        Ok(())
    }

    /// Takes a reference of the walk's own to every entry listed: done before any Python
    /// code runs, since that code may change the dicts being walked and free what they held.
    fn pin_entries(&mut self) {
        for &(key, value) in &self.entries[self.pinned..] {
            // SAFETY: the entries are still the dicts' own (nothing ran since listing them).
            unsafe {
                ffi::Py_IncRef(key);
                ffi::Py_IncRef(value);
            }
        }
        self.pinned = self.entries.len();
    }

    /// Forgets the entries listed from `base` on, giving back the references pinned.
    #[inline]
    fn release_entries(&mut self, base: usize) {
        if self.pinned <= base {
            // The common case: no Python code ran while walking the dict.
            self.entries.truncate(base);
            return;
        }
        self.release_pinned(base);
    }

    #[cold]
    fn release_pinned(&mut self, base: usize) {
        let pinned: SmallVec<[(*mut ffi::PyObject, *mut ffi::PyObject); 8]> = self
            .entries
            .drain(base..)
            .take(self.pinned.saturating_sub(base))
            .collect();
        self.pinned = self.pinned.min(base);
        for (key, value) in pinned {
            // SAFETY: each pinned entry holds a reference of the walk's own. Freeing a value
            // may run Python code: every entry still listed is pinned by then (pins cover
            // all entries listed at the time, and only the latest are forgotten).
            unsafe {
                ffi::Py_DecRef(key);
                ffi::Py_DecRef(value);
            }
        }
    }

    fn hand_to_python(&mut self, obj: &Bound<'py, PyAny>, depth: usize) -> PyResult<()> {
        self.pin_entries();
        let normalised = reference(self.py)?.normalise_at.bind(self.py).call1((
            obj,
            self.volatile.set.bind(self.py),
            depth,
            self.collapse,
        ))?;
        self.deferred.push(Deferred {
            at: self.out.len(),
            value: normalised,
        });
        Ok(())
    }

    /// The buffer with the deferred corners' JSON text spliced in.
    fn finish(self) -> PyResult<Vec<u8>> {
        if self.deferred.is_empty() {
            return Ok(self.out);
        }
        let dumps = reference(self.py)?.dumps_normalised.bind(self.py);
        let mut spliced = Vec::with_capacity(self.out.len() + 16 * self.deferred.len());
        let mut copied = 0;
        for Deferred { at, value } in &self.deferred {
            spliced.extend_from_slice(&self.out[copied..*at]);
            // Its depth, tuples included, was checked by `normalise_at`: json.dumps stays far
            // from Python's recursion limit, so it is as safe to call from here as from the
            // reference's walk.
            let text = dumps.call1((value,))?;
            // json.dumps with ensure_ascii returns ASCII, so the str's bytes are the UTF-8.
            spliced.extend_from_slice(text.cast_into::<PyString>()?.to_str()?.as_bytes());
            copied = *at;
        }
        spliced.extend_from_slice(&self.out[copied..]);
        Ok(spliced)
    }
}

/// The tool name, which must be a `str` (else the reference's `check_name` raises).
pub fn check_name<'a, 'py>(name: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyString>> {
    name.cast::<PyString>().map_err(|_| {
        let py = name.py();
        let checked = reference(py).and_then(|r| r.check_name.bind(py).call1((name,)));
        refused(checked, "a tool name")
    })
}

/// The canonical bytes of one call: `{"args":<normalised args>,"tool":<name>}`.
pub fn canonical_bytes(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    args: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
) -> PyResult<Vec<u8>> {
    write_canonical(
        py,
        name,
        args,
        volatile,
        Vec::with_capacity(128),
        None,
        true,
    )
}

thread_local! {
    /// One output buffer a thread, reused from call to call: most keys then cost no
    /// allocation. Taken out while in use, so a re-entrant call simply gets a fresh one.
    static BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

thread_local! {
    /// The list of dict entries a walk borrows ([`Walker::entries`]), reused from walk to
    /// walk. Taken out while in use, as the other buffers are.
    static ENTRIES: std::cell::Cell<Vec<(*mut ffi::PyObject, *mut ffi::PyObject)>> =
        const { std::cell::Cell::new(Vec::new()) };
}

thread_local! {
    /// The key layouts this thread's walks met lately (see [`ShapeCache`]).
    static SHAPES: std::cell::Cell<ShapeCache<HeldKey>> = std::cell::Cell::new(ShapeCache::default());
}

/// Buffers larger than this are not kept for the next call (one huge call made them grow;
/// keeping that much per thread would outlast it).
pub const KEPT_BUFFER_BYTES: usize = 1 << 20;

/// The key of canonical bytes written by `write` into this thread's reused buffer.
pub fn key_with_buffer<E>(write: impl FnOnce(Vec<u8>) -> Result<Vec<u8>, E>) -> Result<Key, E> {
    key_with_progress(|buffer, _| write(buffer))
}

/// [`key_with_buffer`] for a writer that hashes the blocks it completes as it goes.
fn key_with_progress<E>(
    write: impl FnOnce(Vec<u8>, &mut Progress) -> Result<Vec<u8>, E>,
) -> Result<Key, E> {
    let mut buffer = BUFFER.with(|b| b.take());
    buffer.clear();
    // Lent to the writer rather than returned by it: moved, the state was stored in parts
    // and read back whole, a store-forwarding stall that cost short calls 15 ns.
    let mut progress = Progress::default();
    let mut bytes = write(buffer, &mut progress)?;
    let key = progress.finish(&mut bytes);
    if bytes.capacity() <= KEPT_BUFFER_BYTES {
        BUFFER.with(|b| b.set(bytes));
    }
    Ok(key)
}

/// The key of one call.
pub fn canonical_key(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    args: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
) -> PyResult<Key> {
    key_with_progress(|buffer, progress| {
        write_canonical(py, name, args, volatile, buffer, Some(progress), true)
    })
}

/// The guard's key of a call whose strings keep their whitespace (the reference's
/// `verbatim_key`: code, patches, file contents); `None` where the volatile set holds other
/// than exact `str`s, which only the reference walks.
pub fn verbatim_key(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    args: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
) -> PyResult<Option<Key>> {
    if !volatile.only_exact_str {
        return Ok(None);
    }
    key_with_progress(|buffer, progress| {
        write_canonical(py, name, args, volatile, buffer, Some(progress), false)
    })
    .map(Some)
}

fn write_canonical(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    args: &Bound<'_, PyAny>,
    volatile: &VolatileKeys,
    out: Vec<u8>,
    hashing: Option<&mut Progress>,
    collapse: bool,
) -> PyResult<Vec<u8>> {
    let name = check_name(name)?;
    if !volatile.only_exact_str {
        let helpers = reference(py)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("volatile_keys", volatile.set.bind(py))?;
        let bytes = helpers
            .canonical_json
            .bind(py)
            .call((name, args), Some(&kwargs))?;
        return Ok(bytes.cast_into::<PyBytes>()?.as_bytes().to_vec());
    }
    // Taken out while in use, so a re-entrant call (from a callback) starts a cache of its own.
    let mut shapes = SHAPES.with(|s| s.take());
    let mut walker = Walker {
        py,
        volatile,
        shapes: &mut shapes,
        out,
        deferred: Vec::new(),
        next_block_end: if hashing.is_some() { BLOCK } else { usize::MAX },
        hashing,
        entries: ENTRIES.with(|e| e.take()),
        pinned: 0,
        collapse,
    };
    walker.out.extend_from_slice(b"{\"args\":");
    let walked = walker.value(args, 0).and_then(|()| {
        walker.out.extend_from_slice(b",\"tool\":");
        canon::write_str(&mut walker.out, text_of(name)?);
        walker.out.push(b'}');
        Ok(())
    });
    // Empty again by now (each dict forgets its entries), and kept for the next walk.
    ENTRIES.with(|e| e.set(std::mem::take(&mut walker.entries)));
    let written = walked.and_then(|()| walker.finish());
    SHAPES.with(|s| s.set(shapes));
    written
}

/// `call_key(name, args, /, *, volatile_keys=None) -> str`
#[pyfunction]
#[pyo3(signature = (name, args, /, *, volatile_keys = None))]
pub fn call_key<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    args: &Bound<'py, PyAny>,
    volatile_keys: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyString>> {
    check_name(name)?;
    let key = VolatileKeys::with_arg(py, volatile_keys, |volatile| {
        canonical_key(py, name, args, volatile)
    })?;
    key_str(py, key)
}

/// `canonical_json(name, args, /, *, volatile_keys=None) -> bytes`
#[pyfunction]
#[pyo3(signature = (name, args, /, *, volatile_keys = None))]
pub fn canonical_json<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyAny>,
    args: &Bound<'py, PyAny>,
    volatile_keys: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    check_name(name)?;
    let bytes = VolatileKeys::with_arg(py, volatile_keys, |volatile| {
        canonical_bytes(py, name, args, volatile)
    })?;
    Ok(PyBytes::new(py, &bytes))
}
