//! Idle time: a sleeping thread holds no CPU and starts again when its time comes.

use unicache_sim_core::*;

/// One CPU, one small cache.
fn one_cpu() -> MachineConfig {
    MachineConfig {
        line_size: 64,
        page_size: 4096,
        levels: vec![LevelConfig {
            name: "L1".into(),
            sets: 64,
            ways: 2,
            inclusion: Inclusion::Inclusive,
            hit_cycles: 1.0,
            instance_of: vec![0],
        }],
        cpu_node: vec![0],
        nodes: vec![NodeConfig {
            memory_bytes: 16 << 20,
            local_line_cycles: 100.0,
            remote_line_cycles: 100.0,
            service_line_cycles: 0.0,
        }],
        same_group_c2c_cycles: 10.0,
        cross_group_c2c_cycles: 20.0,
        cross_group_clean_from_dram: false,
        migration_cycles: 0.0,
    }
}

#[test]
fn a_sleeping_thread_leaves_its_cpu_to_others_and_wakes_at_its_time() {
    let mut e = Engine::new(one_cpu(), 1).unwrap();
    let sleeper = e.add_thread(0, 0.0).unwrap();
    let worker = e.add_thread(0, 0.0).unwrap();
    e.push(sleeper, Op::Sleep { until: 1000.0 }).unwrap();
    e.push(sleeper, Op::Compute { cycles: 10.0 }).unwrap();
    e.push(worker, Op::Compute { cycles: 500.0 }).unwrap();
    // the worker runs first, undisturbed: the sleeper does not hold the CPU
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(worker));
    assert_eq!(e.thread_time(worker).unwrap(), 500.0);
    e.retire(worker).unwrap();
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(sleeper));
    assert_eq!(e.thread_time(sleeper).unwrap(), 1010.0);
    let st = e.thread_stats(sleeper).unwrap();
    // idle time is neither waiting for the CPU nor computing
    assert_eq!(st.wait_cycles, 0.0);
    assert_eq!(st.compute_cycles, 10.0);
}

#[test]
fn a_sleep_into_the_past_costs_nothing_and_a_deadline_stops_before_a_wake() {
    let mut e = Engine::new(one_cpu(), 1).unwrap();
    let t = e.add_thread(0, 50.0).unwrap();
    e.push(t, Op::Sleep { until: 10.0 }).unwrap();
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(t));
    assert_eq!(e.thread_time(t).unwrap(), 50.0);
    e.push(t, Op::Sleep { until: 900.0 }).unwrap();
    assert_eq!(e.run(800.0).unwrap(), Stop::Deadline);
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(t));
    assert_eq!(e.thread_time(t).unwrap(), 900.0);
}

#[test]
fn a_sleeping_thread_is_not_runnable() {
    let mut e = Engine::new(one_cpu(), 1).unwrap();
    let a = e.add_thread(0, 0.0).unwrap();
    let b = e.add_thread(0, 0.0).unwrap();
    e.push(a, Op::Sleep { until: 100.0 }).unwrap();
    e.push(b, Op::Compute { cycles: 10.0 }).unwrap();
    assert!(!e.is_runnable(a).unwrap());
    assert!(e.is_runnable(b).unwrap());
    assert_eq!(e.runnable_per_cpu(), vec![1]);
    assert_eq!(e.runnable_on(0), vec![b]);
    e.retire(b).unwrap();
    assert_eq!(e.runnable_per_cpu(), vec![0]);
}
