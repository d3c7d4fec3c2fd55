//! The `Trace` class of `unicache_sim._native`: a line-address trace held in native memory
//! (random, or the read microbenchmark's), which an `Engine` runs without Python per access.

use pyo3::prelude::*;
use unicache_sim_core as core;

use crate::error::config_err;

/// A line-address trace held in native memory.
#[pyclass(module = "unicache_sim._native", name = "Trace", frozen)]
pub struct PyTrace {
    pub(crate) lines: Vec<u64>,
    pub(crate) cpus: Vec<u32>,
    /// Largest line address and CPU, computed once (checked by every run).
    pub(crate) max_line: u64,
    pub(crate) max_cpu: u32,
}

impl PyTrace {
    fn build(lines: Vec<u64>, cpus: Vec<u32>) -> Self {
        let max_line = lines.iter().copied().max().unwrap_or(0);
        let max_cpu = cpus.iter().copied().max().unwrap_or(0);
        PyTrace {
            lines,
            cpus,
            max_line,
            max_cpu,
        }
    }
}

#[pymethods]
impl PyTrace {
    /// Trace from a list of line addresses and, optionally, the CPU of each access.
    #[new]
    #[pyo3(signature = (lines, cpus=None))]
    fn new(py: Python<'_>, lines: Vec<u64>, cpus: Option<Vec<u32>>) -> PyResult<Self> {
        let cpus = cpus.unwrap_or_default();
        if !cpus.is_empty() && cpus.len() != lines.len() {
            return Err(config_err(py, "cpus and lines differ in length".into()));
        }
        Ok(PyTrace::build(lines, cpus))
    }

    /// Read-microbenchmark trace: `reads` random files (uniform or Zipf 1/n) of `file_lines`
    /// lines, each read in order; with `n_cpus` > 1 each read runs on a random CPU.
    #[staticmethod]
    #[pyo3(signature = (n_files, file_lines, reads, zipf=false, seed=1, n_cpus=1))]
    fn file_reads(
        n_files: u64,
        file_lines: u64,
        reads: u64,
        zipf: bool,
        seed: u64,
        n_cpus: u32,
    ) -> PyResult<Self> {
        let (lines, files) =
            core::trace::file_read_trace(n_files.max(1), file_lines, reads, zipf, seed);
        let mut cpus = Vec::new();
        if n_cpus > 1 {
            let mut rng = core::rng::Rng::new(seed ^ 0xC0FFEE);
            cpus.reserve(lines.len());
            for _ in &files {
                let c = rng.below(n_cpus as u64) as u32;
                cpus.extend(std::iter::repeat_n(c, file_lines as usize));
            }
        }
        Ok(PyTrace::build(lines, cpus))
    }

    /// Uniformly random line addresses below `span`.
    #[staticmethod]
    fn random(span: u64, n: u64, seed: u64) -> Self {
        PyTrace::build(core::trace::random_trace(span.max(1), n, seed), Vec::new())
    }

    /// Number of accesses.
    fn __len__(&self) -> usize {
        self.lines.len()
    }

    /// The line addresses as a list.
    fn lines(&self) -> Vec<u64> {
        self.lines.clone()
    }
}
