//! tripwire's native core. This file only registers the Python module; the logic lives in
//! pyo3-free modules (tested with `cargo test`) and the conversions in `py_*.rs`.

pub mod canon;
pub mod key;
mod py_canon;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_canon::call_key, m)?)?;
    m.add_function(wrap_pyfunction!(py_canon::canonical_json, m)?)?;
    m.add("MAX_DEPTH", py_canon::MAX_DEPTH)?;
    Ok(())
}
