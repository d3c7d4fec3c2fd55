//! Exact results pinned on fixed inputs: the served lines per source, DRAM lines per node,
//! queue cycles and thread accounting that the simulator gave before its hot paths were
//! tuned for speed (issue 19). The other tests compare the hot paths with each other and
//! with pycachesim; these catch a change that every path would share.

mod shapes;

use shapes::{file_reads, level, opteron16};
use unicache_sim_core::rng::Rng;
use unicache_sim_core::*;

/// One core of it as three non-inclusive levels (the pycachesim comparison).
fn single_nine() -> MachineConfig {
    let mut cfg = opteron16();
    cfg.levels = vec![
        level("L1", 128, 8, Inclusion::NonInclusive, 16),
        level("L2", 512, 16, Inclusion::NonInclusive, 16),
        level("L3", 1024, 32, Inclusion::NonInclusive, 16),
    ];
    cfg.cpu_node = vec![0; 16];
    cfg
}

#[test]
fn multicore_trace_counts_are_pinned() {
    let (cpus, lines) = file_reads(32, 4096, 120, 16);
    let mut m = Machine::new(opteron16()).unwrap();
    trace::prepare(&mut m, &lines).unwrap();
    trace::run_cpu_lines(&mut m, &cpus, &lines, AccessKind::Read);
    let c = m.counters();
    assert_eq!(c.served, PINNED_MULTICORE_SERVED);
    assert_eq!(c.dram_lines, PINNED_MULTICORE_DRAM);
    assert_eq!(c.dram_queue_cycles, PINNED_MULTICORE_QUEUE);
    assert_eq!(m.check_directory(), None);
}

#[test]
fn single_core_trace_counts_are_pinned() {
    let (_, lines) = file_reads(32, 4096, 120, 1);
    let mut m = Machine::new(single_nine()).unwrap();
    trace::prepare(&mut m, &lines).unwrap();
    trace::run_lines(&mut m, 0, &lines, AccessKind::Read);
    assert_eq!(m.counters().served, PINNED_SINGLE_SERVED);
    assert_eq!(m.counters().dram_lines, PINNED_SINGLE_DRAM);
}

#[test]
fn engine_run_is_pinned() {
    let mut e = Engine::new(opteron16(), 3).unwrap();
    let mut rng = Rng::new(5);
    let files: Vec<u32> = (0..24)
        .map(|_| e.add_object(256 * 1024, Placement::FirstTouch).unwrap())
        .collect();
    let threads: Vec<usize> = (0..10)
        .map(|i| e.add_thread(i + i / 4 * 2, 0.0).unwrap())
        .collect();
    let mut reads = 0;
    while reads < 150 {
        match e.run(f64::INFINITY).unwrap() {
            Stop::NeedOps(t) => {
                reads += 1;
                let f = files[rng.below(files.len() as u64) as usize];
                if rng.below(4) == 0 {
                    let cpu = rng.below(16) as u32;
                    e.push(t, Op::Migrate { cpu, cycles: 500.0 }).unwrap();
                }
                let kind = if rng.below(8) == 0 {
                    AccessKind::NonTemporal
                } else {
                    AccessKind::Read
                };
                let op = Op::Access {
                    obj: f,
                    offset: 0,
                    len: 256 * 1024,
                    kind,
                    compute_per_byte: 0.02,
                };
                e.push(t, op).unwrap();
            }
            other => panic!("stopped: {other:?}"),
        }
    }
    let times: Vec<f64> = threads.iter().map(|&t| e.thread_time(t).unwrap()).collect();
    let lines: Vec<(u64, u64, u64, u64)> = threads
        .iter()
        .map(|&t| {
            let s = e.thread_stats(t).unwrap();
            (s.lines, s.dram_lines, s.c2c_lines, s.llc_lines)
        })
        .collect();
    let c = e.counters();
    assert_eq!(c.served, PINNED_ENGINE_SERVED);
    assert_eq!(c.dram_lines, PINNED_ENGINE_DRAM);
    assert_eq!(c.dram_queue_cycles, PINNED_ENGINE_QUEUE);
    assert_eq!(lines, PINNED_ENGINE_LINES);
    assert_eq!(times, PINNED_ENGINE_TIMES);
}

const PINNED_MULTICORE_SERVED: [u64; 7] = [0, 24576, 60416, 62464, 197632, 40960, 105472];
const PINNED_MULTICORE_DRAM: [u64; 4] = [146432, 0, 0, 0];
const PINNED_MULTICORE_QUEUE: f64 = 154611744768.0;
const PINNED_SINGLE_SERVED: [u64; 7] = [0, 32768, 86016, 0, 0, 372736, 0];
const PINNED_SINGLE_DRAM: [u64; 4] = [372736, 0, 0, 0];
const PINNED_ENGINE_SERVED: [u64; 7] = [3712, 42432, 86272, 112256, 232704, 107968, 5184];
const PINNED_ENGINE_DRAM: [u64; 4] = [37440, 20480, 12288, 42944];
const PINNED_ENGINE_QUEUE: f64 = 2.0;
/// Per thread: lines, DRAM lines, cache-to-cache lines, LLC lines.
const PINNED_ENGINE_LINES: [(u64, u64, u64, u64); 10] = [
    (88512, 10112, 56832, 81280),
    (41664, 8192, 21824, 36160),
    (41920, 4608, 25600, 37824),
    (65408, 10048, 42368, 62080),
    (54976, 12288, 26816, 50240),
    (55360, 8192, 30336, 50496),
    (61440, 8192, 40640, 53248),
    (53376, 13312, 28800, 49280),
    (72704, 23104, 40832, 72704),
    (55168, 15104, 30912, 51072),
];
const PINNED_ENGINE_TIMES: [f64; 10] = [
    4236760.479999929,
    4234197.1199999405,
    4235395.99999993,
    4238823.03999994,
    4232919.679999902,
    4235899.519999902,
    4240021.91999993,
    4235469.4399999315,
    4239289.75999993,
    4234409.599999902,
];
