//! Threads: where each runs, its queue of operations, its clock and its accounting.

use std::collections::VecDeque;

use super::Engine;
use crate::error::{Result, SimError};
use crate::machine::AccessKind;

/// One queued operation.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// Touch `len` bytes of object `obj` from `offset`, spending `compute_per_byte` cycles per byte.
    Access {
        obj: u32,
        offset: u64,
        len: u64,
        kind: AccessKind,
        compute_per_byte: f64,
    },
    /// Pure computation.
    Compute { cycles: f64 },
    /// Move to `cpu`, paying `cycles`.
    Migrate { cpu: u32, cycles: f64 },
    /// Idle until time `until` (cycles), holding no CPU: a thread waiting for its next
    /// request. It starts when `until` comes, whatever its CPU is doing meanwhile.
    Sleep { until: f64 },
}

/// Per-thread accounting (all in cycles except counts).
#[derive(Debug, Clone, Default)]
pub struct ThreadStats {
    /// Bytes accessed.
    pub bytes: u64,
    /// Lines accessed.
    pub lines: u64,
    /// Lines served from DRAM (local or remote).
    pub dram_lines: u64,
    /// Lines served by another cache (same or other group).
    pub c2c_lines: u64,
    /// Lines that reached the last level (missed every level inside it): the thread's LLC
    /// references, as a hardware counter counts them.
    pub llc_lines: u64,
    /// Compute cycles.
    pub compute_cycles: f64,
    /// Memory stall cycles.
    pub stall_cycles: f64,
    /// Migration cycles.
    pub migration_cycles: f64,
    /// Cycles spent runnable but waiting for the CPU.
    pub wait_cycles: f64,
    /// Number of migrations.
    pub migrations: u64,
}

/// A thread: its CPU, its clock (cycles), its queue and its accounting.
#[derive(Debug, Clone)]
pub(super) struct Thread {
    pub(super) cpu: u32,
    pub(super) time: f64,
    pub(super) ops: VecDeque<Op>,
    pub(super) stats: ThreadStats,
}

impl Engine {
    /// Add a thread on `cpu` at time `start`.
    pub fn add_thread(&mut self, cpu: u32, start: f64) -> Result<usize> {
        self.check_cpu(cpu)?;
        check_time("a thread's start", start)?;
        self.threads.push(Thread {
            cpu,
            time: start,
            ops: VecDeque::new(),
            stats: ThreadStats::default(),
        });
        self.retired.push(false);
        let tid = self.threads.len() - 1;
        self.refile(tid);
        Ok(tid)
    }

    /// Stop scheduling thread `tid` (it never asks for operations again).
    pub fn retire(&mut self, tid: usize) -> Result<()> {
        self.thread(tid)?;
        self.retired[tid] = true;
        self.refile(tid);
        Ok(())
    }

    /// Queue an operation for thread `tid`.
    pub fn push(&mut self, tid: usize, op: Op) -> Result<()> {
        match op {
            Op::Access {
                obj,
                offset,
                len,
                compute_per_byte,
                ..
            } => {
                check_cost("compute per byte", compute_per_byte)?;
                let size = self.object_size(obj)?;
                if offset.checked_add(len).is_none_or(|end| end > size) {
                    return Err(SimError::Config(format!(
                        "access [{offset}, +{len}) is outside object {obj} of {size} bytes"
                    )));
                }
            }
            Op::Migrate { cpu, cycles } => {
                self.check_cpu(cpu)?;
                check_cost("a migration's cycles", cycles)?;
            }
            Op::Compute { cycles } => check_cost("compute cycles", cycles)?,
            Op::Sleep { until } => check_time("a sleep's end", until)?,
        }
        self.thread(tid)?;
        self.threads[tid].ops.push_back(op);
        if self.threads[tid].ops.len() == 1 {
            self.refile(tid);
        }
        Ok(())
    }

    /// Move thread `tid` to `cpu` now, charging `cycles` (used when a vCPU is re-placed).
    pub fn move_thread(&mut self, tid: usize, cpu: u32, cycles: f64) -> Result<()> {
        self.check_cpu(cpu)?;
        check_cost("a move's cycles", cycles)?;
        self.thread(tid)?;
        let t = &mut self.threads[tid];
        if t.cpu != cpu {
            t.cpu = cpu;
            t.time += cycles;
            t.stats.migration_cycles += cycles;
            t.stats.migrations += 1;
            self.refile(tid);
        }
        Ok(())
    }

    /// CPU of thread `tid`.
    pub fn thread_cpu(&self, tid: usize) -> Result<u32> {
        Ok(self.thread(tid)?.cpu)
    }

    /// Current time (cycles) of thread `tid`.
    pub fn thread_time(&self, tid: usize) -> Result<f64> {
        Ok(self.thread(tid)?.time)
    }

    /// Accounting of thread `tid`.
    pub fn thread_stats(&self, tid: usize) -> Result<ThreadStats> {
        Ok(self.thread(tid)?.stats.clone())
    }

    /// Whether thread `tid` is runnable: not retired, with work queued that is not a
    /// sleep (what a scheduler sees as a task on a run queue).
    pub fn is_runnable(&self, tid: usize) -> Result<bool> {
        self.thread(tid)?;
        // the scheduler's index queues exactly these threads on their CPU
        Ok(self.sched.is_queued(tid))
    }

    /// Per CPU, the runnable threads on it ([`Engine::is_runnable`]).
    pub fn runnable_per_cpu(&self) -> Vec<u32> {
        (0..self.cpu_free.len())
            .map(|cpu| self.sched.queued_on(cpu).len() as u32)
            .collect()
    }

    /// The number of runnable threads on `cpu` ([`Engine::is_runnable`]; 0 for a CPU the
    /// machine lacks): what a wake-up or a newly idle CPU asks of one CPU, without the
    /// whole machine's list.
    pub fn runnable_count(&self, cpu: u32) -> u32 {
        match self.cpu_free.get(cpu as usize) {
            Some(_) => self.sched.queued_on(cpu as usize).len() as u32,
            None => 0,
        }
    }

    /// Of `cpus`, in their order, those with no runnable thread (CPUs the machine lacks
    /// left out).
    pub fn idle_among(&self, cpus: &[u32]) -> Vec<u32> {
        cpus.iter()
            .copied()
            .filter(|&c| {
                (c as usize) < self.cpu_free.len() && self.sched.queued_on(c as usize).is_empty()
            })
            .collect()
    }

    /// (CPU, runnable threads) of every CPU with at least `min` runnable threads, by CPU:
    /// the donors a newly idle CPU may pull from.
    pub fn crowded_cpus(&self, min: u32) -> Vec<(u32, u32)> {
        (0..self.cpu_free.len())
            .filter_map(|cpu| {
                let n = self.sched.queued_on(cpu).len() as u32;
                (n >= min).then_some((cpu as u32, n))
            })
            .collect()
    }

    /// The runnable threads on `cpu` ([`Engine::is_runnable`]), by id.
    pub fn runnable_on(&self, cpu: u32) -> Vec<usize> {
        let mut out = match self.cpu_free.get(cpu as usize) {
            Some(_) => self.sched.queued_on(cpu as usize).to_vec(),
            None => Vec::new(),
        };
        out.sort_unstable();
        out
    }

    /// Number of threads.
    pub fn n_threads(&self) -> usize {
        self.threads.len()
    }

    /// Earliest time of any live thread (the simulation's "now").
    pub fn now(&self) -> f64 {
        self.threads
            .iter()
            .zip(&self.retired)
            .filter(|(_, &r)| !r)
            .map(|(t, _)| t.time)
            .fold(f64::INFINITY, f64::min)
    }

    /// Check that `cpu` exists.
    pub(super) fn check_cpu(&self, cpu: u32) -> Result<()> {
        if cpu as usize >= self.cpu_free.len() {
            return Err(SimError::NotFound("cpu", cpu as u64));
        }
        Ok(())
    }

    /// File thread `tid` again in the scheduler's index, after any change to it.
    fn refile(&mut self, tid: usize) {
        self.sched
            .refile(tid, &self.threads, &self.retired, &self.cpu_free);
    }

    /// Thread `tid`, checked.
    fn thread(&self, tid: usize) -> Result<&Thread> {
        self.threads
            .get(tid)
            .ok_or(SimError::NotFound("thread", tid as u64))
    }
}

/// A time must be finite: the scheduler orders threads by their clocks.
fn check_time(what: &str, value: f64) -> Result<()> {
    if !value.is_finite() {
        return Err(SimError::Config(format!(
            "{what} must be finite, not {value}"
        )));
    }
    Ok(())
}

/// A cost must be finite and not negative: a thread's clock only moves forward.
fn check_cost(what: &str, value: f64) -> Result<()> {
    if !(value.is_finite() && value >= 0.0) {
        return Err(SimError::Config(format!(
            "{what} must be finite and not negative, not {value}"
        )));
    }
    Ok(())
}
