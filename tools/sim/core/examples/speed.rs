//! Speed check of the cache hierarchy without Python: the read-microbenchmark trace of
//! `unicache-sim bench` (256 KiB files, 8 MiB working set, each read on a random CPU) on an
//! opteron-16-like machine (16 cores, L1 64 KiB 8-way inclusive, L2 512 KiB 16-way
//! exclusive, L3 2 MiB 32-way victim per 4-core chip, 4 NUMA nodes).
//!
//! `cargo run --release --example speed [accesses] [repeats] [paths] [machine]`; also a
//! target for callgrind. `paths` picks the hot paths: `best` (default: AVX-512 if the CPU
//! has it, the hot path fixed for this shape), `avx2` (AVX2 rather than AVX-512),
//! `portable` (no vector instructions), `generic` (the hot path reading the machine's
//! tables) or `reference` (neither). `machine` is `opteron` (default) or `single`: one
//! core's L1/L2/L3 as three non-inclusive levels, fed the trace from one CPU (the
//! pycachesim comparison of `unicache-sim bench`).
//! Prints the rate in CPU time of the running thread (the machine's cores are shared), the
//! median over `repeats` runs on fresh machines (default 5).

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// CPU time of the calling thread, seconds (Linux `CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_s() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: a valid out-pointer; clock 3 is CLOCK_THREAD_CPUTIME_ID on Linux.
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

#[path = "../tests/shapes/mod.rs"]
mod shapes;

use unicache_sim_core::machine::AccessKind;
use unicache_sim_core::{trace, Inclusion, Machine, MachineConfig, NodeConfig};

/// [`main`]'s `single` machine: one core's levels, non-inclusive, and one node without
/// a DRAM queue, as `unicache_sim.engine.config.single_core` builds it for the benchmark.
fn single_core(mut cfg: MachineConfig) -> MachineConfig {
    for lv in &mut cfg.levels {
        lv.inclusion = Inclusion::NonInclusive;
        lv.instance_of = vec![0];
    }
    cfg.cpu_node = vec![0];
    cfg.nodes = vec![NodeConfig {
        memory_bytes: 1 << 34,
        local_line_cycles: 100.0,
        remote_line_cycles: 100.0,
        service_line_cycles: 0.0,
    }];
    cfg
}

fn main() {
    let accesses: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8_000_000);
    let cfg = shapes::opteron16();
    let file_lines = 4096u64;
    let reads = (accesses / file_lines).max(1);
    let (cpus, lines) = shapes::file_reads(32, file_lines, reads, 16);
    let repeats: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let (vector, specialised) = match std::env::args().nth(3).as_deref() {
        None | Some("best") => (true, true),
        Some("portable") => (false, true),
        Some("avx2") => (true, true),
        Some("generic") => (true, false),
        Some("reference") => (false, false),
        Some(other) => panic!("paths: best, avx2, portable, generic or reference, not {other}"),
    };
    let single = match std::env::args().nth(4).as_deref() {
        None | Some("opteron") => false,
        Some("single") => true,
        Some(other) => panic!("machine: opteron or single, not {other}"),
    };
    let cfg = if single { single_core(cfg) } else { cfg };
    let mut rates = Vec::new();
    let mut served = Vec::new();
    for _ in 0..repeats.max(1) {
        let mut m = Machine::new(cfg.clone()).expect("config");
        m.use_paths(vector, specialised);
        if std::env::args().nth(3).as_deref() == Some("avx2") {
            m.use_avx2_only();
        }
        trace::prepare(&mut m, &lines).expect("prepare");
        let t0 = thread_cpu_s();
        if single {
            trace::run_lines(&mut m, 0, &lines, AccessKind::Read);
        } else {
            trace::run_cpu_lines(&mut m, &cpus, &lines, AccessKind::Read);
        }
        let s = thread_cpu_s() - t0;
        rates.push(lines.len() as f64 / s / 1e6);
        served = m.counters().served.clone();
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "{} accesses: median {:.1} M/s (min {:.1}, max {:.1}, {} runs, thread CPU time); \
         served {:?}",
        lines.len(),
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1],
        rates.len(),
        served
    );
}
