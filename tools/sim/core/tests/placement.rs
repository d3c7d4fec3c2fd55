//! Explicit page placement: pages of a chosen node and color (the coloring experiments).

use unicache_sim_core::*;

/// One CPU per node, a shared 4-set 2-way cache of 64-byte lines over 4 KiB pages.
fn two_nodes() -> MachineConfig {
    MachineConfig {
        line_size: 64,
        page_size: 4096,
        levels: vec![LevelConfig {
            name: "L1".into(),
            sets: 64,
            ways: 2,
            inclusion: Inclusion::Inclusive,
            hit_cycles: 1.0,
            instance_of: vec![0, 1],
        }],
        cpu_node: vec![0, 1],
        nodes: vec![
            NodeConfig {
                memory_bytes: 16 << 20,
                local_line_cycles: 100.0,
                remote_line_cycles: 150.0,
                service_line_cycles: 0.0,
            };
            2
        ],
        same_group_c2c_cycles: 10.0,
        cross_group_c2c_cycles: 20.0,
        cross_group_clean_from_dram: false,
        migration_cycles: 0.0,
    }
}

#[test]
fn placed_pages_have_the_requested_node_and_color() {
    let mut e = Engine::new(two_nodes(), 3).unwrap();
    let obj = e.add_object(64 * 4096, Placement::Node(0)).unwrap();
    for p in 0..64u64 {
        let f = e.place_page(obj, p, 1, Some((64, p % 5))).unwrap();
        assert_eq!(f % 64, p % 5);
        assert!(f >= 4096, "frame {f} is not on node 1");
        assert_eq!(e.object_frame(obj, p).unwrap(), Some(f));
    }
    assert_eq!(e.node_frames(1).unwrap(), (64, 4096));
    assert_eq!(e.node_frames(0).unwrap().0, 0);
}

#[test]
fn a_placed_page_cannot_be_placed_twice_and_bad_nodes_are_refused() {
    let mut e = Engine::new(two_nodes(), 3).unwrap();
    let obj = e.add_object(2 * 4096, Placement::FirstTouch).unwrap();
    e.place_page(obj, 0, 0, None).unwrap();
    assert!(e.place_page(obj, 0, 0, None).is_err());
    assert!(e.place_page(obj, 1, 2, None).is_err());
    assert!(e.place_page(obj, 2, 0, None).is_err());
    assert!(e.node_frames(2).is_err());
}

#[test]
fn reads_of_a_placed_page_are_remote_from_the_other_node() {
    let mut e = Engine::new(two_nodes(), 3).unwrap();
    let obj = e.add_object(4096, Placement::FirstTouch).unwrap();
    // placed on node 1 although cpu 0 touches it first
    e.place_page(obj, 0, 1, None).unwrap();
    let t = e.add_thread(0, 0.0).unwrap();
    e.push(
        t,
        Op::Access {
            obj,
            offset: 0,
            len: 4096,
            kind: AccessKind::Read,
            compute_per_byte: 0.0,
        },
    )
    .unwrap();
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(t));
    let st = e.thread_stats(t).unwrap();
    assert_eq!(st.dram_lines, 64);
    assert!((st.stall_cycles - 64.0 * 150.0).abs() < 1e-6);
}

#[test]
fn threads_queued_on_one_cpu_take_turns() {
    let mut e = Engine::new(two_nodes(), 3).unwrap();
    let size = 64 * 4096;
    let a = e.add_object(size, Placement::Node(0)).unwrap();
    let b = e.add_object(size, Placement::Node(0)).unwrap();
    let ta = e.add_thread(0, 0.0).unwrap();
    let tb = e.add_thread(0, 0.0).unwrap();
    for (t, obj) in [(ta, a), (tb, b)] {
        e.push(
            t,
            Op::Access {
                obj,
                offset: 0,
                len: size,
                kind: AccessKind::Read,
                compute_per_byte: 0.0,
            },
        )
        .unwrap();
    }
    // the first to finish does so near the end, not after half the time: they shared the CPU
    let Stop::NeedOps(first) = e.run(f64::INFINITY).unwrap() else {
        panic!("a thread should finish");
    };
    let alone = 64.0 * 64.0 * 100.0;
    let t = e.thread_time(first).unwrap();
    assert!(t > 1.9 * alone, "finished at {t}, alone {alone}");
    let other = if first == ta { tb } else { ta };
    assert!(e.thread_stats(other).unwrap().wait_cycles > 0.9 * alone);
}

/// Reads a 4 KiB page on CPU 1, then on CPU 0 (another LLC group); CPU 0's stats.
fn second_reader(clean_from_dram: bool) -> ThreadStats {
    let mut e = Engine::new(
        MachineConfig {
            cross_group_clean_from_dram: clean_from_dram,
            ..two_nodes()
        },
        3,
    )
    .unwrap();
    let obj = e.add_object(4096, Placement::Node(0)).unwrap();
    let read = Op::Access {
        obj,
        offset: 0,
        len: 4096,
        kind: AccessKind::Read,
        compute_per_byte: 0.0,
    };
    let first = e.add_thread(1, 0.0).unwrap();
    e.push(first, read).unwrap();
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(first));
    e.retire(first).unwrap();
    let second = e.add_thread(0, 0.0).unwrap();
    e.push(second, read).unwrap();
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(second));
    e.thread_stats(second).unwrap()
}

#[test]
fn a_clean_line_in_another_groups_cache_comes_from_that_cache_or_from_dram() {
    let forwarded = second_reader(false);
    assert_eq!((forwarded.c2c_lines, forwarded.dram_lines), (64, 0));
    // MOESI without a forwarding state: the home node's DRAM serves it, at its latency
    let from_dram = second_reader(true);
    assert_eq!((from_dram.c2c_lines, from_dram.dram_lines), (0, 64));
    assert_eq!(from_dram.stall_cycles, 64.0 * 100.0);
}
