//! Speed check of the cache hierarchy without Python: the read-microbenchmark trace of
//! `unicache-sim bench` (256 KiB files, 8 MiB working set, each read on a random CPU) on an
//! opteron-16-like machine (16 cores, L1 64 KiB 8-way inclusive, L2 512 KiB 16-way
//! exclusive, L3 2 MiB 32-way victim per 4-core chip, 4 NUMA nodes).
//!
//! `cargo run --release --example speed [accesses]`; also a target for callgrind.

use std::time::Instant;

use unicache_sim_core::machine::AccessKind;
use unicache_sim_core::rng::Rng;
use unicache_sim_core::{trace, Inclusion, LevelConfig, Machine, MachineConfig, NodeConfig};

fn level(name: &str, sets: u32, ways: u32, inclusion: Inclusion, per: u32) -> LevelConfig {
    LevelConfig {
        name: name.into(),
        sets,
        ways,
        inclusion,
        hit_cycles: 1.0,
        instance_of: (0..16).map(|c| c / per).collect(),
    }
}

fn main() {
    let accesses: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8_000_000);
    let cfg = MachineConfig {
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
                memory_bytes: 4 << 30,
                local_line_cycles: 71.0,
                remote_line_cycles: 82.0,
                service_line_cycles: 18.0,
            })
            .collect(),
        same_group_c2c_cycles: 22.0,
        cross_group_c2c_cycles: 71.0,
        migration_cycles: 0.0,
    };
    let file_lines = 4096u64;
    let reads = (accesses / file_lines).max(1);
    let (lines, files) = trace::file_read_trace(32, file_lines, reads, false, 1);
    let mut rng = Rng::new(1 ^ 0xC0FFEE);
    let mut cpus = Vec::with_capacity(lines.len());
    for _ in &files {
        let c = rng.below(16) as u32;
        cpus.extend(std::iter::repeat_n(c, file_lines as usize));
    }
    let mut m = Machine::new(cfg).expect("config");
    trace::prepare(&mut m, &lines).expect("prepare");
    let t0 = Instant::now();
    trace::run_cpu_lines(&mut m, &cpus, &lines, AccessKind::Read);
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{} accesses in {:.3} s: {:.1} M/s; served {:?}",
        lines.len(),
        s,
        lines.len() as f64 / s / 1e6,
        m.counters().served
    );
}
