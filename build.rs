//! The Python version the extension is built for, as `cfg`s (`Py_3_14`, `Py_GIL_DISABLED`,
//! ...), for the few places where CPython's C API differs by version (`ascii_of` in
//! `rust/py_canon.rs`). Nothing without the `python` feature: the core knows no Python.

fn main() {
    #[cfg(feature = "python")]
    pyo3_build_config::use_pyo3_cfgs();
}
