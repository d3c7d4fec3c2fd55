//! Threads, memory objects and the scheduler that interleaves them in simulated time.
//!
//! Each thread runs on a CPU and owns a queue of operations (access a byte range of an
//! object, compute, migrate). The engine always advances the thread that can start
//! earliest, one page-sized chunk at a time, so DRAM queues and CPU sharing see requests
//! in (nearly) time order. When a thread's queue is empty the engine hands control back
//! to the driver (Python), which decides the thread's next operations — this is where
//! the policies run.
//!
//! One concern per module:
//!
//! * this one: the engine's state, construction and the memory system's counters;
//! * `objects`: memory objects and the physical frames behind their pages;
//! * `threads`: threads, their operation queues and accounting;
//! * `run`: the scheduler, one step of an operation, and accesses outside any thread;
//! * `sched`: the scheduler's index of which thread goes next;
//! * `coherence`: one line outside any thread, a store's invalidation, where a line is (DMC).

mod coherence;
mod objects;
mod run;
mod sched;
#[cfg(test)]
mod sched_tests;
mod threads;

use crate::config::MachineConfig;
use crate::error::Result;
use crate::machine::{Counters, Machine};
use crate::pages::PageAllocator;

pub use objects::Placement;
pub use run::Stop;
pub use threads::{Op, ThreadStats};

/// The simulator: machine + page allocator + threads.
///
/// `Send`: independent engines run on threads of one process (the binding releases the
/// GIL around [`Engine::run`] and trace runs).
pub struct Engine {
    machine: Machine,
    pages: PageAllocator,
    objects: Vec<objects::Object>,
    threads: Vec<threads::Thread>,
    retired: Vec<bool>,
    cpu_free: Vec<f64>,
    sched: sched::Schedule,
    line_shift: u32,
    interleave_next: u32,
}

const _: () = {
    const fn send<T: Send>() {}
    send::<Engine>();
};

impl Engine {
    /// New engine over a cold machine; `seed` drives page placement.
    pub fn new(cfg: MachineConfig, seed: u64) -> Result<Self> {
        let node_bytes: Vec<u64> = cfg.nodes.iter().map(|n| n.memory_bytes).collect();
        let page = cfg.page_size as u64;
        let line_shift = cfg.line_size.trailing_zeros();
        let ncpu = cfg.n_cpus();
        let machine = Machine::new(cfg)?;
        Ok(Engine {
            machine,
            pages: PageAllocator::new(&node_bytes, page, seed),
            objects: Vec::new(),
            threads: Vec::new(),
            retired: Vec::new(),
            cpu_free: vec![0.0; ncpu],
            sched: sched::Schedule::new(ncpu),
            line_shift,
            interleave_next: 0,
        })
    }

    /// The memory system.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Mutable memory system (for trace-driven use).
    pub fn machine_mut(&mut self) -> &mut Machine {
        &mut self.machine
    }

    /// Memory-system counters.
    pub fn counters(&self) -> &Counters {
        self.machine.counters()
    }

    /// Zero memory-system counters and per-thread stats (after a warm-up).
    pub fn reset_stats(&mut self) {
        self.machine.reset_counters();
        for t in &mut self.threads {
            t.stats = ThreadStats::default();
        }
    }
}
