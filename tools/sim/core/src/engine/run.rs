//! Running in simulated time: the scheduler that takes the thread able to start earliest
//! (from the index of `sched`), one step (at most a page) of its first operation, and the
//! accesses of the caches' other users, outside any thread.

use super::sched::Choice;
use super::{Engine, Op};
use crate::error::{Result, SimError};
use crate::machine::{AccessKind, Source};

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

impl Engine {
    /// Run until a thread needs operations or the next start would be at/after `deadline`.
    pub fn run(&mut self, deadline: f64) -> Result<Stop> {
        loop {
            if let Some(stop) = self.run_once(deadline)? {
                return Ok(stop);
            }
        }
    }

    /// One turn of [`Engine::run`]: the scheduler's choice ([`sched`](super::sched)), then
    /// one step of it, or why it stops (`None`: it stepped).
    pub(super) fn run_once(&mut self, deadline: f64) -> Result<Option<Stop>> {
        let (i, start) = match self.sched.choice() {
            Choice::Feed(i) => return Ok(Some(Stop::NeedOps(i))),
            Choice::Idle => return Ok(Some(Stop::Idle)),
            Choice::Step(i, start) => (i, start),
        };
        if start >= deadline {
            return Ok(Some(Stop::Deadline));
        }
        let stepped = self.step(i, start);
        // the thread changed; refiling it also refreshes the CPU it was queued on, the one
        // whose free time the step moved
        self.sched
            .refile(i, &self.threads, &self.retired, &self.cpu_free);
        stepped.map(|()| None)
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
        let mut off = offset;
        let end = offset + len;
        while off < end {
            let span = self.page_span(obj, off, end - off, cpu as usize)?;
            for line in span.first..=span.last {
                let slot = span.slot(line);
                self.machine.access(cpu as usize, line, slot, kind, now);
            }
            off += span.bytes;
        }
        Ok(())
    }

    /// Execute one chunk (at most one page) of thread `i`'s first operation, starting at `start`.
    fn step(&mut self, i: usize, start: f64) -> Result<()> {
        if let Some(Op::Sleep { .. }) = self.threads[i].ops.front() {
            // idle time is neither waiting for the CPU nor using it
            let t = &mut self.threads[i];
            t.time = start;
            t.ops.pop_front();
            return Ok(());
        }
        let wait = start - self.threads[i].time;
        self.threads[i].stats.wait_cycles += wait;
        let op = *self.threads[i]
            .ops
            .front()
            .expect("step on a thread with ops");
        let cpu = self.threads[i].cpu as usize;
        let mut now = start;
        match op {
            Op::Sleep { .. } => unreachable!("handled above"),
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
                let span = self.page_span(obj, offset, len, cpu)?;
                let (first, last, chunk) = (span.first, span.last, span.bytes);
                let mut stall = 0.0;
                let mut dram = 0u64;
                let mut c2c = 0u64;
                let mut inner = 0u64;
                let llc = self.machine.config().levels.len() - 1;
                for line in first..=last {
                    let slot = span.slot(line);
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
}
