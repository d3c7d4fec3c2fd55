//! Threads, memory objects and the scheduler that interleaves them in simulated time.
//!
//! Each thread runs on a CPU and owns a queue of operations (access a byte range of an
//! object, compute, migrate). The engine always advances the thread that can start
//! earliest, one page-sized chunk at a time, so DRAM queues and CPU sharing see requests
//! in (nearly) time order. When a thread's queue is empty the engine hands control back
//! to the driver (Python), which decides the thread's next operations — this is where
//! the policies run.

use std::collections::VecDeque;

use crate::config::MachineConfig;
use crate::error::{Result, SimError};
use crate::machine::{AccessKind, Counters, Machine, Source};
use crate::pages::PageAllocator;

const NO_FRAME: u64 = u64::MAX;

/// Where an object's pages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Node of the first thread that touches the page (Linux's default).
    FirstTouch,
    /// A fixed node.
    Node(u32),
    /// Round-robin over all nodes, page by page.
    Interleave,
    /// A fixed node, only frames of the colors in `mask` (of `n_colors`).
    Colored { node: u32, n_colors: u32, mask: u64 },
}

/// A file or anonymous memory region, backed by physical frames allocated lazily.
#[derive(Debug, Clone)]
struct Object {
    frames: Vec<u64>,
    slots: Vec<u32>,
    size: u64,
    placement: Placement,
}

/// One queued operation.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// Touch `len` bytes of object `obj` from `offset`, spending `compute_per_byte` cycles per byte.
    Access {
        obj: u32,
        offset: u64,
        len: u64,
        kind: AccessKind,
        compute_per_byte: f64,
    },
    /// Pure computation.
    Compute { cycles: f64 },
    /// Move to `cpu`, paying `cycles`.
    Migrate { cpu: u32, cycles: f64 },
}

/// Per-thread accounting (all in cycles except counts).
#[derive(Debug, Clone, Default)]
pub struct ThreadStats {
    /// Bytes accessed.
    pub bytes: u64,
    /// Lines accessed.
    pub lines: u64,
    /// Lines served from DRAM (local or remote).
    pub dram_lines: u64,
    /// Lines served by another cache (same or other group).
    pub c2c_lines: u64,
    /// Lines that reached the last level (missed every level inside it): the thread's LLC
    /// references, as a hardware counter counts them.
    pub llc_lines: u64,
    /// Compute cycles.
    pub compute_cycles: f64,
    /// Memory stall cycles.
    pub stall_cycles: f64,
    /// Migration cycles.
    pub migration_cycles: f64,
    /// Cycles spent runnable but waiting for the CPU.
    pub wait_cycles: f64,
    /// Number of migrations.
    pub migrations: u64,
}

#[derive(Debug, Clone)]
struct Thread {
    cpu: u32,
    time: f64,
    ops: VecDeque<Op>,
    stats: ThreadStats,
}

/// Why [`Engine::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// Thread `tid` has no operation left: the driver must give it more (or retire it).
    NeedOps(usize),
    /// The earliest runnable thread would start at or after the deadline.
    Deadline,
    /// No thread exists, or every thread is retired.
    Idle,
}

/// The simulator: machine + page allocator + threads.
pub struct Engine {
    machine: Machine,
    pages: PageAllocator,
    objects: Vec<Object>,
    threads: Vec<Thread>,
    retired: Vec<bool>,
    cpu_free: Vec<f64>,
    line_shift: u32,
    interleave_next: u32,
}

impl Engine {
    /// New engine over a cold machine; `seed` drives page placement.
    pub fn new(cfg: MachineConfig, seed: u64) -> Result<Self> {
        let node_bytes: Vec<u64> = cfg.nodes.iter().map(|n| n.memory_bytes).collect();
        let page = cfg.page_size as u64;
        let line_shift = cfg.line_size.trailing_zeros();
        let ncpu = cfg.n_cpus();
        let machine = Machine::new(cfg)?;
        Ok(Engine {
            machine,
            pages: PageAllocator::new(&node_bytes, page, seed),
            objects: Vec::new(),
            threads: Vec::new(),
            retired: Vec::new(),
            cpu_free: vec![0.0; ncpu],
            line_shift,
            interleave_next: 0,
        })
    }

    /// The memory system.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Mutable memory system (for trace-driven use).
    pub fn machine_mut(&mut self) -> &mut Machine {
        &mut self.machine
    }

    /// Create an object of `size` bytes; frames are allocated on first touch.
    pub fn add_object(&mut self, size: u64, placement: Placement) -> Result<u32> {
        let nodes = self.machine.config().nodes.len() as u32;
        match placement {
            Placement::Node(n) | Placement::Colored { node: n, .. } if n >= nodes => {
                return Err(SimError::NotFound("NUMA node", n as u64));
            }
            Placement::Colored { n_colors: 0, .. } | Placement::Colored { mask: 0, .. } => {
                return Err(SimError::Config(
                    "a colored object needs a non-empty color set".into(),
                ));
            }
            _ => {}
        }
        let page = self.machine.config().page_size as u64;
        let n = size.div_ceil(page) as usize;
        self.objects.push(Object {
            frames: vec![NO_FRAME; n],
            slots: vec![0; n],
            size,
            placement,
        });
        Ok((self.objects.len() - 1) as u32)
    }

    /// Size in bytes of object `obj`.
    pub fn object_size(&self, obj: u32) -> Result<u64> {
        self.objects
            .get(obj as usize)
            .map(|o| o.size)
            .ok_or(SimError::NotFound("object", obj as u64))
    }

    /// Physical frame of page `page` of `obj`, if allocated.
    pub fn object_frame(&self, obj: u32, page: u64) -> Result<Option<u64>> {
        let o = self
            .objects
            .get(obj as usize)
            .ok_or(SimError::NotFound("object", obj as u64))?;
        let f = *o
            .frames
            .get(page as usize)
            .ok_or(SimError::NotFound("page", page))?;
        Ok(if f == NO_FRAME { None } else { Some(f) })
    }

    /// Back page `page` of `obj` now with a frame of `node`, of color `color` of `n_colors`
    /// when given (the caller's page-coloring policy decides it), else a random frame.
    /// Returns the frame. The page must not have a frame yet.
    pub fn place_page(
        &mut self,
        obj: u32,
        page: u64,
        node: u32,
        color: Option<(u64, u64)>,
    ) -> Result<u64> {
        let o = self
            .objects
            .get(obj as usize)
            .ok_or(SimError::NotFound("object", obj as u64))?;
        let f = *o
            .frames
            .get(page as usize)
            .ok_or(SimError::NotFound("page", page))?;
        if f != NO_FRAME {
            return Err(SimError::Config(format!(
                "page {page} of object {obj} already has frame {f}"
            )));
        }
        if node as usize >= self.machine.config().nodes.len() {
            return Err(SimError::NotFound("NUMA node", node as u64));
        }
        let f = match color {
            Some((n, c)) => self.pages.alloc_color(node as usize, n, c)?,
            None => self.pages.alloc(node as usize, None)?,
        };
        let slot = self.machine.register_page(f)?;
        self.objects[obj as usize].frames[page as usize] = f;
        self.objects[obj as usize].slots[page as usize] = slot;
        Ok(f)
    }

    /// Frames in use and total frames of `node`.
    pub fn node_frames(&self, node: u32) -> Result<(u64, u64)> {
        let n = node as usize;
        if n >= self.machine.config().nodes.len() {
            return Err(SimError::NotFound("NUMA node", node as u64));
        }
        Ok((self.pages.used_on(n), self.pages.frames_of(n)))
    }

    /// Release an object's frames.
    pub fn free_object(&mut self, obj: u32) -> Result<()> {
        let o = self
            .objects
            .get_mut(obj as usize)
            .ok_or(SimError::NotFound("object", obj as u64))?;
        for f in o.frames.iter_mut() {
            if *f != NO_FRAME {
                self.pages.free(*f);
                *f = NO_FRAME;
            }
        }
        Ok(())
    }

    /// Add a thread on `cpu` at time `start`.
    pub fn add_thread(&mut self, cpu: u32, start: f64) -> Result<usize> {
        self.check_cpu(cpu)?;
        self.threads.push(Thread {
            cpu,
            time: start,
            ops: VecDeque::new(),
            stats: ThreadStats::default(),
        });
        self.retired.push(false);
        Ok(self.threads.len() - 1)
    }

    /// Stop scheduling thread `tid` (it never asks for operations again).
    pub fn retire(&mut self, tid: usize) -> Result<()> {
        self.thread(tid)?;
        self.retired[tid] = true;
        Ok(())
    }

    /// Access `len` bytes of object `obj` from `offset` on `cpu` at time `now`, outside any
    /// thread: the other users of the caches (kernel, other processes) whose lines compete
    /// with the threads'. Pages are placed as for a thread on `cpu`. Counted in the
    /// machine's counters (and DRAM queues), charged to no thread.
    pub fn touch(
        &mut self,
        cpu: u32,
        obj: u32,
        offset: u64,
        len: u64,
        kind: AccessKind,
        now: f64,
    ) -> Result<()> {
        self.check_cpu(cpu)?;
        let size = self.object_size(obj)?;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(SimError::Config(format!(
                "touch [{offset}, +{len}) is outside object {obj} of {size} bytes"
            )));
        }
        let page = self.machine.config().page_size as u64;
        let mut off = offset;
        let end = offset + len;
        while off < end {
            let pidx = off / page;
            let in_page = off % page;
            let chunk = (page - in_page).min(end - off);
            let (frame, slot0) = self.frame_for(obj, pidx, cpu as usize)?;
            let page_first = (frame * page) >> self.line_shift;
            let first = (frame * page + in_page) >> self.line_shift;
            let last = (frame * page + in_page + chunk - 1) >> self.line_shift;
            for line in first..=last {
                let slot = slot0 + (line - page_first) as u32;
                self.machine.access(cpu as usize, line, slot, kind, now);
            }
            off += chunk;
        }
        Ok(())
    }

    fn check_cpu(&self, cpu: u32) -> Result<()> {
        if cpu as usize >= self.cpu_free.len() {
            return Err(SimError::NotFound("cpu", cpu as u64));
        }
        Ok(())
    }

    fn thread(&self, tid: usize) -> Result<&Thread> {
        self.threads
            .get(tid)
            .ok_or(SimError::NotFound("thread", tid as u64))
    }

    /// Queue an operation for thread `tid`.
    pub fn push(&mut self, tid: usize, op: Op) -> Result<()> {
        match op {
            Op::Access {
                obj, offset, len, ..
            } => {
                let size = self.object_size(obj)?;
                if offset.checked_add(len).is_none_or(|end| end > size) {
                    return Err(SimError::Config(format!(
                        "access [{offset}, +{len}) is outside object {obj} of {size} bytes"
                    )));
                }
            }
            Op::Migrate { cpu, .. } => self.check_cpu(cpu)?,
            Op::Compute { .. } => {}
        }
        self.thread(tid)?;
        self.threads[tid].ops.push_back(op);
        Ok(())
    }

    /// Move thread `tid` to `cpu` now, charging `cycles` (used when a vCPU is re-placed).
    pub fn move_thread(&mut self, tid: usize, cpu: u32, cycles: f64) -> Result<()> {
        self.check_cpu(cpu)?;
        self.thread(tid)?;
        let t = &mut self.threads[tid];
        if t.cpu != cpu {
            t.cpu = cpu;
            t.time += cycles;
            t.stats.migration_cycles += cycles;
            t.stats.migrations += 1;
        }
        Ok(())
    }

    /// CPU of thread `tid`.
    pub fn thread_cpu(&self, tid: usize) -> Result<u32> {
        Ok(self.thread(tid)?.cpu)
    }

    /// Current time (cycles) of thread `tid`.
    pub fn thread_time(&self, tid: usize) -> Result<f64> {
        Ok(self.thread(tid)?.time)
    }

    /// Accounting of thread `tid`.
    pub fn thread_stats(&self, tid: usize) -> Result<ThreadStats> {
        Ok(self.thread(tid)?.stats.clone())
    }

    /// Number of threads.
    pub fn n_threads(&self) -> usize {
        self.threads.len()
    }

    /// Earliest time of any live thread (the simulation's "now").
    pub fn now(&self) -> f64 {
        self.threads
            .iter()
            .zip(&self.retired)
            .filter(|(_, &r)| !r)
            .map(|(t, _)| t.time)
            .fold(f64::INFINITY, f64::min)
    }

    /// Memory-system counters.
    pub fn counters(&self) -> &Counters {
        self.machine.counters()
    }

    /// Zero memory-system counters and per-thread stats (after a warm-up).
    pub fn reset_stats(&mut self) {
        self.machine.reset_counters();
        for t in &mut self.threads {
            t.stats = ThreadStats::default();
        }
    }

    /// Run until a thread needs operations or the next start would be at/after `deadline`.
    pub fn run(&mut self, deadline: f64) -> Result<Stop> {
        loop {
            let mut need: Option<(usize, f64)> = None;
            let mut best: Option<(usize, f64)> = None;
            for (i, t) in self.threads.iter().enumerate() {
                if self.retired[i] {
                    continue;
                }
                if t.ops.is_empty() {
                    if need.is_none_or(|(_, tt)| t.time < tt) {
                        need = Some((i, t.time));
                    }
                    continue;
                }
                let free = self.cpu_free[t.cpu as usize];
                let start = if free > t.time { free } else { t.time };
                // equal starts (threads queued on one CPU): the one that has waited longest
                // goes first, so a CPU's threads take turns page by page
                if best
                    .is_none_or(|(b, s)| start < s || (start == s && t.time < self.threads[b].time))
                {
                    best = Some((i, start));
                }
            }
            if let Some((i, _)) = need {
                return Ok(Stop::NeedOps(i));
            }
            let Some((i, start)) = best else {
                return Ok(Stop::Idle);
            };
            if start >= deadline {
                return Ok(Stop::Deadline);
            }
            self.step(i, start)?;
        }
    }

    /// Execute one chunk (at most one page) of thread `i`'s first operation, starting at `start`.
    fn step(&mut self, i: usize, start: f64) -> Result<()> {
        let wait = start - self.threads[i].time;
        self.threads[i].stats.wait_cycles += wait;
        let op = *self.threads[i]
            .ops
            .front()
            .expect("step on a thread with ops");
        let cpu = self.threads[i].cpu as usize;
        let mut now = start;
        match op {
            Op::Compute { cycles } => {
                now += cycles;
                self.threads[i].stats.compute_cycles += cycles;
                self.threads[i].ops.pop_front();
            }
            Op::Migrate { cpu: to, cycles } => {
                let t = &mut self.threads[i];
                if t.cpu != to {
                    t.cpu = to;
                    now += cycles;
                    t.stats.migration_cycles += cycles;
                    t.stats.migrations += 1;
                }
                t.ops.pop_front();
                // The migration ran on the old CPU; the new CPU is charged from its own clock.
                self.cpu_free[cpu] = now;
                self.threads[i].time = now;
                return Ok(());
            }
            Op::Access {
                obj,
                offset,
                len,
                kind,
                compute_per_byte,
            } => {
                let page = self.machine.config().page_size as u64;
                let pidx = offset / page;
                let in_page = offset % page;
                let chunk = (page - in_page).min(len);
                let (frame, slot0) = self.frame_for(obj, pidx, cpu)?;
                let first = (frame * page + in_page) >> self.line_shift;
                let last = (frame * page + in_page + chunk - 1) >> self.line_shift;
                let page_first = (frame * page) >> self.line_shift;
                let mut stall = 0.0;
                let mut dram = 0u64;
                let mut c2c = 0u64;
                let mut inner = 0u64;
                let llc = self.machine.config().levels.len() - 1;
                for line in first..=last {
                    let slot = slot0 + (line - page_first) as u32;
                    let (src, c) = self.machine.access(cpu, line, slot, kind, now + stall);
                    stall += c;
                    match src {
                        Source::DramLocal | Source::DramRemote => dram += 1,
                        Source::SameGroup | Source::CrossGroup => c2c += 1,
                        Source::Level(l) if l < llc => inner += 1,
                        Source::Level(_) => {}
                    }
                }
                let compute = compute_per_byte * chunk as f64;
                now += stall + compute;
                let st = &mut self.threads[i].stats;
                st.bytes += chunk;
                st.lines += last - first + 1;
                st.dram_lines += dram;
                st.c2c_lines += c2c;
                st.llc_lines += last - first + 1 - inner;
                st.stall_cycles += stall;
                st.compute_cycles += compute;
                let t = &mut self.threads[i];
                if chunk == len {
                    t.ops.pop_front();
                } else if let Some(Op::Access { offset, len, .. }) = t.ops.front_mut() {
                    *offset += chunk;
                    *len -= chunk;
                }
            }
        }
        self.threads[i].time = now;
        self.cpu_free[cpu] = now;
        Ok(())
    }

    fn frame_for(&mut self, obj: u32, pidx: u64, cpu: usize) -> Result<(u64, u32)> {
        let o = &self.objects[obj as usize];
        let f = o.frames[pidx as usize];
        if f != NO_FRAME {
            return Ok((f, o.slots[pidx as usize]));
        }
        let nodes = self.machine.config().nodes.len() as u32;
        let (node, colors) = match o.placement {
            Placement::FirstTouch => (self.machine.config().cpu_node[cpu], None),
            Placement::Node(n) => (n, None),
            Placement::Interleave => {
                let n = self.interleave_next % nodes;
                self.interleave_next = self.interleave_next.wrapping_add(1);
                (n, None)
            }
            Placement::Colored {
                node,
                n_colors,
                mask,
            } => (node, Some((n_colors as u64, mask))),
        };
        let f = self.pages.alloc(node as usize, colors)?;
        let slot = self.machine.register_page(f)?;
        self.objects[obj as usize].frames[pidx as usize] = f;
        self.objects[obj as usize].slots[pidx as usize] = slot;
        Ok((f, slot))
    }
}
