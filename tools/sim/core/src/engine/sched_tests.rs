//! The scheduler's index against the scan it replaced: random threads, operations, sleeps,
//! migrations, moves and retirements, every choice of the engine compared with the scan's.

use super::sched::Choice;
use super::{Engine, Op, Placement, Stop};
use crate::config::{Inclusion, LevelConfig, MachineConfig, NodeConfig};
use crate::machine::AccessKind;
use crate::rng::Rng;

/// The scheduler before the index, as it was: scan every thread in id order.
fn scan(e: &Engine) -> Choice {
    let mut need: Option<(usize, f64)> = None;
    let mut best: Option<(usize, f64)> = None;
    for (i, t) in e.threads.iter().enumerate() {
        if e.retired[i] {
            continue;
        }
        if t.ops.is_empty() {
            if need.is_none_or(|(_, tt)| t.time < tt) {
                need = Some((i, t.time));
            }
            continue;
        }
        let start = if let Some(Op::Sleep { until }) = t.ops.front() {
            if *until > t.time {
                *until
            } else {
                t.time
            }
        } else {
            let free = e.cpu_free[t.cpu as usize];
            if free > t.time {
                free
            } else {
                t.time
            }
        };
        if best.is_none_or(|(b, s)| start < s || (start == s && t.time < e.threads[b].time)) {
            best = Some((i, start));
        }
    }
    match (need, best) {
        (Some((i, _)), _) => Choice::Feed(i),
        (None, Some((i, start))) => Choice::Step(i, start),
        (None, None) => Choice::Idle,
    }
}

/// The runnable threads per CPU, by a scan.
fn runnable_by_scan(e: &Engine) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); e.cpu_free.len()];
    for (i, t) in e.threads.iter().enumerate() {
        if !e.retired[i] && !matches!(t.ops.front(), None | Some(Op::Sleep { .. })) {
            out[t.cpu as usize].push(i);
        }
    }
    out
}

/// `n_cpus` CPUs on two nodes, a private L1 each, an L2 per pair: integer latencies, so
/// threads' clocks often tie.
fn machine(n_cpus: usize) -> MachineConfig {
    let node = NodeConfig {
        memory_bytes: 64 << 20,
        local_line_cycles: 100.0,
        remote_line_cycles: 160.0,
        service_line_cycles: 4.0,
    };
    MachineConfig {
        line_size: 64,
        page_size: 4096,
        levels: vec![
            LevelConfig {
                name: "L1".into(),
                sets: 16,
                ways: 2,
                inclusion: Inclusion::Inclusive,
                hit_cycles: 2.0,
                instance_of: (0..n_cpus as u32).collect(),
            },
            LevelConfig {
                name: "L2".into(),
                sets: 64,
                ways: 4,
                inclusion: Inclusion::NonInclusive,
                hit_cycles: 12.0,
                instance_of: (0..n_cpus as u32).map(|c| c / 2).collect(),
            },
        ],
        cpu_node: (0..n_cpus as u32).map(|c| c % 2).collect(),
        nodes: vec![node.clone(), node],
        same_group_c2c_cycles: 40.0,
        cross_group_c2c_cycles: 80.0,
        cross_group_clean_from_dram: false,
        migration_cycles: 0.0,
    }
}

/// The random driver: the engine, its objects, and the draws.
struct Driver {
    e: Engine,
    rng: Rng,
    objects: Vec<u32>,
    n_cpus: u64,
    max_threads: usize,
}

const OBJECT_BYTES: u64 = 64 << 10;

impl Driver {
    fn new(n_cpus: usize, max_threads: usize, seed: u64) -> Self {
        let mut e = Engine::new(machine(n_cpus), seed).unwrap();
        let objects = [
            Placement::FirstTouch,
            Placement::Node(1),
            Placement::Interleave,
        ]
        .into_iter()
        .map(|p| e.add_object(OBJECT_BYTES, p).unwrap())
        .collect();
        Driver {
            e,
            rng: Rng::new(seed),
            objects,
            n_cpus: n_cpus as u64,
            max_threads,
        }
    }

    /// A small whole number of cycles: equal clocks are common.
    fn cycles(&mut self) -> f64 {
        [0.0, 0.0, 1.0, 2.0, 5.0, 64.0, 300.0][self.rng.below(7) as usize]
    }

    fn cpu(&mut self) -> u32 {
        self.rng.below(self.n_cpus) as u32
    }

    fn op(&mut self, tid: usize) -> Op {
        match self.rng.below(10) {
            0..=4 => {
                let obj = self.objects[self.rng.below(self.objects.len() as u64) as usize];
                let offset = self.rng.below(OBJECT_BYTES);
                let len = 1 + self.rng.below((OBJECT_BYTES - offset).min(3 * 4096));
                let kind = [AccessKind::Read, AccessKind::NonTemporal, AccessKind::Write]
                    [self.rng.below(3) as usize];
                let compute_per_byte = [0.0, 0.0, 0.25][self.rng.below(3) as usize];
                Op::Access {
                    obj,
                    offset,
                    len,
                    kind,
                    compute_per_byte,
                }
            }
            5 | 6 => Op::Compute {
                cycles: self.cycles(),
            },
            7 => Op::Migrate {
                cpu: self.cpu(),
                cycles: self.cycles(),
            },
            _ => {
                // into the past, now, or ahead of the thread's clock
                let time = self.e.thread_time(tid).unwrap();
                let ahead = self.rng.below(2000) as f64 - 200.0;
                Op::Sleep {
                    until: (time + ahead).max(0.0),
                }
            }
        }
    }

    fn feed(&mut self, tid: usize) {
        for _ in 0..1 + self.rng.below(4) {
            let op = self.op(tid);
            self.e.push(tid, op).unwrap();
        }
    }

    fn any_thread(&mut self) -> Option<usize> {
        let n = self.e.n_threads() as u64;
        (n > 0).then(|| self.rng.below(n) as usize)
    }

    fn add_thread(&mut self) {
        let now = self.e.now();
        let base = if now.is_finite() { now } else { 0.0 };
        let cpu = self.cpu();
        let start = base + self.cycles();
        self.e.add_thread(cpu, start).unwrap();
    }

    /// What the driver (Python) may do between runs.
    fn between_runs(&mut self) {
        match self.rng.below(100) {
            0..=2 if self.e.n_threads() < self.max_threads => self.add_thread(),
            3 if self.rng.below(4) == 0 => {
                if let Some(t) = self.any_thread() {
                    self.e.retire(t).unwrap();
                }
            }
            4..=7 => {
                if let Some(t) = self.any_thread() {
                    let op = self.op(t);
                    self.e.push(t, op).unwrap();
                }
            }
            8 | 9 => {
                if let Some(t) = self.any_thread() {
                    let (cpu, cycles) = (self.cpu(), self.cycles());
                    self.e.move_thread(t, cpu, cycles).unwrap();
                }
            }
            _ => {}
        }
    }

    /// Compare the index with the scan before each of `steps` turns of the scheduler.
    fn drive(&mut self, steps: usize) -> [usize; 4] {
        let mut seen = [0usize; 4]; // feed, step, deadline, idle
        for _ in 0..self.max_threads / 2 {
            self.add_thread();
        }
        for turn in 0..steps {
            self.between_runs();
            let want = scan(&self.e);
            assert_eq!(self.e.sched.choice(), want, "turn {turn}");
            if turn % 64 == 0 {
                let by_scan = runnable_by_scan(&self.e);
                for (cpu, tids) in by_scan.iter().enumerate() {
                    assert_eq!(self.e.runnable_on(cpu as u32), *tids, "turn {turn}");
                }
                let counts: Vec<u32> = by_scan.iter().map(|t| t.len() as u32).collect();
                assert_eq!(self.e.runnable_per_cpu(), counts, "turn {turn}");
            }
            let deadline = match (want, self.rng.below(20)) {
                // sometimes exactly at the next start: a deadline at a start stops
                (Choice::Step(_, start), 0) => start,
                (Choice::Step(_, start), 1) => start + 1.0,
                _ => f64::INFINITY,
            };
            match self.e.run_once(deadline).unwrap() {
                None => seen[1] += 1,
                Some(Stop::NeedOps(t)) => {
                    seen[0] += 1;
                    if self.rng.below(200) == 0 {
                        self.e.retire(t).unwrap();
                    } else {
                        self.feed(t);
                    }
                }
                Some(Stop::Deadline) => seen[2] += 1,
                Some(Stop::Idle) => {
                    seen[3] += 1;
                    self.add_thread();
                }
            }
        }
        seen
    }
}

#[test]
fn the_index_makes_the_scans_choice_at_every_turn() {
    // (CPUs, most threads): one CPU crowded, a few CPUs, more CPUs than a power of two
    for (n_cpus, max_threads, seed) in [(1, 12, 1), (4, 24, 2), (5, 40, 3), (16, 60, 4)] {
        let mut d = Driver::new(n_cpus, max_threads, seed);
        let seen = d.drive(40_000);
        // every kind of turn happened, steps most often
        assert!(seen.iter().all(|&n| n > 0), "{n_cpus} CPUs: {seen:?}");
        assert!(seen[1] > 20_000, "{n_cpus} CPUs: {seen:?}");
    }
}

#[test]
fn nan_and_negative_times_are_refused() {
    let mut e = Engine::new(machine(2), 1).unwrap();
    assert!(e.add_thread(0, f64::NAN).is_err());
    assert!(e.add_thread(0, f64::INFINITY).is_err());
    let t = e.add_thread(0, 0.0).unwrap();
    assert!(e.push(t, Op::Compute { cycles: f64::NAN }).is_err());
    assert!(e.push(t, Op::Compute { cycles: -1.0 }).is_err());
    assert!(e.push(t, Op::Sleep { until: f64::NAN }).is_err());
    assert!(e
        .push(
            t,
            Op::Migrate {
                cpu: 1,
                cycles: -2.0
            }
        )
        .is_err());
    assert!(e.move_thread(t, 1, f64::NAN).is_err());
    // nothing refused was queued: the thread still needs operations
    assert_eq!(e.run(f64::INFINITY).unwrap(), Stop::NeedOps(t));
}
