//! Just enough of the Arrow C data interface (<https://arrow.apache.org/docs/format/CDataInterface.html>)
//! to read a table of calls without copying its strings: the three structs, a stream's
//! batches, and typed views of the columns replay reads (strings, string views, integers,
//! floats, booleans). Free of Python: the capsules are opened in `py_arrow.rs`.
//!
//! Why not the arrow-rs crates: replay reads five column types and never builds an array,
//! while `arrow-array` with `ffi` brings `arrow-buffer`, `arrow-data`, `arrow-schema`, `half`,
//! `num` and `chrono` into a crate that is otherwise four small dependencies; the structs
//! below are the whole of what is used, and every pointer read is bounded by the lengths and
//! offsets the producer gives, as the specification requires of a consumer.

use std::ffi::{c_char, c_int, c_void, CStr};

#[repr(C)]
pub struct FfiSchema {
    pub format: *const c_char,
    pub name: *const c_char,
    pub metadata: *const c_char,
    pub flags: i64,
    pub n_children: i64,
    pub children: *mut *mut FfiSchema,
    pub dictionary: *mut FfiSchema,
    pub release: Option<unsafe extern "C" fn(*mut FfiSchema)>,
    pub private_data: *mut c_void,
}

#[repr(C)]
pub struct FfiArray {
    pub length: i64,
    pub null_count: i64,
    pub offset: i64,
    pub n_buffers: i64,
    pub n_children: i64,
    pub buffers: *mut *const c_void,
    pub children: *mut *mut FfiArray,
    pub dictionary: *mut FfiArray,
    pub release: Option<unsafe extern "C" fn(*mut FfiArray)>,
    pub private_data: *mut c_void,
}

#[repr(C)]
pub struct FfiStream {
    pub get_schema: Option<unsafe extern "C" fn(*mut FfiStream, *mut FfiSchema) -> c_int>,
    pub get_next: Option<unsafe extern "C" fn(*mut FfiStream, *mut FfiArray) -> c_int>,
    pub get_last_error: Option<unsafe extern "C" fn(*mut FfiStream) -> *const c_char>,
    pub release: Option<unsafe extern "C" fn(*mut FfiStream)>,
    pub private_data: *mut c_void,
}

impl FfiSchema {
    pub const fn empty() -> FfiSchema {
        FfiSchema {
            format: std::ptr::null(),
            name: std::ptr::null(),
            metadata: std::ptr::null(),
            flags: 0,
            n_children: 0,
            children: std::ptr::null_mut(),
            dictionary: std::ptr::null_mut(),
            release: None,
            private_data: std::ptr::null_mut(),
        }
    }
}

impl FfiArray {
    pub const fn empty() -> FfiArray {
        FfiArray {
            length: 0,
            null_count: 0,
            offset: 0,
            n_buffers: 0,
            n_children: 0,
            buffers: std::ptr::null_mut(),
            children: std::ptr::null_mut(),
            dictionary: std::ptr::null_mut(),
            release: None,
            private_data: std::ptr::null_mut(),
        }
    }
}

/// A schema we own (moved out of its capsule): released when dropped.
pub struct Schema(pub Box<FfiSchema>);

impl Drop for Schema {
    fn drop(&mut self) {
        if let Some(release) = self.0.release {
            // SAFETY: the producer's release callback, called once on the struct it filled.
            unsafe { release(&mut *self.0) };
        }
    }
}

/// An array we own (moved out of its capsule, or filled by a stream): released when dropped.
pub struct Array(pub Box<FfiArray>);

impl Drop for Array {
    fn drop(&mut self) {
        if let Some(release) = self.0.release {
            // SAFETY: as for `Schema`.
            unsafe { release(&mut *self.0) };
        }
    }
}

// SAFETY: the C data interface lets a consumer move a released-on-drop struct to another
// thread (the producer's callbacks must be callable from any thread: the specification's
// "thread safety" section); nothing here is shared.
unsafe impl Send for Array {}
unsafe impl Send for Schema {}

/// A stream we own: its batches one by one; released when dropped.
pub struct Stream(pub Box<FfiStream>);

// SAFETY: as for `Array`: a stream is used by one thread at a time.
unsafe impl Send for Stream {}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(release) = self.0.release {
            // SAFETY: as for `Schema`.
            unsafe { release(&mut *self.0) };
        }
    }
}

impl Stream {
    fn error(&mut self, code: c_int) -> String {
        let text = self.0.get_last_error.and_then(|get| {
            // SAFETY: the producer's own callback; the text it returns lives until the next
            // call on the stream, and is copied at once.
            let ptr = unsafe { get(&mut *self.0) };
            (!ptr.is_null()).then(|| {
                unsafe { CStr::from_ptr(ptr) }
                    .to_string_lossy()
                    .into_owned()
            })
        });
        text.unwrap_or_else(|| format!("error {code} from the Arrow stream"))
    }

    pub fn schema(&mut self) -> Result<Schema, String> {
        let get = self.0.get_schema.ok_or("a released Arrow stream")?;
        let mut out = Box::new(FfiSchema::empty());
        // SAFETY: the producer fills `out`, which we then own and release.
        let code = unsafe { get(&mut *self.0, &mut *out) };
        if code != 0 {
            return Err(self.error(code));
        }
        Ok(Schema(out))
    }

    /// The next batch; `None` at the end.
    pub fn next_batch(&mut self) -> Result<Option<Array>, String> {
        let get = self.0.get_next.ok_or("a released Arrow stream")?;
        let mut out = Box::new(FfiArray::empty());
        // SAFETY: as for `schema`; a released (`release == NULL`) array marks the end.
        let code = unsafe { get(&mut *self.0, &mut *out) };
        if code != 0 {
            return Err(self.error(code));
        }
        if out.release.is_none() {
            return Ok(None);
        }
        Ok(Some(Array(out)))
    }
}

/// A schema's format string and name.
pub fn format_of(schema: &FfiSchema) -> String {
    if schema.format.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string owned by the schema, as the specification requires.
    unsafe { CStr::from_ptr(schema.format) }
        .to_string_lossy()
        .into_owned()
}

pub fn name_of(schema: &FfiSchema) -> String {
    if schema.name.is_null() {
        return String::new();
    }
    // SAFETY: as for `format_of`.
    unsafe { CStr::from_ptr(schema.name) }
        .to_string_lossy()
        .into_owned()
}

/// The children of a struct schema (a record batch's columns): (name, format, has a
/// dictionary).
pub fn fields(schema: &FfiSchema) -> Result<Vec<(String, String, bool)>, String> {
    if format_of(schema) != "+s" {
        return Err(format!(
            "a batch of type {:?}, not a struct",
            format_of(schema)
        ));
    }
    let count = usize::try_from(schema.n_children).map_err(|_| "bad schema")?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: `children` holds `n_children` valid pointers (the specification).
        let child = unsafe { &**schema.children.add(i) };
        out.push((
            name_of(child),
            format_of(child),
            !child.dictionary.is_null(),
        ));
    }
    Ok(out)
}

/// What a column holds, as replay reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Utf8,
    LargeUtf8,
    Utf8View,
    Int,
    UInt,
    Float,
    Bool,
    Null,
}

impl Kind {
    /// The kind of a format string (signed and unsigned integers of any width, floats of 32
    /// and 64 bits); `None`: a type replay does not read natively.
    pub fn of(format: &str) -> Option<Kind> {
        Some(match format {
            "u" => Kind::Utf8,
            "U" => Kind::LargeUtf8,
            "vu" => Kind::Utf8View,
            "c" | "s" | "i" | "l" => Kind::Int,
            "C" | "S" | "I" | "L" => Kind::UInt,
            "f" | "g" => Kind::Float,
            "b" => Kind::Bool,
            "n" => Kind::Null,
            _ => return None,
        })
    }
}

/// One column of a batch, read in place: the pointers stay valid while the batch is alive.
#[derive(Clone, Copy)]
pub struct Column<'a> {
    kind: Kind,
    width: u8,
    array: &'a FfiArray,
    offset: usize,
    len: usize,
}

/// A cell, borrowed from the batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell<'a> {
    Null,
    Text(&'a [u8]),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
}

// SAFETY: a column only reads the batch's buffers, which nothing writes while the batch is
// alive (the producer hands them over immutable); the replay reads them with the GIL released,
// on the thread that holds the batch.
unsafe impl Send for Column<'_> {}
unsafe impl Sync for Column<'_> {}

impl<'a> Column<'a> {
    /// The `index`-th child of a struct batch, of the format `format` (checked against the
    /// schema by the caller).
    pub fn of(batch: &'a FfiArray, index: usize, format: &str) -> Result<Column<'a>, String> {
        let kind = Kind::of(format).ok_or_else(|| format!("type {format:?} not read"))?;
        let count = usize::try_from(batch.n_children).map_err(|_| "bad batch")?;
        if index >= count {
            return Err("a batch with fewer columns than its schema".into());
        }
        // SAFETY: `children` holds `n_children` valid pointers.
        let array = unsafe { &**batch.children.add(index) };
        let wanted = match kind {
            Kind::Utf8 | Kind::LargeUtf8 => 3,
            Kind::Utf8View => 3, // at least: views, validity, sizes (and data buffers)
            Kind::Null => 0,
            _ => 2,
        };
        if array.n_buffers < wanted || array.length < 0 || array.offset < 0 {
            return Err(format!("a malformed {format:?} column"));
        }
        let width = match format {
            "c" | "C" => 1,
            "s" | "S" => 2,
            "i" | "I" | "f" => 4,
            _ => 8,
        };
        // The batch's own offset applies to its children too.
        let offset = (array.offset + batch.offset.max(0)) as usize;
        let len = array.length as usize;
        Ok(Column {
            kind,
            width,
            array,
            offset,
            len,
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn buffer(&self, i: usize) -> *const u8 {
        // SAFETY: `i < n_buffers`, checked in `of` for the buffers read.
        unsafe { *self.array.buffers.add(i) as *const u8 }
    }

    fn valid(&self, at: usize) -> bool {
        if self.array.null_count == 0 {
            return true;
        }
        let bits = self.buffer(0);
        if bits.is_null() {
            return true;
        }
        // SAFETY: the validity bitmap covers `offset + length` bits.
        unsafe { *bits.add(at / 8) >> (at % 8) & 1 == 1 }
    }

    /// The `row`-th cell (`row < len`, checked).
    pub fn get(&self, row: usize) -> Cell<'a> {
        if row >= self.len || self.kind == Kind::Null {
            return Cell::Null;
        }
        let at = self.offset + row;
        if !self.valid(at) {
            return Cell::Null;
        }
        // SAFETY (every read below): buffers sized for `offset + length` elements as the
        // specification lays them out; offsets are checked to be non-decreasing and
        // non-negative before the data they bound is read.
        unsafe {
            match self.kind {
                Kind::Utf8 => {
                    let offsets = self.buffer(1) as *const i32;
                    let (start, end) = (*offsets.add(at), *offsets.add(at + 1));
                    if start < 0 || end < start {
                        return Cell::Null;
                    }
                    let data = self.buffer(2);
                    let len = (end - start) as usize;
                    if len == 0 {
                        return Cell::Text(&[]);
                    }
                    Cell::Text(std::slice::from_raw_parts(data.add(start as usize), len))
                }
                Kind::LargeUtf8 => {
                    let offsets = self.buffer(1) as *const i64;
                    let (start, end) = (*offsets.add(at), *offsets.add(at + 1));
                    if start < 0 || end < start {
                        return Cell::Null;
                    }
                    let len = (end - start) as usize;
                    if len == 0 {
                        return Cell::Text(&[]);
                    }
                    Cell::Text(std::slice::from_raw_parts(
                        self.buffer(2).add(start as usize),
                        len,
                    ))
                }
                Kind::Utf8View => {
                    let view = self.buffer(1).add(at * 16);
                    let len = i32::from_le_bytes(*(view as *const [u8; 4]));
                    if len < 0 {
                        return Cell::Null;
                    }
                    let len = len as usize;
                    if len <= 12 {
                        return Cell::Text(std::slice::from_raw_parts(view.add(4), len));
                    }
                    let index = i32::from_le_bytes(*(view.add(8) as *const [u8; 4]));
                    let start = i32::from_le_bytes(*(view.add(12) as *const [u8; 4]));
                    // Data buffers follow validity and views; the last buffer holds sizes.
                    let buffers = self.array.n_buffers - 3;
                    if index < 0 || start < 0 || i64::from(index) >= buffers {
                        return Cell::Null;
                    }
                    let data = self.buffer(2 + index as usize);
                    Cell::Text(std::slice::from_raw_parts(data.add(start as usize), len))
                }
                Kind::Int => {
                    let data = self.buffer(1);
                    Cell::Int(match self.width {
                        1 => i64::from(*(data as *const i8).add(at)),
                        2 => i64::from(*(data as *const i16).add(at)),
                        4 => i64::from(*(data as *const i32).add(at)),
                        _ => *(data as *const i64).add(at),
                    })
                }
                Kind::UInt => {
                    let data = self.buffer(1);
                    Cell::UInt(match self.width {
                        1 => u64::from(*data.add(at)),
                        2 => u64::from(*(data as *const u16).add(at)),
                        4 => u64::from(*(data as *const u32).add(at)),
                        _ => *(data as *const u64).add(at),
                    })
                }
                Kind::Float => {
                    let data = self.buffer(1);
                    Cell::Float(if self.width == 4 {
                        f64::from(*(data as *const f32).add(at))
                    } else {
                        *(data as *const f64).add(at)
                    })
                }
                Kind::Bool => {
                    let bits = self.buffer(1);
                    Cell::Bool(*bits.add(at / 8) >> (at % 8) & 1 == 1)
                }
                Kind::Null => Cell::Null,
            }
        }
    }
}

/// The number of rows of a batch.
pub fn rows(batch: &FfiArray) -> usize {
    usize::try_from(batch.length).unwrap_or(0)
}
