//! The one place where core errors become Python exceptions.
//!
//! `SimulatorError` is created at import time as a subclass of
//! `unicache.errors.UnicacheError` (falling back to `Exception` if the host package is not
//! importable), so callers catch simulator failures with the project's root error.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;
use unicache_sim_core::SimError;

static SIMULATOR_ERROR: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// The `SimulatorError` type (created on first use).
pub fn simulator_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    let ty = SIMULATOR_ERROR.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let base: Bound<'_, PyType> = match py.import("unicache.errors") {
            Ok(m) => m.getattr("UnicacheError")?.downcast_into::<PyType>()?,
            Err(_) => py.get_type::<PyException>(),
        };
        PyErr::new_type(
            py,
            c"unicache_sim._native.SimulatorError",
            Some(c"The simulator core refused an operation or configuration."),
            Some(&base),
            None,
        )
    })?;
    Ok(ty.bind(py))
}

/// Convert a core result into a Python result.
pub struct ToPyResult<T>(pub unicache_sim_core::Result<T>);

impl<T> ToPyResult<T> {
    /// Map the error to `SimulatorError(message)`.
    pub fn into_py(self, py: Python<'_>) -> PyResult<T> {
        self.0.map_err(|e| to_pyerr(py, &e))
    }
}

/// Build the Python exception for a core error.
pub fn to_pyerr(py: Python<'_>, e: &SimError) -> PyErr {
    match simulator_error(py) {
        Ok(ty) => PyErr::from_type(ty.clone(), (e.to_string(),)),
        Err(err) => err,
    }
}

/// A `SimulatorError` for a binding-level argument problem.
pub fn config_err(py: Python<'_>, msg: String) -> PyErr {
    to_pyerr(py, &SimError::Config(msg))
}
