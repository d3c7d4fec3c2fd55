//! Thin PyO3 binding of `unicache-sim-core`: module `unicache_sim._native`.
//!
//! Wrapper types carry a `Py` prefix in Rust and the natural name in Python.

mod error;
mod trace;

use std::time::Instant;
use pyo3::prelude::*;
use unicache_sim_core as core;
use unicache_sim_core::{
    AccessKind, Engine, Inclusion, LevelConfig, MachineConfig, NodeConfig, Op, Placement, Stop,
};

use crate::error::{config_err, simulator_error, ToPyResult};
use crate::trace::PyTrace;

#[global_allocator]
static ALLOCATOR: core::hugealloc::HugeAlloc = core::hugealloc::HugeAlloc;

fn parse_kind(py: Python<'_>, kind: &str) -> PyResult<AccessKind> {
    match kind {
        "read" => Ok(AccessKind::Read),
        "nt" => Ok(AccessKind::NonTemporal),
        "write" => Ok(AccessKind::Write),
        other => Err(config_err(
            py,
            format!("unknown access kind {other:?} (read, nt, write)"),
        )),
    }
}

/// Per-thread accounting, in cycles except the counts.
#[pyclass(module = "unicache_sim._native", name = "ThreadStats", frozen)]
#[derive(Clone)]
pub struct PyThreadStats {
    #[pyo3(get)]
    bytes: u64,
    #[pyo3(get)]
    lines: u64,
    #[pyo3(get)]
    dram_lines: u64,
    #[pyo3(get)]
    c2c_lines: u64,
    #[pyo3(get)]
    llc_lines: u64,
    #[pyo3(get)]
    compute_cycles: f64,
    #[pyo3(get)]
    stall_cycles: f64,
    #[pyo3(get)]
    migration_cycles: f64,
    #[pyo3(get)]
    wait_cycles: f64,
    #[pyo3(get)]
    migrations: u64,
}

/// Memory-system counters since the last reset.
#[pyclass(module = "unicache_sim._native", name = "Counters", frozen)]
pub struct PyCounters {
    /// Lines served per source: one per level, then same-group, cross-group, local DRAM,
    /// remote DRAM.
    #[pyo3(get)]
    served: Vec<u64>,
    /// Lines read from each node's DRAM.
    #[pyo3(get)]
    dram_lines: Vec<u64>,
    /// Cycles spent waiting in DRAM queues (all requests).
    #[pyo3(get)]
    dram_queue_cycles: f64,
}

/// The simulator: a machine, its page allocator, and threads.
///
/// Sendable: an engine may be made on one Python thread and used or dropped on another.
/// Its long calls (`run`, `run_trace`) release the GIL, so engines on several Python
/// threads simulate at once, one per host core.
#[pyclass(module = "unicache_sim._native", name = "Engine")]
pub struct PyEngine {
    inner: Engine,
}

type LevelTuple = (String, u32, u32, String, f64, Vec<u32>);
type NodeTuple = (u64, f64, f64, f64);

#[pymethods]
impl PyEngine {
    /// Build a cold machine.
    ///
    /// `levels`: (name, sets, ways, inclusion, hit_cycles, instance_of_cpu) from L1 down;
    /// `nodes`: (memory_bytes, local_line_cycles, remote_line_cycles, service_line_cycles).
    #[new]
    #[pyo3(signature = (line_size, page_size, levels, cpu_node, nodes, same_group_c2c_cycles,
                        cross_group_c2c_cycles, migration_cycles, seed=1,
                        cross_group_clean_from_dram=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        line_size: u32,
        page_size: u32,
        levels: Vec<LevelTuple>,
        cpu_node: Vec<u32>,
        nodes: Vec<NodeTuple>,
        same_group_c2c_cycles: f64,
        cross_group_c2c_cycles: f64,
        migration_cycles: f64,
        seed: u64,
        cross_group_clean_from_dram: bool,
    ) -> PyResult<Self> {
        let mut lv = Vec::new();
        for (name, sets, ways, inclusion, hit_cycles, instance_of) in levels {
            let inclusion = ToPyResult(Inclusion::parse(&inclusion)).into_py(py)?;
            lv.push(LevelConfig {
                name,
                sets,
                ways,
                inclusion,
                hit_cycles,
                instance_of,
            });
        }
        let nodes = nodes
            .into_iter()
            .map(|(memory_bytes, local, remote, service)| NodeConfig {
                memory_bytes,
                local_line_cycles: local,
                remote_line_cycles: remote,
                service_line_cycles: service,
            })
            .collect();
        let cfg = MachineConfig {
            line_size,
            page_size,
            levels: lv,
            cpu_node,
            nodes,
            same_group_c2c_cycles,
            cross_group_c2c_cycles,
            cross_group_clean_from_dram,
            migration_cycles,
        };
        let inner = ToPyResult(Engine::new(cfg, seed)).into_py(py)?;
        Ok(PyEngine { inner })
    }

    /// Number of CPUs of the machine.
    #[getter]
    fn n_cpus(&self) -> usize {
        self.inner.machine().config().n_cpus()
    }

    /// Names of the served-line sources, in `Counters.served` order.
    fn source_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner
            .machine()
            .config()
            .levels
            .iter()
            .map(|l| l.name.clone())
            .collect();
        v.extend(["same_group", "cross_group", "dram_local", "dram_remote"].map(String::from));
        v
    }

    /// Create an object (file or region) of `size` bytes; returns its id.
    /// `placement`: "first_touch", "node", "interleave" or "colored".
    #[pyo3(signature = (size, placement="first_touch", node=0, n_colors=0, color_mask=0))]
    fn add_object(
        &mut self,
        py: Python<'_>,
        size: u64,
        placement: &str,
        node: u32,
        n_colors: u32,
        color_mask: u64,
    ) -> PyResult<u32> {
        let p = match placement {
            "first_touch" => Placement::FirstTouch,
            "node" => Placement::Node(node),
            "interleave" => Placement::Interleave,
            "colored" => Placement::Colored {
                node,
                n_colors,
                mask: color_mask,
            },
            other => return Err(config_err(py, format!("unknown placement {other:?}"))),
        };
        ToPyResult(self.inner.add_object(size, p)).into_py(py)
    }

    /// Physical frame of page `page` of `obj`, or None before its first touch.
    fn object_frame(&self, py: Python<'_>, obj: u32, page: u64) -> PyResult<Option<u64>> {
        ToPyResult(self.inner.object_frame(obj, page)).into_py(py)
    }

    /// Back page `page` of `obj` now with a frame of `node`: of color `color` (frame mod
    /// `n_colors`) when `n_colors` > 0, else a random frame. Returns the frame.
    #[pyo3(signature = (obj, page, node, n_colors=0, color=0))]
    fn place_page(
        &mut self,
        py: Python<'_>,
        obj: u32,
        page: u64,
        node: u32,
        n_colors: u64,
        color: u64,
    ) -> PyResult<u64> {
        let c = if n_colors > 0 {
            Some((n_colors, color))
        } else {
            None
        };
        ToPyResult(self.inner.place_page(obj, page, node, c)).into_py(py)
    }

    /// (frames in use, total frames) of `node`.
    fn node_frames(&self, py: Python<'_>, node: u32) -> PyResult<(u64, u64)> {
        ToPyResult(self.inner.node_frames(node)).into_py(py)
    }

    /// Release an object's frames.
    fn free_object(&mut self, py: Python<'_>, obj: u32) -> PyResult<()> {
        ToPyResult(self.inner.free_object(obj)).into_py(py)
    }

    /// Add a thread on `cpu`; returns its id.
    #[pyo3(signature = (cpu, start=0.0))]
    fn add_thread(&mut self, py: Python<'_>, cpu: u32, start: f64) -> PyResult<usize> {
        ToPyResult(self.inner.add_thread(cpu, start)).into_py(py)
    }

    /// Never schedule thread `tid` again.
    fn retire(&mut self, py: Python<'_>, tid: usize) -> PyResult<()> {
        ToPyResult(self.inner.retire(tid)).into_py(py)
    }

    /// Queue an access of `length` bytes of `obj` at `offset` ("read", "nt" or "write").
    #[pyo3(signature = (tid, obj, offset, length, kind="read", compute_per_byte=0.0))]
    #[allow(clippy::too_many_arguments)]
    fn push_access(
        &mut self,
        py: Python<'_>,
        tid: usize,
        obj: u32,
        offset: u64,
        length: u64,
        kind: &str,
        compute_per_byte: f64,
    ) -> PyResult<()> {
        let kind = parse_kind(py, kind)?;
        ToPyResult(self.inner.push(
            tid,
            Op::Access {
                obj,
                offset,
                len: length,
                kind,
                compute_per_byte,
            },
        ))
        .into_py(py)
    }

    /// Access `length` bytes of `obj` at `offset` from `cpu` at time `now` outside any
    /// thread (other users of the caches); charged to no thread.
    #[pyo3(signature = (cpu, obj, offset, length, kind="read", now=0.0))]
    #[allow(clippy::too_many_arguments)]
    fn touch(
        &mut self,
        py: Python<'_>,
        cpu: u32,
        obj: u32,
        offset: u64,
        length: u64,
        kind: &str,
        now: f64,
    ) -> PyResult<()> {
        let kind = parse_kind(py, kind)?;
        ToPyResult(self.inner.touch(cpu, obj, offset, length, kind, now)).into_py(py)
    }

    /// Queue pure computation.
    fn push_compute(&mut self, py: Python<'_>, tid: usize, cycles: f64) -> PyResult<()> {
        ToPyResult(self.inner.push(tid, Op::Compute { cycles })).into_py(py)
    }

    /// Queue a migration to `cpu` costing `cycles` (free if already there).
    fn push_migrate(&mut self, py: Python<'_>, tid: usize, cpu: u32, cycles: f64) -> PyResult<()> {
        ToPyResult(self.inner.push(tid, Op::Migrate { cpu, cycles })).into_py(py)
    }

    /// Queue idle time: the thread holds no CPU until time `until` (cycles), then goes on.
    fn push_sleep(&mut self, py: Python<'_>, tid: usize, until: f64) -> PyResult<()> {
        ToPyResult(self.inner.push(tid, Op::Sleep { until })).into_py(py)
    }

    /// Whether thread `tid` is runnable (work queued that is not a sleep).
    fn is_runnable(&self, py: Python<'_>, tid: usize) -> PyResult<bool> {
        ToPyResult(self.inner.is_runnable(tid)).into_py(py)
    }

    /// Per CPU, the number of runnable threads on it.
    fn runnable_per_cpu(&self) -> Vec<u32> {
        self.inner.runnable_per_cpu()
    }

    /// The number of runnable threads on `cpu` (0 for a CPU the machine lacks).
    fn runnable_count(&self, cpu: u32) -> u32 {
        self.inner.runnable_count(cpu)
    }

    /// Of `cpus`, in their order, those with no runnable thread.
    fn idle_among(&self, cpus: Vec<u32>) -> Vec<u32> {
        self.inner.idle_among(&cpus)
    }

    /// (CPU, runnable threads) of every CPU with at least `min` runnable threads, by CPU.
    fn crowded_cpus(&self, min: u32) -> Vec<(u32, u32)> {
        self.inner.crowded_cpus(min)
    }

    /// The runnable threads on `cpu`, by id.
    fn runnable_on(&self, cpu: u32) -> Vec<usize> {
        self.inner.runnable_on(cpu)
    }

    /// Move thread `tid` to `cpu` immediately, charging `cycles`.
    fn move_thread(&mut self, py: Python<'_>, tid: usize, cpu: u32, cycles: f64) -> PyResult<()> {
        ToPyResult(self.inner.move_thread(tid, cpu, cycles)).into_py(py)
    }

    /// Run until a thread needs operations ("need", tid), the deadline is reached
    /// ("deadline", -1) or nothing can run ("idle", -1). Releases the GIL while it runs.
    #[pyo3(signature = (deadline=f64::INFINITY))]
    fn run(&mut self, py: Python<'_>, deadline: f64) -> PyResult<(&'static str, i64)> {
        let inner = &mut self.inner;
        let stop = ToPyResult(py.allow_threads(|| inner.run(deadline))).into_py(py)?;
        Ok(match stop {
            Stop::NeedOps(t) => ("need", t as i64),
            Stop::Deadline => ("deadline", -1),
            Stop::Idle => ("idle", -1),
        })
    }

    /// CPU of thread `tid`.
    fn thread_cpu(&self, py: Python<'_>, tid: usize) -> PyResult<u32> {
        ToPyResult(self.inner.thread_cpu(tid)).into_py(py)
    }

    /// Time of thread `tid` in cycles.
    fn thread_time(&self, py: Python<'_>, tid: usize) -> PyResult<f64> {
        ToPyResult(self.inner.thread_time(tid)).into_py(py)
    }

    /// Accounting of thread `tid`.
    fn thread_stats(&self, py: Python<'_>, tid: usize) -> PyResult<PyThreadStats> {
        let s = ToPyResult(self.inner.thread_stats(tid)).into_py(py)?;
        Ok(PyThreadStats {
            bytes: s.bytes,
            lines: s.lines,
            dram_lines: s.dram_lines,
            c2c_lines: s.c2c_lines,
            llc_lines: s.llc_lines,
            compute_cycles: s.compute_cycles,
            stall_cycles: s.stall_cycles,
            migration_cycles: s.migration_cycles,
            wait_cycles: s.wait_cycles,
            migrations: s.migrations,
        })
    }

    /// Earliest time of any live thread.
    fn now(&self) -> f64 {
        self.inner.now()
    }

    /// Memory-system counters.
    fn counters(&self) -> PyCounters {
        let c = self.inner.counters();
        PyCounters {
            served: c.served.clone(),
            dram_lines: c.dram_lines.clone(),
            dram_queue_cycles: c.dram_queue_cycles,
        }
    }

    /// Zero counters and thread stats (cache contents stay).
    fn reset_stats(&mut self) {
        self.inner.reset_stats();
    }

    /// Empty all caches.
    fn flush(&mut self) {
        self.inner.machine_mut().flush();
    }

    /// Valid lines held by instance `instance` of level `level` (0 = L1).
    fn occupancy(&self, py: Python<'_>, level: usize, instance: usize) -> PyResult<usize> {
        let m = self.inner.machine();
        if level >= m.config().levels.len() {
            return Err(config_err(py, format!("no level {level}")));
        }
        let n = m.config().levels[level]
            .instance_of
            .iter()
            .copied()
            .max()
            .unwrap_or(0) as usize
            + 1;
        if instance >= n {
            return Err(config_err(
                py,
                format!("no instance {instance} of level {level}"),
            ));
        }
        Ok(m.occupancy(level, instance))
    }

    /// Access the line holding byte `offset` of `obj` from `cpu` at time `now`, charged to
    /// no thread; returns (source name, cycles). For the DMC microbenchmarks.
    #[pyo3(signature = (cpu, obj, offset, kind="read", now=0.0))]
    fn access_line(
        &mut self,
        py: Python<'_>,
        cpu: u32,
        obj: u32,
        offset: u64,
        kind: &str,
        now: f64,
    ) -> PyResult<(String, f64)> {
        let kind = parse_kind(py, kind)?;
        let (src, cycles) =
            ToPyResult(self.inner.access_line(cpu, obj, offset, kind, now)).into_py(py)?;
        let names = self.source_names();
        Ok((names[self.inner.machine().source_index(src)].clone(), cycles))
    }

    /// A store by `cpu` takes the lines of `length` bytes of `obj` at `offset` modified:
    /// every copy outside `cpu`'s private levels is dropped. Returns how many lines had one.
    fn invalidate(
        &mut self,
        py: Python<'_>,
        cpu: u32,
        obj: u32,
        offset: u64,
        length: u64,
    ) -> PyResult<u64> {
        ToPyResult(self.inner.invalidate(cpu, obj, offset, length)).into_py(py)
    }

    /// Where the line holding byte `offset` of `obj` is: (CPUs whose private levels hold
    /// it, LLC groups whose caches hold it). DMC's `cllookup` reads this directory.
    fn locate(&mut self, py: Python<'_>, obj: u32, offset: u64) -> PyResult<(Vec<usize>, Vec<usize>)> {
        ToPyResult(self.inner.locate(obj, offset)).into_py(py)
    }

    /// Feed a trace straight into the memory system (no time, no queueing) from `cpu`,
    /// or from the trace's own CPUs if it has them. Returns the wall-clock seconds spent.
    /// Releases the GIL while it runs.
    #[pyo3(signature = (trace, cpu=0, kind="read"))]
    fn run_trace(
        &mut self,
        py: Python<'_>,
        trace: &PyTrace,
        cpu: u32,
        kind: &str,
    ) -> PyResult<f64> {
        let kind = parse_kind(py, kind)?;
        let ncpu = self.n_cpus() as u32;
        if cpu >= ncpu || (!trace.cpus.is_empty() && trace.max_cpu >= ncpu) {
            let msg = format!("trace names a cpu outside 0..{ncpu}");
            return Err(config_err(py, msg));
        }
        let m = self.inner.machine_mut();
        ToPyResult(m.prepare_trace(trace.max_line)).into_py(py)?;
        let (lines, cpus) = (&trace.lines, &trace.cpus);
        Ok(py.allow_threads(|| {
            let t0 = Instant::now();
            if cpus.is_empty() {
                core::trace::run_lines(m, cpu as usize, lines, kind);
            } else {
                core::trace::run_cpu_lines(m, cpus, lines, kind);
            }
            t0.elapsed().as_secs_f64()
        }))
    }
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEngine>()?;
    m.add_class::<PyTrace>()?;
    m.add_class::<PyThreadStats>()?;
    m.add_class::<PyCounters>()?;
    m.add("SimulatorError", simulator_error(m.py())?)?;
    Ok(())
}
