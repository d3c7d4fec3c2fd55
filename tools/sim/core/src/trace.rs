//! Trace-driven use of a [`Machine`] (validation and speed measurement) and trace generators.

use crate::error::Result;
use crate::machine::{AccessKind, Machine};
use crate::rng::Rng;

/// Make `m` ready for `lines` (each line address is its own slot).
pub fn prepare(m: &mut Machine, lines: &[u64]) -> Result<()> {
    let max = lines.iter().copied().max().unwrap_or(0);
    m.prepare_trace(max)
}

/// Feed `lines` (line addresses) from `cpu`, in order, after [`prepare`].
/// Time does not advance (no queueing).
pub fn run_lines(m: &mut Machine, cpu: usize, lines: &[u64], kind: AccessKind) {
    m.run_lines(cpu, &[], lines, kind);
}

/// Feed `(cpu, line)` pairs in order, after [`prepare`].
pub fn run_cpu_lines(m: &mut Machine, cpus: &[u32], lines: &[u64], kind: AccessKind) {
    if cpus.is_empty() {
        return;
    }
    m.run_lines(0, cpus, &lines[..cpus.len().min(lines.len())], kind);
}

/// Line trace of the read microbenchmark: `reads` times pick one of `n_files` files
/// (uniform, or Zipf 1/n with `zipf`), and read its `file_lines` lines in order.
/// Files occupy consecutive line ranges. Returns the line addresses and, per read,
/// the index of the file read.
pub fn file_read_trace(
    n_files: u64,
    file_lines: u64,
    reads: u64,
    zipf: bool,
    seed: u64,
) -> (Vec<u64>, Vec<u64>) {
    let mut rng = Rng::new(seed);
    let cdf: Vec<f64> = if zipf {
        let mut acc = 0.0;
        let mut v: Vec<f64> = (1..=n_files)
            .map(|k| {
                acc += 1.0 / k as f64;
                acc
            })
            .collect();
        let total = acc;
        v.iter_mut().for_each(|x| *x /= total);
        v
    } else {
        Vec::new()
    };
    let mut lines = Vec::with_capacity((reads * file_lines) as usize);
    let mut files = Vec::with_capacity(reads as usize);
    for _ in 0..reads {
        let f = if zipf {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            cdf.partition_point(|&c| c < u).min(n_files as usize - 1) as u64
        } else {
            rng.below(n_files)
        };
        files.push(f);
        let base = f * file_lines;
        lines.extend(base..base + file_lines);
    }
    (lines, files)
}

/// Uniformly random line addresses below `span` (a hard, miss-heavy trace).
pub fn random_trace(span: u64, n: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.below(span)).collect()
}
