//! The cache hierarchy of a whole machine: per-CPU private levels, shared levels per group,
//! inclusion, cross-cache transfers through a presence directory, and NUMA DRAM queues.
//!
//! Every line has a dense *slot* id besides its physical address: caches store slots,
//! and the directory is a plain array indexed by slot that counts, per LLC group, how many
//! cache instances of that group hold the line. The counts are exact, so a miss knows at
//! once whether a group-mate or another chip can supply the line, without probing.
//! The engine assigns slots page by page as it allocates frames; a raw trace uses the
//! line address itself as the slot.

#[cfg(target_arch = "x86_64")]
use crate::cache::{
    has_avx2, has_avx512, set_insert, set_insert_absent, set_touch, set_touch_or_take, Cache,
    Inserted, Isa, Scalar, EMPTY,
};
#[cfg(target_arch = "x86_64")]
use crate::cache::{Avx2, Avx512};
use crate::config::{Inclusion, MachineConfig};
use crate::dram::DramQueue;
use crate::error::{Result, SimError};

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
    /// `below[c]`: index in `caches` of the instance under cache `c` (unused for the last level).
    below: Vec<u32>,
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
    /// Each node's DRAM queue.
    queues: Vec<DramQueue>,
    counters: Counters,
    /// The CPU running the simulation has AVX-512 (F, VL): the hot paths use it.
    avx512: bool,
    /// Else it has AVX2: the hot paths use that.
    avx2: bool,
    /// A three-level shape with a specialised copy of the hot path (see
    /// [`Machine::shape3_of`]), or `Generic`.
    shape3: Shape3,
    /// Set masks (sets - 1) of L1, L2, L3 on the specialised paths.
    mask3: [u64; 3],
}

/// The three-level shapes with a specialised copy of the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape3 {
    /// Neither: the generic path.
    Generic,
    /// L1 -> private exclusive L2 -> shared victim L3 (the opteron-16 model).
    Amd,
    /// Three non-inclusive levels filled on every miss (the pycachesim comparison).
    Nine,
}

/// One CPU's caches on the specialised path: tag arrays of its L1, L2 and L3 instances
/// and its group. Built from the machine's tables (`Machine::cpu3`) and used while the
/// machine is borrowed; the tag arrays never reallocate.
#[derive(Debug, Clone, Copy)]
struct Cpu3 {
    tags: [*mut u32; 3],
    group: usize,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotMode {
    Unset,
    Pages,
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

/// The largest slot id (the cache's empty marker is `u32::MAX`).
pub const MAX_SLOT: u64 = (u32::MAX - 1) as u64;

impl Machine {
    /// Build an empty (cold) machine from a validated configuration.
    pub fn new(cfg: MachineConfig) -> Result<Self> {
        cfg.validate()?;
        let n = cfg.levels.len();
        let ncpu = cfg.n_cpus();
        let n_inst: Vec<usize> = cfg
            .levels
            .iter()
            .map(|l| l.instance_of.iter().copied().max().unwrap_or(0) as usize + 1)
            .collect();
        let mut caches = Vec::new();
        let mut level_base = Vec::new();
        for (l, &k) in cfg.levels.iter().zip(&n_inst) {
            level_base.push(caches.len());
            caches.extend((0..k).map(|_| Cache::new(l.sets, l.ways)));
        }
        let mut hier = Vec::with_capacity(ncpu * n);
        for c in 0..ncpu {
            for (i, l) in cfg.levels.iter().enumerate() {
                hier.push((level_base[i] + l.instance_of[c] as usize) as u32);
            }
        }
        let mut parent = vec![Vec::new(); n];
        let mut covered: Vec<Vec<Vec<(usize, u32)>>> =
            n_inst.iter().map(|&k| vec![Vec::new(); k]).collect();
        for j in 0..n {
            if j + 1 < n {
                parent[j] = vec![0; n_inst[j]];
                for c in 0..ncpu {
                    parent[j][cfg.levels[j].instance_of[c] as usize] =
                        cfg.levels[j + 1].instance_of[c];
                }
            }
            for c in 0..ncpu {
                let inst = cfg.levels[j].instance_of[c] as usize;
                for k in 0..j {
                    let up = (k, cfg.levels[k].instance_of[c]);
                    if !covered[j][inst].contains(&up) {
                        covered[j][inst].push(up);
                    }
                }
            }
        }
        let mut sole_victim_target = vec![false; n];
        for l in 1..n {
            let mut children = vec![Vec::<u32>::new(); n_inst[l]];
            for c in 0..ncpu {
                let above = cfg.levels[l - 1].instance_of[c];
                let list = &mut children[cfg.levels[l].instance_of[c] as usize];
                if !list.contains(&above) {
                    list.push(above);
                }
            }
            sole_victim_target[l] =
                cfg.levels[l].inclusion.victim_filled() && children.iter().all(|ch| ch.len() == 1);
        }
        let mut below = vec![u32::MAX; caches.len()];
        let mut covered_c = vec![Vec::new(); caches.len()];
        for j in 0..n {
            for (k, up) in covered[j].iter().enumerate() {
                covered_c[level_base[j] + k] = up
                    .iter()
                    .map(|&(l, i)| (level_base[l] + i as usize) as u32)
                    .collect();
            }
            if j + 1 < n {
                for (k, &p) in parent[j].iter().enumerate() {
                    below[level_base[j] + k] = (level_base[j + 1] + p as usize) as u32;
                }
            }
        }
        let fill_levels: Vec<usize> = (0..n)
            .rev()
            .filter(|&j| j == 0 || !cfg.levels[j].inclusion.victim_filled())
            .collect();
        let victim_action: Vec<VictimAction> = (0..n)
            .map(|j| VictimAction {
                back_invalidate: j > 0 && cfg.levels[j].inclusion == Inclusion::Inclusive,
                down: if j + 1 < n && cfg.levels[j + 1].inclusion.victim_filled() {
                    if sole_victim_target[j + 1] {
                        Down::Sole
                    } else {
                        Down::Shared
                    }
                } else {
                    Down::Drop
                },
            })
            .collect();
        let group_of: Vec<u32> = cfg.levels[n - 1].instance_of.clone();
        let n_groups = n_inst[n - 1];
        let line = cfg.line_size as u64;
        let mut node_base_line = Vec::with_capacity(cfg.nodes.len());
        let mut base = 0u64;
        for nd in &cfg.nodes {
            node_base_line.push(base / line);
            base += nd.memory_bytes;
        }
        let queues = cfg
            .nodes
            .iter()
            .map(|nd| DramQueue::new(nd.service_line_cycles))
            .collect();
        let counters = Counters {
            served: vec![0; n + 4],
            dram_lines: vec![0; cfg.nodes.len()],
            dram_queue_cycles: 0.0,
        };
        Ok(Machine {
            queues,
            caches,
            level_base,
            hier,
            hit_cycles: cfg.levels.iter().map(|l| l.hit_cycles).collect(),
            n_levels: n,
            inst: cfg.levels.iter().map(|l| l.instance_of.clone()).collect(),
            victim_filled: cfg
                .levels
                .iter()
                .map(|l| l.inclusion.victim_filled())
                .collect(),
            below,
            covered_c,
            victim_action,
            fill_levels,
            group_of,
            n_groups,
            dir: Vec::new(),
            frame_of_page: Vec::new(),
            n_slots: 0,
            lpp_shift: (cfg.page_size / cfg.line_size).trailing_zeros(),
            mode: SlotMode::Unset,
            node_base_line,
            counters,
            avx512: has_avx512(),
            avx2: has_avx2(),
            shape3: Shape3::Generic,
            mask3: [0; 3],
            cfg,
        })
        .map(|mut m| {
            m.shape3 = m.shape3_of();
            if m.shape3 != Shape3::Generic {
                m.mask3 = [0, 1, 2].map(|i| m.mask3_of(i));
            }
            m
        })
    }

    /// The configuration this machine was built from.
    pub fn config(&self) -> &MachineConfig {
        &self.cfg
    }

    /// Whether the hot paths use AVX-512 (chosen at construction from the running CPU).
    pub fn uses_avx512(&self) -> bool {
        self.avx512
    }

    /// Use the portable set operations even on an AVX-512 CPU (both give the same results;
    /// for tests and speed comparisons).
    pub fn force_portable(&mut self) {
        self.avx512 = false;
        self.avx2 = false;
    }

    /// Choose the hot paths: vector set operations (AVX-512, else AVX2, if the CPU has
    /// them) and the copy specialised for the opteron-16 shape (if the hierarchy has it).
    /// Every choice gives the same results; for tests and speed comparisons.
    pub fn use_paths(&mut self, vector: bool, specialised: bool) {
        self.avx512 = vector && has_avx512();
        self.avx2 = vector && has_avx2();
        self.shape3 = if specialised {
            self.shape3_of()
        } else {
            Shape3::Generic
        };
        if self.shape3 != Shape3::Generic {
            self.mask3 = [0, 1, 2].map(|i| self.mask3_of(i));
        }
    }

    /// Use AVX2 (if the CPU has it) rather than AVX-512 set operations, as on a CPU without
    /// AVX-512; for tests and speed comparisons.
    pub fn use_avx2_only(&mut self) {
        self.avx512 = false;
        self.avx2 = has_avx2();
    }

    /// Whether the copy of the hot path specialised for the opteron-16 shape is in use.
    pub fn uses_specialised_path(&self) -> bool {
        self.shape3 != Shape3::Generic
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

    /// Give the lines of physical page `frame` slots; returns the first one.
    pub fn register_page(&mut self, frame: u64) -> Result<u32> {
        if self.mode == SlotMode::Trace {
            return Err(SimError::Config(
                "this machine already ran a raw trace".into(),
            ));
        }
        self.mode = SlotMode::Pages;
        let lpp = 1u64 << self.lpp_shift;
        let first = self.n_slots as u64;
        if first + lpp > MAX_SLOT {
            return Err(SimError::Config("too many pages for 32-bit slots".into()));
        }
        self.frame_of_page.push(frame);
        self.n_slots += lpp as usize;
        self.dir.resize(self.n_slots * self.n_groups, 0);
        Ok(first as u32)
    }

    /// Prepare raw-trace use: line addresses below `max_line` become their own slots.
    pub fn prepare_trace(&mut self, max_line: u64) -> Result<()> {
        if self.mode == SlotMode::Pages {
            return Err(SimError::Config(
                "this machine already holds engine pages".into(),
            ));
        }
        if max_line > MAX_SLOT {
            return Err(SimError::Config(format!(
                "trace line {max_line} is beyond 32-bit slots"
            )));
        }
        self.mode = SlotMode::Trace;
        let need = max_line as usize + 1;
        if self.n_slots < need {
            self.n_slots = need;
            self.dir.resize(need * self.n_groups, 0);
        }
        Ok(())
    }

    /// Physical line of a slot.
    #[inline(always)]
    fn phys_of(&self, slot: u32) -> u64 {
        if self.mode == SlotMode::Trace {
            return slot as u64;
        }
        let page = (slot >> self.lpp_shift) as usize;
        let mask = (1u64 << self.lpp_shift) - 1;
        (*self.frame_of_page.at(page) << self.lpp_shift) | (slot as u64 & mask)
    }

    /// [`Machine::phys_of`], known to be the identity when `TRACE` (raw-trace mode).
    #[inline(always)]
    fn phys_of_m<const TRACE: bool>(&self, slot: u32) -> u64 {
        debug_assert!(!TRACE || self.mode == SlotMode::Trace);
        if TRACE {
            slot as u64
        } else {
            self.phys_of(slot)
        }
    }

    /// NUMA node holding physical line `line`.
    #[inline]
    pub fn node_of_line(&self, line: u64) -> usize {
        let mut node = 0;
        for (i, &b) in self.node_base_line.iter().enumerate() {
            if line >= b {
                node = i;
            }
        }
        node
    }

    /// Check the directory against the caches: for every slot and group, the count must
    /// equal the number of that group's instances holding the line. Returns the first
    /// mismatch as (slot, group, counted, actual). For tests; O(slots x instances).
    pub fn check_directory(&self) -> Option<(u32, usize, u8, u8)> {
        for slot in 0..self.n_slots as u32 {
            let phys = self.phys_of(slot);
            let mut actual = vec![0u8; self.n_groups];
            for j in 0..self.n_levels {
                let count = self
                    .level_base
                    .get(j + 1)
                    .copied()
                    .unwrap_or(self.caches.len())
                    - self.level_base[j];
                for k in 0..count {
                    if self.caches[self.level_base[j] + k].contains(phys, slot) {
                        let cpu = self.inst[j]
                            .iter()
                            .position(|&x| x as usize == k)
                            .unwrap_or(0);
                        actual[self.group_of[cpu] as usize] += 1;
                    }
                }
            }
            for (g, &a) in actual.iter().enumerate() {
                let c = self.dir[slot as usize * self.n_groups + g];
                if c != a {
                    return Some((slot, g, c, a));
                }
            }
        }
        None
    }

    /// Prefetch the sets `cpu` will look at for line `phys` (a hint for the host CPU).
    #[inline(always)]
    pub fn prefetch(&self, cpu: usize, phys: u64) {
        let n = self.n_levels;
        for &c in &self.hier[cpu * n..cpu * n + n] {
            self.caches[c as usize].prefetch(phys);
        }
    }

    #[inline(always)]
    fn inc(&mut self, slot: u32, g: usize) {
        let k = slot as usize * self.n_groups + g;
        let d = self.dir.at_mut(k);
        *d = d.wrapping_add(1);
    }

    #[inline(always)]
    fn dec(&mut self, slot: u32, g: usize) {
        let k = slot as usize * self.n_groups + g;
        let d = self.dir.at_mut(k);
        *d = d.wrapping_sub(1);
    }

    /// Access the line `phys` (slot `slot`) from `cpu` at thread time `now`;
    /// returns where it was served from and the stall cycles.
    #[inline]
    pub fn access(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is set only when the CPU has AVX-512 F and VL.
            return unsafe { self.access_avx512(cpu, phys, slot, kind, now) };
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is set only when the CPU has AVX2.
            return unsafe { self.access_avx2(cpu, phys, slot, kind, now) };
        }
        self.access_i::<Scalar>(cpu, phys, slot, kind, now)
    }

    /// Feed line accesses in order: `(cpus[k], lines[k])`, or every line from `cpu` when
    /// `cpus` is empty; each line is its own slot (raw traces). Time does not advance.
    pub fn run_lines(&mut self, cpu: usize, cpus: &[u32], lines: &[u64], kind: AccessKind) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is set only when the CPU has AVX-512 F and VL.
            unsafe { self.run_lines_avx512(cpu, cpus, lines, kind) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is set only when the CPU has AVX2.
            unsafe { self.run_lines_avx2(cpu, cpus, lines, kind) };
            return;
        }
        self.run_lines_i::<Scalar>(cpu, cpus, lines, kind);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_lines_avx2(&mut self, cpu: usize, cpus: &[u32], lines: &[u64], kind: AccessKind) {
        self.run_lines_i::<Avx2>(cpu, cpus, lines, kind);
    }

    /// Raw-trace run on a specialised path (`NINE`: [`Shape3::Nine`], else
    /// [`Shape3::Amd`]).
    #[inline(always)]
    fn run_lines3<I: Isa, const NINE: bool>(
        &mut self,
        cpu: usize,
        cpus: &[u32],
        lines: &[u64],
        kind: AccessKind,
    ) {
        if cpus.is_empty() {
            let c = self.cpu3(cpu);
            for &l in lines {
                self.access_s::<I, true, NINE>(c, cpu, l, l as u32, kind, 0.0);
            }
        } else {
            let table: Vec<Cpu3> = (0..self.cfg.n_cpus()).map(|c| self.cpu3(c)).collect();
            for (&c, &l) in cpus.iter().zip(lines) {
                let cpu = c as usize;
                self.access_s::<I, true, NINE>(*table.at(cpu), cpu, l, l as u32, kind, 0.0);
            }
        }
    }

    /// One access on a specialised path.
    #[inline(always)]
    fn access_s<I: Isa, const TRACE: bool, const NINE: bool>(
        &mut self,
        c: Cpu3,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        if NINE {
            self.access9::<I, TRACE>(c, cpu, phys, slot, kind, now)
        } else {
            self.access3::<I, TRACE>(c, cpu, phys, slot, kind, now)
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn access_avx2(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        self.access_i::<Avx2>(cpu, phys, slot, kind, now)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn run_lines_avx512(
        &mut self,
        cpu: usize,
        cpus: &[u32],
        lines: &[u64],
        kind: AccessKind,
    ) {
        self.run_lines_i::<Avx512>(cpu, cpus, lines, kind);
    }

    #[inline(always)]
    fn run_lines_i<I: Isa>(&mut self, cpu: usize, cpus: &[u32], lines: &[u64], kind: AccessKind) {
        if self.mode == SlotMode::Trace {
            // raw trace: a slot is its line address
            match self.shape3 {
                Shape3::Amd => return self.run_lines3::<I, false>(cpu, cpus, lines, kind),
                Shape3::Nine => return self.run_lines3::<I, true>(cpu, cpus, lines, kind),
                Shape3::Generic => {}
            }
        }
        if cpus.is_empty() {
            for &l in lines {
                self.access_i::<I>(cpu, l, l as u32, kind, 0.0);
            }
        } else {
            for (&c, &l) in cpus.iter().zip(lines) {
                self.access_i::<I>(c as usize, l, l as u32, kind, 0.0);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn access_avx512(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        self.access_i::<Avx512>(cpu, phys, slot, kind, now)
    }

    /// Which specialised copy of the hot path serves this hierarchy. Both need three
    /// levels of 8, 16 and 32 ways with power-of-two sets:
    ///
    /// * [`Shape3::Amd`]: L1 (filled on misses) -> private exclusive L2 (each L2 under one
    ///   L1) -> shared victim L3 that drops its victims: the opteron-16 model;
    /// * [`Shape3::Nine`]: three non-inclusive levels, all filled on misses, none
    ///   back-invalidating or passing victims down (pycachesim's semantics).
    ///
    /// [`Machine::access3`] and [`Machine::access9`] are the generic path with these tables
    /// resolved at compile time.
    fn shape3_of(&self) -> Shape3 {
        let ways: Vec<u32> = self.cfg.levels.iter().map(|l| l.ways).collect();
        if self.n_levels != 3
            || ways != [8, 16, 32]
            || !(0..self.cfg.n_cpus()).all(|cpu| {
                let h = &self.hier[cpu * 3..cpu * 3 + 3];
                (0..3).all(|i| self.caches[h[i] as usize].pow2_mask() == Some(self.mask3_of(i)))
            })
        {
            return Shape3::Generic;
        }
        let amd = self.victim_filled == [false, true, true]
            && self.fill_levels == [0]
            && self.victim_action[0]
                == VictimAction {
                    back_invalidate: false,
                    down: Down::Sole,
                }
            && self.victim_action[1]
                == VictimAction {
                    back_invalidate: false,
                    down: Down::Shared,
                }
            && self.victim_action[2] == LAST_DROP
            && (0..self.cfg.n_cpus()).all(|cpu| {
                let h = &self.hier[cpu * 3..cpu * 3 + 3];
                self.below[h[0] as usize] == h[1] && self.below[h[1] as usize] == h[2]
            });
        let nine = self.victim_filled == [false, false, false]
            && self.fill_levels == [2, 1, 0]
            && self.victim_action == [LAST_DROP; 3];
        if amd {
            Shape3::Amd
        } else if nine {
            Shape3::Nine
        } else {
            Shape3::Generic
        }
    }

    /// Set mask of level `i` (sets - 1).
    fn mask3_of(&self, i: usize) -> u64 {
        self.cfg.levels[i].sets as u64 - 1
    }

    /// The caches of `cpu` on the specialised path.
    #[inline(always)]
    fn cpu3(&mut self, cpu: usize) -> Cpu3 {
        let h = cpu * 3;
        let mut tags = [std::ptr::null_mut(); 3];
        for (i, t) in tags.iter_mut().enumerate() {
            let c = *self.hier.at(h + i) as usize;
            *t = self.caches.at_mut(c).tags_ptr();
        }
        Cpu3 {
            tags,
            group: *self.group_of.at(cpu) as usize,
        }
    }

    /// The `W` ways of the set of `phys` in the tag array `tags` (set mask `m`).
    ///
    /// # Safety
    ///
    /// `tags` comes from [`Machine::cpu3`] of this machine (a live cache of power-of-two
    /// sets, `W` ways, mask `m` = sets - 1; tag arrays never move), and the set returned is
    /// the only reference to it while it is used.
    #[inline(always)]
    unsafe fn set3<'a, const W: usize>(tags: *mut u32, phys: u64, m: u64) -> &'a mut [u32] {
        // SAFETY: set index < sets, so the W tags lie inside the array (caller's contract).
        unsafe { std::slice::from_raw_parts_mut(tags.add((phys & m) as usize * W), W) }
    }

    /// Directory count of `slot` in group `g`, through a pointer read once per access.
    #[inline(always)]
    fn dir_at(dir: *mut u8, n_groups: usize, slot: u32, g: usize) -> *mut u8 {
        // SAFETY: slots index the directory (sized n_slots x n_groups in register_page /
        // prepare_trace); callers pass `self.dir`'s pointer, unchanged during an access.
        unsafe { dir.add(slot as usize * n_groups + g) }
    }

    /// [`Machine::access_i`] for [`Shape3::Amd`]: the same operations in
    /// the same order, with the level tables, associativities and set masks known. `c`
    /// holds `cpu`'s caches.
    #[inline(always)]
    fn access3<I: Isa, const TRACE: bool>(
        &mut self,
        c: Cpu3,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        const W1: usize = 8;
        const W2: usize = 16;
        const W3: usize = 32;
        let [m1, m2, m3] = self.mask3;
        let g = c.group;
        let dir = self.dir.as_mut_ptr();
        let ng = self.n_groups;
        debug_assert!((slot as usize + 1) * ng <= self.dir.len());
        // SAFETY (every `dir_at` dereference): see `dir_at`. (every `set3`): `c` is this
        // machine's, and each set is used before the next is made.
        if unsafe { *Self::dir_at(dir, ng, slot, g) } != 0 {
            let set1 = unsafe { Self::set3::<W1>(c.tags[0], phys, m1) };
            if kind == AccessKind::NonTemporal {
                if I::find(set1, slot).is_some() {
                    return self.count(Source::Level(0), *self.hit_cycles.at(0));
                }
                let set2 = unsafe { Self::set3::<W2>(c.tags[1], phys, m2) };
                if I::find(set2, slot).is_some() {
                    return self.count(Source::Level(1), *self.hit_cycles.at(1));
                }
                let set3 = unsafe { Self::set3::<W3>(c.tags[2], phys, m3) };
                if I::find(set3, slot).is_some() {
                    return self.count(Source::Level(2), *self.hit_cycles.at(2));
                }
            } else {
                if set_touch::<I>(set1, slot) {
                    return self.count(Source::Level(0), *self.hit_cycles.at(0));
                }
                // exclusive L2, then victim L3: a hit takes the line out, into L1
                let set2 = unsafe { Self::set3::<W2>(c.tags[1], phys, m2) };
                let level = if set_touch_or_take::<I>(set2, slot, true) {
                    1
                } else {
                    let set3 = unsafe { Self::set3::<W3>(c.tags[2], phys, m3) };
                    if set_touch_or_take::<I>(set3, slot, true) {
                        2
                    } else {
                        0
                    }
                };
                if level > 0 {
                    unsafe {
                        let d = Self::dir_at(dir, ng, slot, g);
                        *d = (*d).wrapping_sub(1);
                    }
                    self.fill3::<I, TRACE>(&c, phys, slot);
                    return self.count(Source::Level(level), *self.hit_cycles.at(level));
                }
            }
        }
        let result = self.serve_miss(cpu, phys, slot, now);
        if kind != AccessKind::NonTemporal {
            self.fill3::<I, TRACE>(&c, phys, slot);
        }
        result
    }

    /// [`Machine::fill`] then [`Machine::evicted`] for [`Shape3::Amd`]:
    /// the line goes into L1; L1's victim moves into its (sole) L2; L2's victim into the
    /// shared L3, whose victim leaves the group.
    #[inline(always)]
    fn fill3<I: Isa, const TRACE: bool>(&mut self, c: &Cpu3, phys: u64, slot: u32) {
        const W1: usize = 8;
        const W2: usize = 16;
        const W3: usize = 32;
        let [m1, m2, m3] = self.mask3;
        let g = c.group;
        let dir = self.dir.as_mut_ptr();
        let ng = self.n_groups;
        // SAFETY (every `dir_at` dereference): see `dir_at`. (every `set3`): `c` is this
        // machine's, and each set is used before the next is made.
        let set1 = unsafe { Self::set3::<W1>(c.tags[0], phys, m1) };
        let v = match set_insert_absent::<I>(set1, slot) {
            Inserted::Present => return,
            Inserted::Fresh => {
                unsafe {
                    let d = Self::dir_at(dir, ng, slot, g);
                    *d = (*d).wrapping_add(1);
                }
                return;
            }
            Inserted::Evicted(v) => {
                unsafe {
                    let d = Self::dir_at(dir, ng, slot, g);
                    *d = (*d).wrapping_add(1);
                }
                v
            }
        };
        let vphys = self.phys_of_m::<TRACE>(v);
        let set2 = unsafe { Self::set3::<W2>(c.tags[1], vphys, m2) };
        let w = match set_insert_absent::<I>(set2, v) {
            Inserted::Present => {
                unsafe {
                    let d = Self::dir_at(dir, ng, v, g);
                    *d = (*d).wrapping_sub(1);
                }
                return;
            }
            Inserted::Fresh => return,
            Inserted::Evicted(w) => w,
        };
        let wphys = self.phys_of_m::<TRACE>(w);
        let set3 = unsafe { Self::set3::<W3>(c.tags[2], wphys, m3) };
        let gone = match set_insert::<I>(set3, w) {
            Inserted::Present => w,
            Inserted::Evicted(x) => x,
            Inserted::Fresh => return,
        };
        unsafe {
            let d = Self::dir_at(dir, ng, gone, g);
            *d = (*d).wrapping_sub(1);
        }
    }

    /// [`Machine::access_i`] for [`Shape3::Nine`]: the same operations in the same order,
    /// with the tables, associativities and set masks known. `c` holds `cpu`'s caches.
    #[inline(always)]
    fn access9<I: Isa, const TRACE: bool>(
        &mut self,
        c: Cpu3,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        const W1: usize = 8;
        const W2: usize = 16;
        const W3: usize = 32;
        let [m1, m2, m3] = self.mask3;
        let g = c.group;
        let dir = self.dir.as_mut_ptr();
        let ng = self.n_groups;
        debug_assert!((slot as usize + 1) * ng <= self.dir.len());
        // SAFETY (every `dir_at` dereference): see `dir_at`. (every `set3`): `c` is this
        // machine's, and each set is used before the next is made.
        if unsafe { *Self::dir_at(dir, ng, slot, g) } != 0 {
            let set1 = unsafe { Self::set3::<W1>(c.tags[0], phys, m1) };
            if kind == AccessKind::NonTemporal {
                if I::find(set1, slot).is_some() {
                    return self.count(Source::Level(0), *self.hit_cycles.at(0));
                }
                let set2 = unsafe { Self::set3::<W2>(c.tags[1], phys, m2) };
                if I::find(set2, slot).is_some() {
                    return self.count(Source::Level(1), *self.hit_cycles.at(1));
                }
                let set3 = unsafe { Self::set3::<W3>(c.tags[2], phys, m3) };
                if I::find(set3, slot).is_some() {
                    return self.count(Source::Level(2), *self.hit_cycles.at(2));
                }
            } else {
                if set_touch::<I>(set1, slot) {
                    return self.count(Source::Level(0), *self.hit_cycles.at(0));
                }
                // a hit stays where it is (most recently used) and fills the levels above
                let set2 = unsafe { Self::set3::<W2>(c.tags[1], phys, m2) };
                if set_touch::<I>(set2, slot) {
                    self.fill9::<I>(&c, phys, slot, 1);
                    return self.count(Source::Level(1), *self.hit_cycles.at(1));
                }
                let set3 = unsafe { Self::set3::<W3>(c.tags[2], phys, m3) };
                if set_touch::<I>(set3, slot) {
                    self.fill9::<I>(&c, phys, slot, 2);
                    return self.count(Source::Level(2), *self.hit_cycles.at(2));
                }
            }
        }
        let result = self.serve_miss(cpu, phys, slot, now);
        if kind != AccessKind::NonTemporal {
            self.fill9::<I>(&c, phys, slot, 3);
        }
        result
    }

    /// [`Machine::fill`] for [`Shape3::Nine`]: insert the line into the levels above
    /// `upto`, lowest first; every victim leaves the group.
    #[inline(always)]
    fn fill9<I: Isa>(&mut self, c: &Cpu3, phys: u64, slot: u32, upto: usize) {
        const W1: usize = 8;
        const W2: usize = 16;
        const W3: usize = 32;
        let [m1, m2, m3] = self.mask3;
        let g = c.group;
        let dir = self.dir.as_mut_ptr();
        let ng = self.n_groups;
        for j in (0..upto).rev() {
            // SAFETY: as in `access9`.
            let set = unsafe {
                match j {
                    2 => Self::set3::<W3>(c.tags[2], phys, m3),
                    1 => Self::set3::<W2>(c.tags[1], phys, m2),
                    _ => Self::set3::<W1>(c.tags[0], phys, m1),
                }
            };
            let placed = set_insert_absent::<I>(set, slot);
            // SAFETY: see `dir_at`.
            unsafe {
                if placed != Inserted::Present {
                    let d = Self::dir_at(dir, ng, slot, g);
                    *d = (*d).wrapping_add(1);
                }
                if let Inserted::Evicted(v) = placed {
                    let d = Self::dir_at(dir, ng, v, g);
                    *d = (*d).wrapping_sub(1);
                }
            }
        }
    }

    #[inline(always)]
    fn access_i<I: Isa>(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        match self.shape3 {
            Shape3::Amd => {
                let c = self.cpu3(cpu);
                return self.access3::<I, false>(c, cpu, phys, slot, kind, now);
            }
            Shape3::Nine => {
                let c = self.cpu3(cpu);
                return self.access9::<I, false>(c, cpu, phys, slot, kind, now);
            }
            Shape3::Generic => {}
        }
        let n = self.n_levels;
        let h = cpu * n;
        // The directory counts the copies in the cpu's group, its own levels included: with
        // none, every lookup would miss (and a miss changes nothing), so skip them.
        let g = (*self.group_of.at(cpu)) as usize;
        if *self.dir.at(slot as usize * self.n_groups + g) == 0 {
            return self.miss::<I>(cpu, phys, slot, now, kind != AccessKind::NonTemporal);
        }
        if kind == AccessKind::NonTemporal {
            for i in 0..n {
                if self
                    .caches
                    .at(*self.hier.at(h + i) as usize)
                    .contains_i::<I, 0>(phys, slot)
                {
                    return self.count(Source::Level(i), *self.hit_cycles.at(i));
                }
            }
            return self.miss::<I>(cpu, phys, slot, now, false);
        }
        if self
            .caches
            .at_mut(*self.hier.at(h) as usize)
            .touch_i::<I, 0>(phys, slot)
        {
            return self.count(Source::Level(0), *self.hit_cycles.at(0));
        }
        for i in 1..n {
            let c = *self.hier.at(h + i) as usize;
            let take = *self.victim_filled.at(i);
            if self
                .caches
                .at_mut(c)
                .touch_or_take_i::<I, 0>(phys, slot, take)
            {
                if take {
                    self.dec(slot, g);
                }
                self.fill::<I>(cpu, phys, slot, i);
                return self.count(Source::Level(i), *self.hit_cycles.at(i));
            }
        }
        self.miss::<I>(cpu, phys, slot, now, true)
    }

    #[inline(always)]
    fn count(&mut self, src: Source, cycles: f64) -> (Source, f64) {
        let k = self.source_index(src);
        *self.counters.served.at_mut(k) += 1;
        (src, cycles)
    }

    /// The line is in none of `cpu`'s own levels: a group-mate, another group, or DRAM.
    #[inline(always)]
    fn miss<I: Isa>(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        now: f64,
        allocate: bool,
    ) -> (Source, f64) {
        let result = self.serve_miss(cpu, phys, slot, now);
        if allocate {
            self.fill::<I>(cpu, phys, slot, self.n_levels);
        }
        result
    }

    /// Where a line in none of `cpu`'s own levels comes from, counted.
    #[inline(always)]
    fn serve_miss(&mut self, cpu: usize, phys: u64, slot: u32, now: f64) -> (Source, f64) {
        let own = *self.group_of.at(cpu) as usize;
        let base = slot as usize * self.n_groups;
        debug_assert!(base + self.n_groups <= self.dir.len());
        // SAFETY: slots index the directory (sized n_slots x n_groups in register_page /
        // prepare_trace).
        let counts = unsafe { self.dir.get_unchecked(base..base + self.n_groups) };
        let same = counts[own] > 0;
        let elsewhere = !same && counts.iter().any(|&c| c > 0);
        // the simulator's lines are never dirty: without clean forwarding, DRAM serves them
        let result = if same || (elsewhere && !self.cfg.cross_group_clean_from_dram) {
            // selects rather than branches: which cache serves is data-dependent
            let n = self.n_levels;
            let (src, k, cycles) = if same {
                (Source::SameGroup, n, self.cfg.same_group_c2c_cycles)
            } else {
                (Source::CrossGroup, n + 1, self.cfg.cross_group_c2c_cycles)
            };
            *self.counters.served.at_mut(k) += 1;
            (src, cycles)
        } else {
            self.dram(cpu, phys, now)
        };
        result
    }

    /// Serve a line from DRAM through the node's queue ([`DramQueue`]).
    #[inline]
    fn dram(&mut self, cpu: usize, phys: u64, now: f64) -> (Source, f64) {
        let node = self.node_of_line(phys);
        let local = self.cfg.cpu_node[cpu] as usize == node;
        let wait = self.queues[node].request(now);
        self.counters.dram_queue_cycles += wait;
        self.counters.dram_lines[node] += 1;
        let nd = &self.cfg.nodes[node];
        if local {
            let c = nd.local_line_cycles;
            self.count(Source::DramLocal, wait + c)
        } else {
            let c = nd.remote_line_cycles;
            self.count(Source::DramRemote, wait + c)
        }
    }

    /// Install the line in `cpu`'s levels above `upto` that are filled on misses (L1
    /// always). The line is known to be absent from all of them.
    #[inline(always)]
    fn fill<I: Isa>(&mut self, cpu: usize, phys: u64, slot: u32, upto: usize) {
        let g = (*self.group_of.at(cpu)) as usize;
        let h = cpu * self.n_levels;
        for k in 0..self.fill_levels.len() {
            let j = *self.fill_levels.at(k);
            if j >= upto {
                continue;
            }
            let c = *self.hier.at(h + j);
            match self
                .caches
                .at_mut(c as usize)
                .insert_absent_i::<I, 0>(phys, slot)
            {
                Inserted::Present => {}
                Inserted::Fresh => self.inc(slot, g),
                Inserted::Evicted(v) => {
                    self.inc(slot, g);
                    self.evicted::<I>(j, c, v, g);
                }
            }
        }
    }

    /// Line `v` was pushed out of (level j, cache index c) in group g: back-invalidate above
    /// an inclusive level, then move it into a victim-filled level below or drop it.
    #[inline(always)]
    fn evicted<I: Isa>(&mut self, mut j: usize, mut c: u32, mut v: u32, g: usize) {
        loop {
            let vphys = self.phys_of(v);
            let action = *self.victim_action.at(j);
            if action.back_invalidate {
                for idx in 0..(*self.covered_c.at(c as usize)).len() {
                    let up = (*self.covered_c.at(c as usize))[idx];
                    if self.caches.at_mut(up as usize).remove_i::<I, 0>(vphys, v) {
                        self.dec(v, g);
                    }
                }
            }
            let placed = match action.down {
                Down::Drop => {
                    self.dec(v, g);
                    return;
                }
                Down::Sole => self.caches[*self.below.at(c as usize) as usize]
                    .insert_absent_i::<I, 0>(vphys, v),
                Down::Shared => {
                    let below = *self.below.at(c as usize) as usize;
                    let placed = self.caches.at_mut(below).insert_i::<I, 0>(vphys, v);
                    if *self.victim_action.at(j + 1) == LAST_DROP {
                        // the level below drops its victims: one copy fewer either way
                        // (the arriving copy if already there, else the evicted line)
                        let gone = match placed {
                            Inserted::Present => v,
                            Inserted::Evicted(x) => x,
                            Inserted::Fresh => EMPTY,
                        };
                        if gone != EMPTY {
                            self.dec(gone, g);
                        }
                        return;
                    }
                    placed
                }
            };
            match placed {
                // another copy was already there: one copy fewer in the group
                Inserted::Present => {
                    self.dec(v, g);
                    return;
                }
                // moved down: same number of copies
                Inserted::Fresh => return,
                Inserted::Evicted(w) => {
                    c = *self.below.at(c as usize);
                    j += 1;
                    v = w;
                }
            }
        }
    }
}
