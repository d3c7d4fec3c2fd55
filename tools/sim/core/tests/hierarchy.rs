//! Behaviour of the whole hierarchy: inclusion, exclusion, transfers, DRAM queueing.

use unicache_sim_core::*;

fn level(
    name: &str,
    sets: u32,
    ways: u32,
    inc: Inclusion,
    cycles: f64,
    inst: Vec<u32>,
) -> LevelConfig {
    LevelConfig {
        name: name.into(),
        sets,
        ways,
        inclusion: inc,
        hit_cycles: cycles,
        instance_of: inst,
    }
}

/// Raw-trace access: the line is its own slot.
fn acc(m: &mut Machine, cpu: usize, line: u64, kind: AccessKind, now: f64) -> (Source, f64) {
    m.prepare_trace(line).unwrap();
    m.access(cpu, line, line as u32, kind, now)
}

fn node(service: f64) -> NodeConfig {
    NodeConfig {
        memory_bytes: 1 << 30,
        local_line_cycles: 100.0,
        remote_line_cycles: 150.0,
        service_line_cycles: service,
    }
}

/// Two groups of two cores, L1/L2 private, L3 per group.
fn opteron_like(l2: Inclusion, l3: Inclusion) -> MachineConfig {
    MachineConfig {
        line_size: 64,
        page_size: 4096,
        levels: vec![
            level("L1", 1, 2, Inclusion::NonInclusive, 1.0, vec![0, 1, 2, 3]),
            level("L2", 1, 2, l2, 5.0, vec![0, 1, 2, 3]),
            level("L3", 1, 4, l3, 20.0, vec![0, 0, 1, 1]),
        ],
        cpu_node: vec![0, 0, 1, 1],
        nodes: vec![node(1.0), node(1.0)],
        same_group_c2c_cycles: 30.0,
        cross_group_c2c_cycles: 60.0,
        cross_group_clean_from_dram: false,
        migration_cycles: 1000.0,
    }
}

#[test]
fn exclusive_hierarchy_holds_the_sum_of_its_levels() {
    let mut m = Machine::new(opteron_like(Inclusion::Exclusive, Inclusion::Victim)).unwrap();
    // 2 + 2 + 4 = 8 distinct lines fit; the second pass must not touch DRAM.
    for l in 0..8 {
        acc(&mut m, 0, l, AccessKind::Read, 0.0);
    }
    m.reset_counters();
    for l in 0..8 {
        acc(&mut m, 0, l, AccessKind::Read, 0.0);
    }
    let c = m.counters();
    assert_eq!(
        c.dram_lines.iter().sum::<u64>(),
        0,
        "served: {:?}",
        c.served
    );
}

#[test]
fn inclusive_hierarchy_holds_only_its_last_level() {
    let mut m = Machine::new(opteron_like(Inclusion::NonInclusive, Inclusion::Inclusive)).unwrap();
    for l in 0..8 {
        acc(&mut m, 0, l, AccessKind::Read, 0.0);
    }
    m.reset_counters();
    for l in 0..8 {
        acc(&mut m, 0, l, AccessKind::Read, 0.0);
    }
    assert!(m.counters().dram_lines.iter().sum::<u64>() >= 4);
}

#[test]
fn inclusive_eviction_back_invalidates_upper_levels() {
    let mut m = Machine::new(opteron_like(Inclusion::NonInclusive, Inclusion::Inclusive)).unwrap();
    acc(&mut m, 0, 0, AccessKind::Read, 0.0);
    // Core 1 (same group) fills the L3 with 4 other lines, evicting line 0 from the L3.
    for l in 1..5 {
        acc(&mut m, 1, l, AccessKind::Read, 0.0);
    }
    m.reset_counters();
    let (src, _) = acc(&mut m, 0, 0, AccessKind::Read, 0.0);
    assert_eq!(src, Source::DramLocal);
}

#[test]
fn other_chip_cache_serves_cross_group() {
    let mut m = Machine::new(opteron_like(Inclusion::Exclusive, Inclusion::Victim)).unwrap();
    acc(&mut m, 0, 7, AccessKind::Read, 0.0);
    let (src, cycles) = acc(&mut m, 2, 7, AccessKind::Read, 0.0);
    assert_eq!(src, Source::CrossGroup);
    assert_eq!(cycles, 60.0);
    let (src, _) = acc(&mut m, 1, 7, AccessKind::Read, 0.0);
    assert_eq!(src, Source::SameGroup);
}

#[test]
fn non_temporal_reads_do_not_allocate() {
    let mut m = Machine::new(opteron_like(Inclusion::Exclusive, Inclusion::Victim)).unwrap();
    for _ in 0..3 {
        let (src, _) = acc(&mut m, 0, 3, AccessKind::NonTemporal, 0.0);
        assert_eq!(src, Source::DramLocal);
    }
    acc(&mut m, 0, 3, AccessKind::Read, 0.0);
    assert_eq!(
        acc(&mut m, 0, 3, AccessKind::NonTemporal, 0.0).0,
        Source::Level(0)
    );
}

#[test]
fn dram_queue_caps_throughput_at_node_bandwidth() {
    let mut cfg = opteron_like(Inclusion::Exclusive, Inclusion::Victim);
    cfg.nodes[0].service_line_cycles = 50.0; // slower than the per-line cost of 100? no: queue
    cfg.nodes[0].local_line_cycles = 10.0;
    let mut m = Machine::new(cfg).unwrap();
    let mut t = 0.0;
    for l in 0..1000u64 {
        let (_, c) = acc(&mut m, 0, l * 1024, AccessKind::Read, t);
        t += c;
    }
    // 1000 lines at one per 50 cycles of service: at least ~50_000 cycles.
    assert!(t >= 49_000.0, "t = {t}");
}

#[test]
fn llc_lines_count_the_lines_that_missed_every_inner_level() {
    let mut e = Engine::new(opteron_like(Inclusion::Exclusive, Inclusion::Victim), 1).unwrap();
    let obj = e.add_object(4096, Placement::FirstTouch).unwrap();
    let t = e.add_thread(0, 0.0).unwrap();
    // two lines, read twice: from DRAM through the LLC, then both from the 2-way L1
    for _ in 0..2 {
        let read = Op::Access {
            obj,
            offset: 0,
            len: 128,
            kind: AccessKind::Read,
            compute_per_byte: 0.0,
        };
        e.push(t, read).unwrap();
        assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(t));
    }
    let s = e.thread_stats(t).unwrap();
    assert_eq!((s.lines, s.llc_lines, s.dram_lines), (4, 2, 2));
}

#[test]
fn engine_charges_compute_stall_and_migration() {
    let mut e = Engine::new(opteron_like(Inclusion::Exclusive, Inclusion::Victim), 1).unwrap();
    let obj = e.add_object(8192, Placement::FirstTouch).unwrap();
    let t = e.add_thread(0, 0.0).unwrap();
    e.push(
        t,
        Op::Migrate {
            cpu: 2,
            cycles: 1000.0,
        },
    )
    .unwrap();
    e.push(
        t,
        Op::Access {
            obj,
            offset: 0,
            len: 8192,
            kind: AccessKind::Read,
            compute_per_byte: 0.5,
        },
    )
    .unwrap();
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(t));
    let s = e.thread_stats(t).unwrap();
    assert_eq!(s.bytes, 8192);
    assert_eq!(s.migrations, 1);
    assert_eq!(s.compute_cycles, 4096.0);
    assert_eq!(s.dram_lines, 128);
    let total = s.compute_cycles + s.stall_cycles + s.migration_cycles + s.wait_cycles;
    assert!((e.thread_time(t).unwrap() - total).abs() < 1e-6);
    // first touch from cpu 2 puts the pages on node 1
    let f = e.object_frame(obj, 0).unwrap().unwrap();
    assert!(f * 4096 >= 1 << 30);
}

#[test]
fn two_threads_on_one_cpu_share_it() {
    let mut e = Engine::new(opteron_like(Inclusion::Exclusive, Inclusion::Victim), 1).unwrap();
    let a = e.add_thread(0, 0.0).unwrap();
    let b = e.add_thread(0, 0.0).unwrap();
    e.push(a, Op::Compute { cycles: 100.0 }).unwrap();
    e.push(b, Op::Compute { cycles: 100.0 }).unwrap();
    let Stop::NeedOps(first) = e.run(f64::INFINITY).unwrap() else {
        panic!("no stop")
    };
    e.retire(first).unwrap();
    let Stop::NeedOps(second) = e.run(f64::INFINITY).unwrap() else {
        panic!("no stop")
    };
    assert_ne!(first, second);
    let ta = e.thread_time(a).unwrap();
    let tb = e.thread_time(b).unwrap();
    assert_eq!(ta.max(tb), 200.0);
}

#[test]
fn directory_counts_stay_exact_under_random_multicore_traffic() {
    for (l2, l3) in [
        (Inclusion::Exclusive, Inclusion::Victim),
        (Inclusion::NonInclusive, Inclusion::Inclusive),
        (Inclusion::Inclusive, Inclusion::NonInclusive),
        (Inclusion::NonInclusive, Inclusion::Victim),
    ] {
        let mut m = Machine::new(opteron_like(l2, l3)).unwrap();
        m.prepare_trace(40).unwrap();
        let mut rng = unicache_sim_core::rng::Rng::new(5);
        for _ in 0..5000 {
            let cpu = rng.below(4) as usize;
            let line = rng.below(40);
            let kind = if rng.below(5) == 0 {
                AccessKind::NonTemporal
            } else {
                AccessKind::Read
            };
            m.access(cpu, line, line as u32, kind, 0.0);
        }
        assert_eq!(m.check_directory(), None, "{l2:?}/{l3:?}");
    }
}

#[test]
fn engine_pages_and_raw_traces_do_not_mix() {
    let mut m = Machine::new(opteron_like(Inclusion::Exclusive, Inclusion::Victim)).unwrap();
    m.register_page(3).unwrap();
    assert!(m.prepare_trace(10).is_err());
}

/// A 16-core, 4-group machine of the opteron-16 shape (L1 inclusive, L2 exclusive, L3
/// victim shared), small enough for random traces to evict at every level.
fn small_opteron(l1_ways: u32, l2_ways: u32, l3_ways: u32) -> MachineConfig {
    MachineConfig {
        line_size: 64,
        page_size: 4096,
        levels: vec![
            level(
                "L1",
                4,
                l1_ways,
                Inclusion::Inclusive,
                1.0,
                (0..16).collect(),
            ),
            level(
                "L2",
                8,
                l2_ways,
                Inclusion::Exclusive,
                5.0,
                (0..16).collect(),
            ),
            level(
                "L3",
                16,
                l3_ways,
                Inclusion::Victim,
                20.0,
                (0..16).map(|c| c / 4).collect(),
            ),
        ],
        cpu_node: (0..16).map(|c| c / 4).collect(),
        nodes: (0..4).map(|_| node(3.0)).collect(),
        same_group_c2c_cycles: 30.0,
        cross_group_c2c_cycles: 60.0,
        cross_group_clean_from_dram: false,
        migration_cycles: 1000.0,
    }
}

/// [`small_opteron`] with every level non-inclusive (pycachesim's semantics).
fn small_nine(l1_ways: u32, l2_ways: u32, l3_ways: u32) -> MachineConfig {
    let mut cfg = small_opteron(l1_ways, l2_ways, l3_ways);
    for lv in &mut cfg.levels {
        lv.inclusion = Inclusion::NonInclusive;
    }
    cfg
}

#[test]
fn every_hot_path_gives_the_same_results() {
    let shapes = [
        (small_opteron(8, 16, 32), true),
        (small_opteron(2, 4, 8), false),
        (small_opteron(3, 5, 7), false),
        (small_opteron(8, 16, 48), false),
        (small_nine(8, 16, 32), true),
        (small_nine(4, 8, 16), false),
    ];
    for (cfg, specialised) in shapes {
        let ways: Vec<u32> = cfg.levels.iter().map(|l| l.ways).collect();
        let (w1, w2, w3) = (ways[0], ways[1], ways[2]);
        // (vector, AVX2 only, specialised): AVX-512 or AVX2 when present, else portable
        let paths = [
            (true, false, true),
            (true, false, false),
            (true, true, true),
            (true, true, false),
            (false, false, true),
            (false, false, false),
        ];
        let mut machines: Vec<Machine> = paths
            .iter()
            .map(|&(vector, avx2_only, specialised)| {
                let mut m = Machine::new(cfg.clone()).unwrap();
                m.use_paths(vector, specialised);
                if avx2_only {
                    m.use_avx2_only();
                }
                m
            })
            .collect();
        assert_eq!(machines[0].uses_specialised_path(), specialised);
        let mut rng = rng::Rng::new(7);
        let span = 4096u64;
        for m in &mut machines {
            m.prepare_trace(span).unwrap();
        }
        for k in 0..60_000u64 {
            let cpu = rng.below(16) as usize;
            // runs of sequential lines mixed with random ones, some non-temporal
            let line = if k % 3 == 0 {
                rng.below(span)
            } else {
                (k * 7) % span
            };
            let kind = match rng.below(10) {
                0 => AccessKind::NonTemporal,
                1 => AccessKind::Write,
                _ => AccessKind::Read,
            };
            let first = machines[0].access(cpu, line, line as u32, kind, k as f64);
            for (i, m) in machines.iter_mut().enumerate().skip(1) {
                let r = m.access(cpu, line, line as u32, kind, k as f64);
                assert_eq!(r, first, "access {k}, path {i}, ways ({w1},{w2},{w3})");
            }
        }
        for m in &machines {
            assert_eq!(m.counters().served, machines[0].counters().served);
            assert_eq!(m.check_directory(), None);
            for lv in 0..3 {
                for inst in 0..if lv == 2 { 4 } else { 16 } {
                    assert_eq!(m.occupancy(lv, inst), machines[0].occupancy(lv, inst));
                }
            }
        }
    }
}

#[test]
fn batched_trace_runs_match_the_reference_path() {
    let cfg = small_opteron(8, 16, 32);
    let mut rng = rng::Rng::new(11);
    let span = 4096u64;
    let mut cpus = Vec::new();
    let mut lines = Vec::new();
    for k in 0..60_000u64 {
        cpus.push(rng.below(16) as u32);
        lines.push(if k % 3 == 0 {
            rng.below(span)
        } else {
            (k * 7) % span
        });
    }
    for cfg in [cfg, small_nine(8, 16, 32)] {
        let mut fast = Machine::new(cfg.clone()).unwrap();
        assert!(fast.uses_specialised_path());
        trace::prepare(&mut fast, &lines).unwrap();
        trace::run_cpu_lines(&mut fast, &cpus, &lines, AccessKind::Read);
        let mut reference = Machine::new(cfg).unwrap();
        reference.use_paths(false, false);
        trace::prepare(&mut reference, &lines).unwrap();
        for (&c, &l) in cpus.iter().zip(&lines) {
            reference.access(c as usize, l, l as u32, AccessKind::Read, 0.0);
        }
        assert_eq!(fast.counters().served, reference.counters().served);
        assert_eq!(fast.check_directory(), None);
        for lv in 0..3 {
            for inst in 0..if lv == 2 { 4 } else { 16 } {
                assert_eq!(fast.occupancy(lv, inst), reference.occupancy(lv, inst));
            }
        }
    }
    // one cpu, no cpu list
    let mut fast = Machine::new(small_opteron(8, 16, 32)).unwrap();
    let mut reference = Machine::new(small_opteron(8, 16, 32)).unwrap();
    reference.use_paths(false, false);
    trace::prepare(&mut fast, &lines).unwrap();
    trace::prepare(&mut reference, &lines).unwrap();
    trace::run_lines(&mut fast, 5, &lines, AccessKind::NonTemporal);
    trace::run_lines(&mut fast, 5, &lines, AccessKind::Read);
    for kind in [AccessKind::NonTemporal, AccessKind::Read] {
        for &l in &lines {
            reference.access(5, l, l as u32, kind, 0.0);
        }
    }
    assert_eq!(fast.counters().served, reference.counters().served);
}

#[test]
fn machines_of_one_two_and_four_levels_build_and_run() {
    for n in [1usize, 2, 4] {
        let levels = (0..n)
            .map(|i| {
                let inst = if i + 1 == n {
                    vec![0, 0, 1, 1]
                } else {
                    vec![0, 1, 2, 3]
                };
                level(
                    &format!("L{}", i + 1),
                    4 << i,
                    4,
                    Inclusion::Inclusive,
                    1.0,
                    inst,
                )
            })
            .collect();
        let cfg = MachineConfig {
            levels,
            ..opteron_like(Inclusion::Exclusive, Inclusion::Victim)
        };
        let mut m = Machine::new(cfg).unwrap();
        assert!(!m.uses_specialised_path());
        m.use_paths(true, true);
        for l in 0..200 {
            acc(&mut m, (l % 4) as usize, l % 97, AccessKind::Read, 0.0);
        }
        assert_eq!(m.check_directory(), None);
    }
}
