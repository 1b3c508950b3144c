//! The Python names the native core calls: exactly `tripwire/_for_native.py`'s `__all__`
//! (which says why each one lives in Python), looked up here and nowhere else, once, while
//! `_core` is initialised, so that a rename fails the import rather than the first call
//! that needs the name. `tests/test_for_native.py` checks that the list below is that
//! `__all__` and that no other Rust file looks a Python name up.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::wrap_pyfunction;

/// Declares [`Reference`], one field a name, and how it is resolved.
macro_rules! reference {
    ($($name:ident),* $(,)?) => {
        /// `tripwire._for_native`'s names, resolved.
        #[allow(non_snake_case)]
        pub(crate) struct Reference {
            $(pub(crate) $name: Py<PyAny>,)*
        }

        impl Reference {
            fn resolve(module: &Bound<'_, PyModule>) -> PyResult<Reference> {
                Ok(Reference {
                    $($name: module.getattr(stringify!($name))?.unbind(),)*
                })
            }
        }
    };
}

reference!(
    // keys
    normalise_at,
    dumps_normalised,
    canonical_json,
    DEFAULT_VOLATILE_KEYS,
    volatile_set,
    check_threads,
    unpack_pair,
    verbatim_key,
    verbatim_key_json,
    call_key_json,
    decode_json_bytes,
    UNPARSABLE,
    invalid_json,
    JSONDecodeError,
    get_int_max_str_digits,
    // guards
    check_limits,
    check_tools,
    check_definitions,
    check_name,
    check_call_id,
    check_flag,
    check_verdict,
    unpack_call,
    infer_policy,
    describe_result,
    content_value,
    json_loads,
    question_of,
    verdict_message,
    // snapshots
    SnapshotError,
    unframe,
    config_bytes,
    read_config,
    json_text,
    json_value,
);

/// The one module the native core imports from the Python package.
const MODULE: &str = "tripwire._for_native";

static REFERENCE: PyOnceLock<Reference> = PyOnceLock::new();
static NATIVE_CALL_KEY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Resolves every name; called by the module's initialiser. `tripwire._for_native` imports
/// only the reference's modules, none of which imports `tripwire._core`, so it can be
/// imported while `_core` is still being initialised.
pub(crate) fn init(py: Python<'_>) -> PyResult<()> {
    reference(py).map(|_| ())
}

/// The resolved names (resolved on first use if `init` has not run: the cargo tests, which
/// build no module).
pub(crate) fn reference(py: Python<'_>) -> PyResult<&Reference> {
    REFERENCE.get_or_try_init(py, || Reference::resolve(&py.import(MODULE)?))
}

/// This module's own `call_key` as a Python callable, for the reference's helpers that key
/// values (`describe_result`, `question_of`): the keys are equal, the native one is faster.
pub(crate) fn native_call_key(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    NATIVE_CALL_KEY.get_or_try_init(py, || {
        Ok(wrap_pyfunction!(crate::py_canon::call_key, py)?
            .into_any()
            .unbind())
    })
}

/// The error a reference check raised for an argument the native core found wrong: `check`
/// is called with the argument (its result is the check's verdict), and is expected to
/// raise, with the message both backends give. If it accepts what the native core refused,
/// the two disagree: a `SystemError` says so rather than letting the call through.
pub(crate) fn refused(checked: PyResult<Bound<'_, PyAny>>, what: &str) -> PyErr {
    match checked {
        Err(err) => err,
        Ok(_) => pyo3::exceptions::PySystemError::new_err(format!(
            "tripwire: the native core refused {what}, and the reference accepted it"
        )),
    }
}
