//! tripwire's native core. This file only registers the Python module; the logic lives in
//! pyo3-free modules (tested with `cargo test`) and the conversions in `py_*.rs`.

pub mod arrow_ffi;
pub mod arrow_replay;
pub mod call_ids;
pub mod canon;
pub mod counts;
pub mod events_replay;
pub mod guard;
pub mod json;
pub mod jsonl;
pub mod key;
pub mod name_map;
pub mod numbers;
mod pack;
#[cfg(feature = "python")]
mod py_arrow;
#[cfg(feature = "python")]
mod py_batch;
#[cfg(feature = "python")]
mod py_canon;
#[cfg(feature = "python")]
mod py_events;
#[cfg(feature = "python")]
mod py_guard;
#[cfg(feature = "python")]
mod py_json;
#[cfg(feature = "python")]
mod py_reference;
#[cfg(feature = "python")]
mod py_snapshot;
#[cfg(feature = "python")]
mod py_verdict;
pub mod sha_wide;
pub mod shapes;
pub mod snapshot;
pub mod usage;

/// Deterministic pseudo-random numbers for the unit tests' generated cases.
#[cfg(test)]
mod test_rng {
    /// Marsaglia's xorshift64: fast, repeatable, and good enough to spread test cases.
    pub fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }
}

#[cfg(feature = "python")]
use pyo3::prelude::*;

// Declared as needing the GIL (PyO3 0.30 declares modules GIL-free by default): the walker
// borrows dict entries through PyDict_Next without taking references (py_canon.rs), which is
// sound only while no other thread can change the dict, and on a free-threaded build
// (3.13t, 3.14t) another thread could free an entry mid-walk. Until the walk holds a critical
// section on each dict and list it reads, free-threaded Pythons run this module with the GIL.
#[cfg(feature = "python")]
#[pymodule(gil_used = true)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_canon::call_key, m)?)?;
    m.add_function(wrap_pyfunction!(py_canon::canonical_json, m)?)?;
    m.add_function(wrap_pyfunction!(py_json::call_key_json, m)?)?;
    m.add_function(wrap_pyfunction!(py_batch::call_keys, m)?)?;
    m.add_class::<py_guard::Guard>()?;
    m.add_class::<py_verdict::Verdict>()?;
    m.add_class::<py_arrow::TableReplay>()?;
    m.add_class::<py_events::EventsReplay>()?;
    m.add("MAX_DEPTH", py_canon::MAX_DEPTH)?;
    m.add("CALL_ID_MEMORY", guard::CALL_ID_MEMORY)?;
    m.add("CACHE_ENTRIES", guard::CACHE_ENTRIES)?;
    // The Python names this module calls, resolved now: a missing one fails the import.
    py_reference::init(m.py())?;
    Ok(())
}
