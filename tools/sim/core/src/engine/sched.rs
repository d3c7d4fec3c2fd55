//! The scheduler's index: which thread [`Engine::run`](super::Engine::run) takes next,
//! found without scanning every thread.
//!
//! The choice is exactly the one of a scan over all threads in id order (kept as the
//! reference the tests compare with at every step):
//!
//! 1. a thread with no operation left: the one with the lowest clock, ties to the lowest
//!    id — the driver must feed it before anything runs;
//! 2. else the thread that can start earliest: a sleeper when its time comes
//!    (`max(until, clock)`), any other when its CPU is free (`max(cpu_free, clock)`); ties
//!    to the lower clock (the thread that has waited longest), then the lower id.
//!
//! The index keeps each live thread in one place, by the class its first operation gives it:
//! a set of threads without operations keyed by (clock, id); a set of sleepers keyed by
//! (start, clock, id), which no other thread's progress changes; and per CPU the threads
//! queued on it. On one CPU every queued thread starts at `max(cpu_free, clock)`, monotone
//! in its clock, so the CPU's best is its thread of least (clock, id), and a tournament
//! tree over the CPUs keeps their best (start, clock, id). A step changes one thread and
//! one CPU's free time: one re-filing, one CPU's queue (a few threads) and a path of the
//! tree, instead of every thread.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::threads::{Op, Thread};

/// A clock value as a key. Threads' clocks are never NaN (the engine refuses NaN and
/// negative costs), so the order is total; -0.0 and 0.0 compare equal, as in the scan.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cycles(f64);

impl Eq for Cycles {}

impl PartialOrd for Cycles {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Cycles {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .partial_cmp(&other.0)
            .expect("a thread's clock is never NaN")
    }
}

/// Where the index files one thread, with the key it was filed under.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Filed {
    /// Retired (or not filed yet): never chosen.
    Out,
    /// No operation left; its clock.
    Empty(f64),
    /// First operation a sleep; its start and clock.
    Asleep(f64, f64),
    /// Anything else: queued on this CPU.
    Queued(u32),
}

/// A thread able to start: when, its clock, its id.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Candidate {
    start: f64,
    time: f64,
    tid: usize,
}

impl Candidate {
    /// No thread (after every real one: a real thread with infinite times has a lower id).
    const NONE: Candidate = Candidate {
        start: f64::INFINITY,
        time: f64::INFINITY,
        tid: usize::MAX,
    };

    /// Whether `self` goes before `other`: earlier start, then lower clock, then lower id.
    fn before(&self, other: &Candidate) -> bool {
        self.start < other.start
            || (self.start == other.start
                && (self.time < other.time || (self.time == other.time && self.tid < other.tid)))
    }
}

/// What the scheduler does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Choice {
    /// This thread has no operation left.
    Feed(usize),
    /// Step this thread, starting at this time.
    Step(usize, f64),
    /// No live thread.
    Idle,
}

/// The index (module docstring).
#[derive(Debug, Clone)]
pub(super) struct Schedule {
    filed: Vec<Filed>,
    empty: BTreeSet<(Cycles, usize)>,
    asleep: BTreeSet<(Cycles, Cycles, usize)>,
    queued: Vec<Vec<usize>>,
    /// Tournament tree over the CPUs: leaf `width + cpu` is the CPU's best, node `k` the
    /// better of `2k` and `2k + 1`; node 1 is the best of all.
    tree: Vec<Candidate>,
    width: usize,
}

/// Where thread `t` belongs.
fn class_of(t: &Thread, retired: bool) -> Filed {
    if retired {
        return Filed::Out;
    }
    match t.ops.front() {
        None => Filed::Empty(t.time),
        // a sleeping thread waits for its time, not for its CPU
        Some(Op::Sleep { until }) => {
            Filed::Asleep(if *until > t.time { *until } else { t.time }, t.time)
        }
        Some(_) => Filed::Queued(t.cpu),
    }
}

impl Schedule {
    /// An empty index over `n_cpus` CPUs.
    pub(super) fn new(n_cpus: usize) -> Self {
        let width = n_cpus.max(1).next_power_of_two();
        Schedule {
            filed: Vec::new(),
            empty: BTreeSet::new(),
            asleep: BTreeSet::new(),
            queued: vec![Vec::new(); n_cpus],
            tree: vec![Candidate::NONE; 2 * width],
            width,
        }
    }

    /// The next choice (module docstring).
    pub(super) fn choice(&self) -> Choice {
        if let Some(&(_, tid)) = self.empty.first() {
            return Choice::Feed(tid);
        }
        let mut best = self.tree[1];
        if let Some(&(start, time, tid)) = self.asleep.first() {
            let sleeper = Candidate {
                start: start.0,
                time: time.0,
                tid,
            };
            if sleeper.before(&best) {
                best = sleeper;
            }
        }
        if best.tid == usize::MAX {
            Choice::Idle
        } else {
            Choice::Step(best.tid, best.start)
        }
    }

    /// File thread `tid` (new, or changed in any way: ops, clock, CPU, retired) again.
    pub(super) fn refile(
        &mut self,
        tid: usize,
        threads: &[Thread],
        retired: &[bool],
        cpu_free: &[f64],
    ) {
        if tid == self.filed.len() {
            self.filed.push(Filed::Out);
        }
        let old = self.filed[tid];
        let new = class_of(&threads[tid], retired[tid]);
        if old != new {
            match old {
                Filed::Out => {}
                Filed::Empty(time) => {
                    self.empty.remove(&(Cycles(time), tid));
                }
                Filed::Asleep(start, time) => {
                    self.asleep.remove(&(Cycles(start), Cycles(time), tid));
                }
                Filed::Queued(cpu) => {
                    let queue = &mut self.queued[cpu as usize];
                    let at = queue.iter().position(|&t| t == tid).expect("queued");
                    queue.swap_remove(at);
                    self.refresh(cpu as usize, threads, cpu_free);
                }
            }
            match new {
                Filed::Out => {}
                Filed::Empty(time) => {
                    self.empty.insert((Cycles(time), tid));
                }
                Filed::Asleep(start, time) => {
                    self.asleep.insert((Cycles(start), Cycles(time), tid));
                }
                Filed::Queued(cpu) => self.queued[cpu as usize].push(tid),
            }
            self.filed[tid] = new;
        }
        if let Filed::Queued(cpu) = new {
            // its clock may have changed
            self.refresh(cpu as usize, threads, cpu_free);
        }
    }

    /// Recompute CPU `cpu`'s best (after its free time or one of its threads changed).
    fn refresh(&mut self, cpu: usize, threads: &[Thread], cpu_free: &[f64]) {
        let mut best: Option<(f64, usize)> = None;
        for &tid in &self.queued[cpu] {
            let time = threads[tid].time;
            if best.is_none_or(|(bt, b)| time < bt || (time == bt && tid < b)) {
                best = Some((time, tid));
            }
        }
        let mut node = self.width + cpu;
        self.tree[node] = match best {
            None => Candidate::NONE,
            Some((time, tid)) => {
                let free = cpu_free[cpu];
                Candidate {
                    start: if free > time { free } else { time },
                    time,
                    tid,
                }
            }
        };
        while node > 1 {
            node /= 2;
            let (l, r) = (self.tree[2 * node], self.tree[2 * node + 1]);
            self.tree[node] = if r.before(&l) { r } else { l };
        }
    }

    /// Whether thread `tid` is queued on a CPU (not retired, first operation not a sleep).
    pub(super) fn is_queued(&self, tid: usize) -> bool {
        matches!(self.filed[tid], Filed::Queued(_))
    }

    /// The threads queued on `cpu`, in no order.
    pub(super) fn queued_on(&self, cpu: usize) -> &[usize] {
        &self.queued[cpu]
    }
}
