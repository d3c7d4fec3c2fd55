//! The cache hierarchy of a whole machine: per-CPU private levels, shared levels per group,
//! inclusion, cross-cache transfers through a presence directory, and NUMA DRAM queues.
//!
//! Every line has a dense *slot* id besides its physical address: caches store slots,
//! and the directory is a plain array indexed by slot that counts, per LLC group, how many
//! cache instances of that group hold the line. The counts are exact, so a miss knows at
//! once whether a group-mate or another chip can supply the line, without probing.
//! The engine assigns slots page by page as it allocates frames; a raw trace uses the
//! line address itself as the slot.
//!
//! One concern per module:
//!
//! * this one: the public types, the machine's state and its plain accessors;
//! * `build`: the level tables, from the configuration;
//! * `slots`: slots, their physical lines, and the presence directory;
//! * `paths`: which hot path runs (instruction set, shape) and the entry points into it;
//! * `view`: one CPU's caches as the hot path sees them, read from the tables or fixed
//!   at compile time for a shape;
//! * `access`: the hot path itself (lookups, fills, the eviction chain);
//! * `serve`: where a line in none of the CPU's own levels comes from (caches, DRAM);
//! * `coherence`: a store's invalidation of other copies, and where a line is (DMC).

mod access;
mod build;
mod coherence;
mod paths;
mod serve;
mod slots;
mod view;

use crate::cache::Cache;
use crate::config::MachineConfig;
use crate::dram::DramQueue;

pub use slots::MAX_SLOT;

/// What kind of access a thread makes to a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessKind {
    /// Ordinary (caching) load.
    Read,
    /// Non-temporal load: served from wherever the line is, never allocates.
    NonTemporal,
    /// Store: modelled as write-allocate (no dirtiness, no invalidation of other copies).
    Write,
}

/// Where a line was served from. `Level(i)` is the thread's own hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Own cache level `i` (0 = L1).
    Level(usize),
    /// Another core's cache in the same LLC group.
    SameGroup,
    /// A cache of another LLC group (cross-chip cache-to-cache transfer).
    CrossGroup,
    /// DRAM of the thread's own node.
    DramLocal,
    /// DRAM of another node.
    DramRemote,
}

/// Counters of served lines, indexed like [`Machine::source_index`].
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Lines served per source: levels first, then same-group, cross-group, local, remote DRAM.
    pub served: Vec<u64>,
    /// Lines read from DRAM per node.
    pub dram_lines: Vec<u64>,
    /// Cycles requests waited in DRAM queues, summed.
    pub dram_queue_cycles: f64,
}

/// The simulated memory system.
pub struct Machine {
    cfg: MachineConfig,
    /// Every cache instance, level by level (`level_base[i] + instance`).
    caches: Vec<Cache>,
    level_base: Vec<usize>,
    /// `hier[cpu * n_levels + i]`: index in `caches` of level i of cpu.
    hier: Vec<u32>,
    hit_cycles: Vec<f64>,
    n_levels: usize,
    /// `inst[i][cpu]`: instance of level i serving cpu (copied out of the config).
    inst: Vec<Vec<u32>>,
    victim_filled: Vec<bool>,
    /// `covered_c[c]`: indices in `caches` of the instances above cache `c`.
    covered_c: Vec<Vec<u32>>,
    /// `victim_action[j]`: what happens to a line evicted from level j.
    victim_action: Vec<VictimAction>,
    /// Levels filled on a miss below them (L1 always, then non-victim-filled ones), L1 last.
    fill_levels: Vec<usize>,
    /// Group (last-level instance) of each CPU.
    group_of: Vec<u32>,
    n_groups: usize,
    /// `dir[slot * n_groups + g]`: copies of the line held in group g's caches.
    dir: Vec<u8>,
    /// Physical frame of each page of slots (slot >> `lpp_shift`).
    frame_of_page: Vec<u64>,
    /// Number of slots in use.
    n_slots: usize,
    lpp_shift: u32,
    /// Slots are assigned by pages (engine) or are the line addresses (traces).
    mode: SlotMode,
    node_base_line: Vec<u64>,
    /// `Some(s)` when node `i` starts at line `i << s` (nodes of one power-of-two size).
    node_shift: Option<u32>,
    /// The bytes of a directory row read as a little-endian word (`n_groups` <= 8).
    row_mask: u64,
    /// Each node's DRAM queue.
    queues: Vec<DramQueue>,
    counters: Counters,
    /// The CPU running the simulation has AVX-512 (F, VL): the hot paths use it.
    avx512: bool,
    /// Else it has AVX2: the hot paths use that.
    avx2: bool,
    /// The three-level shape whose hot path is fixed at compile time (see
    /// `Machine::shape_of`), or `Generic`.
    shape: paths::Shape,
    /// Set masks (sets - 1) of L1, L2, L3 on a fixed shape.
    mask3: [u64; 3],
}

/// What becomes of a line evicted from a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct VictimAction {
    /// The level is inclusive (and not L1): drop the line from the levels above.
    back_invalidate: bool,
    /// Where the line goes next.
    down: Down,
}

/// A level that drops its victims without touching the levels above.
const LAST_DROP: VictimAction = VictimAction {
    back_invalidate: false,
    down: Down::Drop,
};

/// Destination of an evicted line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Down {
    /// Out of the hierarchy (no victim-filled level below).
    Drop,
    /// Into the victim-filled level below, where it cannot already be.
    Sole,
    /// Into the victim-filled level below, where another copy may already be.
    Shared,
}

/// How slots are assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotMode {
    /// Not yet: neither pages nor a trace.
    Unset,
    /// Page by page, as the engine allocates frames.
    Pages,
    /// A slot is its line address (raw traces).
    Trace,
}

/// Unchecked slice access for the hot paths (indices come from tables built and validated
/// in [`Machine::new`]; checked in debug builds).
trait At<T> {
    fn at(&self, i: usize) -> &T;
    fn at_mut(&mut self, i: usize) -> &mut T;
}

impl<T> At<T> for [T] {
    #[inline(always)]
    fn at(&self, i: usize) -> &T {
        debug_assert!(i < self.len());
        // SAFETY: callers index with values derived from the machine's own tables.
        unsafe { self.get_unchecked(i) }
    }
    #[inline(always)]
    fn at_mut(&mut self, i: usize) -> &mut T {
        debug_assert!(i < self.len());
        // SAFETY: as in `at`.
        unsafe { self.get_unchecked_mut(i) }
    }
}

impl Machine {
    /// The configuration this machine was built from.
    pub fn config(&self) -> &MachineConfig {
        &self.cfg
    }

    /// Index of `src` in [`Counters::served`].
    pub fn source_index(&self, src: Source) -> usize {
        let n = self.cfg.levels.len();
        match src {
            Source::Level(i) => i,
            Source::SameGroup => n,
            Source::CrossGroup => n + 1,
            Source::DramLocal => n + 2,
            Source::DramRemote => n + 3,
        }
    }

    /// Counters accumulated since the last [`Machine::reset_counters`].
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Zero the counters (cache contents stay: use after a warm-up).
    pub fn reset_counters(&mut self) {
        self.counters.served.iter_mut().for_each(|x| *x = 0);
        self.counters.dram_lines.iter_mut().for_each(|x| *x = 0);
        self.counters.dram_queue_cycles = 0.0;
    }

    /// Empty every cache and the directory, and idle the DRAM queues.
    pub fn flush(&mut self) {
        self.caches.iter_mut().for_each(Cache::clear);
        self.dir.iter_mut().for_each(|d| *d = 0);
        self.queues.iter_mut().for_each(DramQueue::clear);
    }

    /// Valid lines held by instance `inst` of level `level`.
    pub fn occupancy(&self, level: usize, inst: usize) -> usize {
        self.caches[self.level_base[level] + inst].occupancy()
    }

    /// Prefetch the sets `cpu` will look at for line `phys` (a hint for the host CPU).
    #[inline(always)]
    pub fn prefetch(&self, cpu: usize, phys: u64) {
        let n = self.n_levels;
        for &c in &self.hier[cpu * n..cpu * n + n] {
            self.caches[c as usize].prefetch(phys);
        }
    }
}
