//! The `opteron-16` shape and the benchmark's trace, shared by the pinned results
//! (`tests/pinned.rs`) and the `speed` example (`examples/speed.rs`, by `#[path]`).

#![allow(dead_code)]

use unicache_sim_core::rng::Rng;
use unicache_sim_core::*;

/// Level `name` of 16 CPUs, one instance per `per` CPUs.
pub fn level(name: &str, sets: u32, ways: u32, inclusion: Inclusion, per: u32) -> LevelConfig {
    LevelConfig {
        name: name.into(),
        sets,
        ways,
        inclusion,
        hit_cycles: 1.0 + sets as f64 / 64.0,
        instance_of: (0..16).map(|c| c / per).collect(),
    }
}

/// The opteron-16 shape of the `speed` example: 16 cores, L1 8-way, exclusive L2 16-way,
/// a 32-way victim L3 per four cores, four nodes.
pub fn opteron16() -> MachineConfig {
    MachineConfig {
        line_size: 64,
        page_size: 4096,
        levels: vec![
            level("L1", 128, 8, Inclusion::Inclusive, 1),
            level("L2", 512, 16, Inclusion::Exclusive, 1),
            level("L3", 1024, 32, Inclusion::Victim, 4),
        ],
        cpu_node: (0..16).map(|c| c / 4).collect(),
        nodes: (0..4)
            .map(|_| NodeConfig {
                memory_bytes: 1 << 30,
                local_line_cycles: 71.0,
                remote_line_cycles: 82.0,
                service_line_cycles: 18.0,
            })
            .collect(),
        same_group_c2c_cycles: 22.0,
        cross_group_c2c_cycles: 71.0,
        cross_group_clean_from_dram: false,
        migration_cycles: 500.0,
    }
}

/// The read-microbenchmark trace of `unicache-sim bench`, each file read on a random CPU.
pub fn file_reads(n_files: u64, file_lines: u64, reads: u64, n_cpus: u64) -> (Vec<u32>, Vec<u64>) {
    let (lines, files) = trace::file_read_trace(n_files, file_lines, reads, false, 1);
    let mut rng = Rng::new(1 ^ 0xC0FFEE);
    let mut cpus = Vec::with_capacity(lines.len());
    for _ in &files {
        let c = rng.below(n_cpus) as u32;
        cpus.extend(std::iter::repeat_n(c, file_lines as usize));
    }
    (cpus, lines)
}
