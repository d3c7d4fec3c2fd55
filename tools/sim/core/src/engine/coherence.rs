//! One line at a time, outside any thread, for the DMC microbenchmarks and lookups: an
//! access that returns where the line came from and its cost, a store's invalidation of
//! the other copies, and where a line is (`cllookup`).

use super::Engine;
use crate::error::{Result, SimError};
use crate::machine::{AccessKind, Source};

impl Engine {
    /// The physical line and slot of byte `offset` of `obj`, its page placed for an access
    /// from `cpu` if it has no frame yet.
    fn line_at(&mut self, obj: u32, offset: u64, cpu: usize) -> Result<(u64, u32)> {
        let size = self.object_size(obj)?;
        if offset >= size {
            return Err(SimError::Config(format!(
                "offset {offset} is outside object {obj} of {size} bytes"
            )));
        }
        let span = self.page_span(obj, offset, 1, cpu)?;
        Ok((span.first, span.first_slot))
    }

    /// Access the line holding byte `offset` of `obj` from `cpu` at time `now`, charged to
    /// no thread; returns where it was served from and its cost in cycles.
    pub fn access_line(
        &mut self,
        cpu: u32,
        obj: u32,
        offset: u64,
        kind: AccessKind,
        now: f64,
    ) -> Result<(Source, f64)> {
        self.check_cpu(cpu)?;
        let (phys, slot) = self.line_at(obj, offset, cpu as usize)?;
        Ok(self.machine.access(cpu as usize, phys, slot, kind, now))
    }

    /// A store by `cpu` to `len` bytes of `obj` from `offset` takes its lines modified:
    /// every copy outside `cpu`'s private levels is dropped. Returns how many lines had
    /// such copies (each an invalidation the store waited for).
    pub fn invalidate(&mut self, cpu: u32, obj: u32, offset: u64, len: u64) -> Result<u64> {
        self.check_cpu(cpu)?;
        let line = 1u64 << self.line_shift;
        let mut invalidated = 0;
        let mut off = offset - offset % line;
        while off < offset + len {
            let (phys, slot) = self.line_at(obj, off, cpu as usize)?;
            if self.machine.invalidate_others(cpu as usize, phys, slot) > 0 {
                invalidated += 1;
            }
            off += line;
        }
        Ok(invalidated)
    }

    /// Where the line holding byte `offset` of `obj` is: the CPUs whose private levels hold
    /// it and the LLC groups whose caches hold it (both empty if its page has no frame).
    pub fn locate(&mut self, obj: u32, offset: u64) -> Result<(Vec<usize>, Vec<usize>)> {
        let page = self.machine.config().page_size as u64;
        if self.object_frame(obj, offset / page)?.is_none() {
            return Ok((Vec::new(), Vec::new()));
        }
        let (phys, slot) = self.line_at(obj, offset, 0)?;
        Ok(self.machine.locate(phys, slot))
    }
}
