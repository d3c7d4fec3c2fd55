//! unicache-sim-core: a trace-driven multicore cache / NUMA simulator.
//!
//! * [`cache::Cache`]: one set-associative LRU cache; its set operations, one
//!   implementation per instruction set, are in `simd`.
//! * [`machine::Machine`]: a machine's whole hierarchy (private and shared levels, inclusive,
//!   exclusive and victim levels, cross-cache transfers, NUMA DRAM with FCFS queues).
//! * [`pages::PageAllocator`]: physical frames per node, random or colored.
//! * [`engine::Engine`]: threads with operation queues interleaved in simulated time.
//!
//! No Python here: the binding crate `unicache-sim-py` wraps this one.

pub mod cache;
pub mod config;
pub mod dram;
pub mod engine;
pub mod error;
pub mod hugealloc;
pub mod machine;
pub mod pages;
pub mod rng;
mod simd;
pub mod trace;

pub use config::{Inclusion, LevelConfig, MachineConfig, NodeConfig};
pub use engine::{Engine, Op, Placement, Stop, ThreadStats};
pub use error::{Result, SimError};
pub use machine::{AccessKind, Counters, Machine, Source};
