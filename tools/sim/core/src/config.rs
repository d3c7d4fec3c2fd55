//! Machine configuration: cache levels, their instances per CPU, NUMA nodes and costs.
//!
//! The Python side builds this from a `unicache.topology.Topology`; the core never reads
//! a model file itself.

use crate::error::{Result, SimError};

/// How a cache level relates to the levels above it (closer to the core).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inclusion {
    /// Filled on every miss below it; evicting a line back-invalidates the levels above.
    Inclusive,
    /// Filled only with lines evicted from the level above; a hit moves the line up.
    Exclusive,
    /// Victim cache: like `Exclusive` (AMD's L3 is "mostly exclusive"; modelled exclusive).
    Victim,
    /// Non-inclusive non-exclusive: filled on misses, no back-invalidation.
    NonInclusive,
}

impl Inclusion {
    /// Parse the topology's spelling ("inclusive", "exclusive", "victim", "unknown"/"nine").
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "inclusive" => Ok(Inclusion::Inclusive),
            "exclusive" => Ok(Inclusion::Exclusive),
            "victim" => Ok(Inclusion::Victim),
            "unknown" | "nine" | "non-inclusive" => Ok(Inclusion::NonInclusive),
            other => Err(SimError::Config(format!("unknown inclusion {other:?}"))),
        }
    }

    /// True when the level is filled only from victims of the level above.
    pub fn victim_filled(self) -> bool {
        matches!(self, Inclusion::Exclusive | Inclusion::Victim)
    }
}

/// One cache level (all its instances have the same geometry).
#[derive(Debug, Clone)]
pub struct LevelConfig {
    /// Display name ("L1", "L2", ...).
    pub name: String,
    /// Number of sets of one instance.
    pub sets: u32,
    /// Associativity.
    pub ways: u32,
    /// Inclusion with respect to the levels above.
    pub inclusion: Inclusion,
    /// Stall cycles charged to a thread per line served by this level.
    pub hit_cycles: f64,
    /// `instance_of[cpu]`: which instance of this level serves `cpu`.
    pub instance_of: Vec<u32>,
}

/// One NUMA node's memory.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Bytes of physical memory.
    pub memory_bytes: u64,
    /// Stall cycles per line for a thread on this node reading local memory (no queueing).
    pub local_line_cycles: f64,
    /// Stall cycles per line for a thread on another node reading this node's memory.
    pub remote_line_cycles: f64,
    /// Cycles the node's DRAM is busy per line (line size / node bandwidth): the queue server.
    pub service_line_cycles: f64,
}

/// The whole machine.
#[derive(Debug, Clone)]
pub struct MachineConfig {
    /// Line size in bytes (power of two).
    pub line_size: u32,
    /// Page size in bytes (power of two, multiple of the line size).
    pub page_size: u32,
    /// Cache levels, L1 first.
    pub levels: Vec<LevelConfig>,
    /// NUMA node of each CPU.
    pub cpu_node: Vec<u32>,
    /// NUMA nodes.
    pub nodes: Vec<NodeConfig>,
    /// Stall cycles per line served by another core's cache in the same LLC group.
    pub same_group_c2c_cycles: f64,
    /// Stall cycles per line served by a cache of another LLC group (cross-chip).
    pub cross_group_c2c_cycles: f64,
    /// A clean line found only in another LLC group's caches is read from DRAM (through
    /// the home node's queue) instead of that cache: MOESI/MESI without a forwarding
    /// state, where only a dirty owner supplies data (the AMD Opteron of the MFC paper).
    pub cross_group_clean_from_dram: bool,
    /// Cycles a thread migration costs the migrating thread.
    pub migration_cycles: f64,
}

impl MachineConfig {
    /// Number of CPUs.
    pub fn n_cpus(&self) -> usize {
        self.cpu_node.len()
    }

    /// Check every invariant the simulator relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(SimError::Config(m));
        if !self.line_size.is_power_of_two() || self.line_size < 8 {
            return bad(format!(
                "line_size {} is not a power of two >= 8",
                self.line_size
            ));
        }
        if !self.page_size.is_power_of_two() || self.page_size < self.line_size {
            return bad(format!(
                "page_size {} must be a power of two >= line_size",
                self.page_size
            ));
        }
        if self.levels.is_empty() {
            return bad("at least one cache level is needed".into());
        }
        if self.cpu_node.is_empty() {
            return bad("at least one CPU is needed".into());
        }
        for (i, l) in self.levels.iter().enumerate() {
            if l.sets == 0 || l.ways == 0 {
                return bad(format!("level {} has zero sets or ways", l.name));
            }
            if l.instance_of.len() != self.n_cpus() {
                return bad(format!(
                    "level {} maps {} cpus, machine has {}",
                    l.name,
                    l.instance_of.len(),
                    self.n_cpus()
                ));
            }
            if i == 0 && l.inclusion.victim_filled() {
                return bad("the first level cannot be exclusive/victim".into());
            }
            if l.hit_cycles < 0.0 {
                return bad(format!("level {} has negative hit cycles", l.name));
            }
        }
        // An instance of a lower level must cover whole instances of the level above.
        for i in 1..self.levels.len() {
            for a in 0..self.n_cpus() {
                for b in 0..self.n_cpus() {
                    let above_same =
                        self.levels[i - 1].instance_of[a] == self.levels[i - 1].instance_of[b];
                    let below_same = self.levels[i].instance_of[a] == self.levels[i].instance_of[b];
                    if above_same && !below_same {
                        return bad(format!(
                            "cpus {a} and {b} share {} but not {}",
                            self.levels[i - 1].name,
                            self.levels[i].name
                        ));
                    }
                }
            }
        }
        if self.nodes.is_empty() {
            return bad("at least one NUMA node is needed".into());
        }
        for (c, &n) in self.cpu_node.iter().enumerate() {
            if n as usize >= self.nodes.len() {
                return bad(format!("cpu {c} is on node {n}, which does not exist"));
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.memory_bytes < self.page_size as u64 {
                return bad(format!("node {i} has less than one page of memory"));
            }
            if n.service_line_cycles < 0.0
                || n.local_line_cycles < 0.0
                || n.remote_line_cycles < 0.0
            {
                return bad(format!("node {i} has a negative cost"));
            }
        }
        Ok(())
    }
}
