//! The DRAM queue with two threads whose requests reach a node out of time order.

use unicache_sim_core::*;

/// Two CPUs on node 0 (each its own cache group), a tiny private cache, node 1 idle.
fn machine(service: f64) -> MachineConfig {
    MachineConfig {
        line_size: 64,
        page_size: 4096,
        levels: vec![LevelConfig {
            name: "L1".into(),
            sets: 1,
            ways: 1,
            inclusion: Inclusion::Inclusive,
            hit_cycles: 1.0,
            instance_of: vec![0, 1],
        }],
        cpu_node: vec![0, 0],
        nodes: vec![
            NodeConfig {
                memory_bytes: 64 << 20,
                local_line_cycles: 10.0,
                remote_line_cycles: 20.0,
                service_line_cycles: service,
            };
            2
        ],
        same_group_c2c_cycles: 5.0,
        cross_group_c2c_cycles: 5.0,
        cross_group_clean_from_dram: false,
        migration_cycles: 0.0,
    }
}

/// Two threads each stream their own 4 MiB object on node 0; returns their end times.
fn two_streams(service: f64) -> (f64, f64, ThreadStats) {
    let mut e = Engine::new(machine(service), 1).unwrap();
    let size = 4 << 20;
    let a = e.add_object(size, Placement::Node(0)).unwrap();
    let b = e.add_object(size, Placement::Node(0)).unwrap();
    let ta = e.add_thread(0, 0.0).unwrap();
    let tb = e.add_thread(1, 0.0).unwrap();
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
    let mut done = 0;
    while done < 2 {
        match e.run(f64::INFINITY).unwrap() {
            Stop::NeedOps(t) => {
                e.retire(t).unwrap();
                done += 1;
            }
            other => panic!("unexpected stop {other:?}"),
        }
    }
    let stats = e.thread_stats(tb).unwrap();
    (
        e.thread_time(ta).unwrap(),
        e.thread_time(tb).unwrap(),
        stats,
    )
}

#[test]
fn two_threads_on_one_node_do_not_serialise_below_its_bandwidth() {
    // 65536 lines each at 10 cycles; the node serves a line every 2 cycles (2 threads need 1
    // per 5): neither thread should wait for the other's pages.
    let (ta, tb, st) = two_streams(2.0);
    let alone = 65536.0 * 10.0;
    assert!(ta < alone * 1.05, "thread a took {ta}, alone {alone}");
    assert!(tb < alone * 1.05, "thread b took {tb}, alone {alone}");
    assert!(st.stall_cycles < alone * 1.05);
}

#[test]
fn two_threads_beyond_the_node_bandwidth_still_queue() {
    // one line per 15 cycles of service: 131072 lines need >= 1.97 M cycles in all.
    let (ta, tb, _) = two_streams(15.0);
    let floor = 2.0 * 65536.0 * 15.0;
    assert!(
        ta.max(tb) >= floor * 0.97,
        "finished at {} < {floor}",
        ta.max(tb)
    );
}
