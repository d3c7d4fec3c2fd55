//! Which hot path runs, and the entry points into it: the set operations of the running
//! CPU's instruction set (AVX-512, AVX2 or portable, chosen at construction) and, for two
//! three-level shapes, the hot path with the hierarchy fixed at compile time.
//!
//! Every choice gives the same results; `use_paths` and `use_avx2_only` exist for tests
//! and speed comparisons.

use super::view::{Amd, Fixed, FixedShape, Nine, Tables, View};
use super::{AccessKind, At, Machine, SlotMode, Source};
use crate::simd::{has_avx2, has_avx512, Isa, Scalar};
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512};

/// The three-level shapes with a hot path fixed at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// Neither: the hot path reads the machine's tables ([`Tables`]).
    Generic,
    /// [`Amd`]: the opteron-16 model.
    Amd,
    /// [`Nine`]: three non-inclusive levels (the pycachesim comparison).
    Nine,
}

impl Machine {
    /// Whether the hot paths use AVX-512 (chosen at construction from the running CPU).
    pub fn uses_avx512(&self) -> bool {
        self.avx512
    }

    /// Use the portable set operations even on an AVX-512 CPU (both give the same results;
    /// for tests and speed comparisons).
    pub fn force_portable(&mut self) {
        self.avx512 = false;
        self.avx2 = false;
    }

    /// Choose the hot paths: vector set operations (AVX-512, else AVX2, if the CPU has
    /// them) and the hot path fixed for the machine's shape (if it has one of them).
    /// Every choice gives the same results; for tests and speed comparisons.
    pub fn use_paths(&mut self, vector: bool, specialised: bool) {
        self.avx512 = vector && has_avx512();
        self.avx2 = vector && has_avx2();
        self.set_shape(specialised);
    }

    /// Use AVX2 (if the CPU has it) rather than AVX-512 set operations, as on a CPU without
    /// AVX-512; for tests and speed comparisons.
    pub fn use_avx2_only(&mut self) {
        self.avx512 = false;
        self.avx2 = has_avx2();
    }

    /// Whether the hot path fixed for the machine's shape (opteron-16 or three
    /// non-inclusive levels) is in use.
    pub fn uses_specialised_path(&self) -> bool {
        self.shape != Shape::Generic
    }

    /// Use the hot path fixed for this machine's shape, if `specialised` and it has one
    /// of them ([`Machine::shape_of`]); else the one reading the tables.
    pub(super) fn set_shape(&mut self, specialised: bool) {
        self.shape = if specialised {
            self.shape_of()
        } else {
            Shape::Generic
        };
        if self.shape != Shape::Generic {
            self.mask3 = [0, 1, 2].map(|i| self.cfg.levels[i].sets as u64 - 1);
        }
    }

    /// Which fixed shape this hierarchy has: [`Amd`], [`Nine`] or neither.
    fn shape_of(&self) -> Shape {
        if Amd::fits(self) {
            Shape::Amd
        } else if Nine::fits(self) {
            Shape::Nine
        } else {
            Shape::Generic
        }
    }

    /// Access the line `phys` (slot `slot`) from `cpu` at thread time `now`;
    /// returns where it was served from and the stall cycles.
    #[inline]
    pub fn access(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is set only when the CPU has AVX-512 F and VL.
            return unsafe { self.access_avx512(cpu, phys, slot, kind, now) };
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is set only when the CPU has AVX2.
            return unsafe { self.access_avx2(cpu, phys, slot, kind, now) };
        }
        self.access_i::<Scalar>(cpu, phys, slot, kind, now)
    }

    /// Feed line accesses in order: `(cpus[k], lines[k])`, or every line from `cpu` when
    /// `cpus` is empty; each line is its own slot (raw traces). Time does not advance.
    pub fn run_lines(&mut self, cpu: usize, cpus: &[u32], lines: &[u64], kind: AccessKind) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is set only when the CPU has AVX-512 F and VL.
            unsafe { self.run_lines_avx512(cpu, cpus, lines, kind) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is set only when the CPU has AVX2.
            unsafe { self.run_lines_avx2(cpu, cpus, lines, kind) };
            return;
        }
        self.run_lines_i::<Scalar>(cpu, cpus, lines, kind);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn access_avx512(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        self.access_i::<Avx512>(cpu, phys, slot, kind, now)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn access_avx2(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        self.access_i::<Avx2>(cpu, phys, slot, kind, now)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn run_lines_avx512(
        &mut self,
        cpu: usize,
        cpus: &[u32],
        lines: &[u64],
        kind: AccessKind,
    ) {
        self.run_lines_i::<Avx512>(cpu, cpus, lines, kind);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_lines_avx2(&mut self, cpu: usize, cpus: &[u32], lines: &[u64], kind: AccessKind) {
        self.run_lines_i::<Avx2>(cpu, cpus, lines, kind);
    }

    /// One access with the set operations of `I`, on this machine's hot path.
    #[inline(always)]
    fn access_i<I: Isa>(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        match self.shape {
            Shape::Amd => {
                let w = Fixed::<Amd>::of(self, cpu);
                self.access_w::<I, _, false>(w, cpu, phys, slot, kind, now)
            }
            Shape::Nine => {
                let w = Fixed::<Nine>::of(self, cpu);
                self.access_w::<I, _, false>(w, cpu, phys, slot, kind, now)
            }
            Shape::Generic => {
                let w = Tables::of(self, cpu);
                self.access_w::<I, _, false>(w, cpu, phys, slot, kind, now)
            }
        }
    }

    /// [`Machine::run_lines`] with the set operations of `I`.
    #[inline(always)]
    fn run_lines_i<I: Isa>(&mut self, cpu: usize, cpus: &[u32], lines: &[u64], kind: AccessKind) {
        if self.mode != SlotMode::Trace {
            // engine pages: the slot of a line is not its address in general
            if cpus.is_empty() {
                for &l in lines {
                    self.access_i::<I>(cpu, l, l as u32, kind, 0.0);
                }
            } else {
                for (&c, &l) in cpus.iter().zip(lines) {
                    self.access_i::<I>(c as usize, l, l as u32, kind, 0.0);
                }
            }
            return;
        }
        match self.shape {
            Shape::Amd => self.run_trace_w::<I, Fixed<Amd>>(cpu, cpus, lines, kind),
            Shape::Nine => self.run_trace_w::<I, Fixed<Nine>>(cpu, cpus, lines, kind),
            Shape::Generic => self.run_trace_w::<I, Tables>(cpu, cpus, lines, kind),
        }
    }

    /// A raw-trace run (a slot is its line address) through views `V`, made once per CPU.
    #[inline(always)]
    fn run_trace_w<I: Isa, V: View>(
        &mut self,
        cpu: usize,
        cpus: &[u32],
        lines: &[u64],
        kind: AccessKind,
    ) {
        if cpus.is_empty() {
            let w = V::of(self, cpu);
            for &l in lines {
                self.access_w::<I, V, true>(w, cpu, l, l as u32, kind, 0.0);
            }
        } else {
            // runs of accesses from one CPU (a file read, in the benchmark's trace) take
            // that CPU's view once, so it stays in registers
            let lines = &lines[..cpus.len().min(lines.len())];
            let mut k = 0;
            while k < lines.len() {
                let cpu = *cpus.at(k) as usize;
                let run = run_length(&cpus[k..], cpus[k]);
                let w = V::of(self, cpu);
                for &l in &lines[k..k + run] {
                    self.access_w::<I, V, true>(w, cpu, l, l as u32, kind, 0.0);
                }
                k += run;
            }
        }
    }
}

/// How many entries of `cpus` from the first equal `cpu`: 16 at a time while a whole
/// chunk does (an OR of differences, without an early exit, which the compiler turns into
/// vector code), then one by one. (The one-by-one scan took about 8% of the samples of a
/// multicore trace run.)
#[inline(always)]
fn run_length(cpus: &[u32], cpu: u32) -> usize {
    const CHUNK: usize = 16;
    let mut n = 0;
    for chunk in cpus.chunks_exact(CHUNK) {
        if chunk.iter().fold(0, |acc, &c| acc | (c ^ cpu)) != 0 {
            break;
        }
        n += CHUNK;
    }
    n + cpus[n..].iter().take_while(|&&c| c == cpu).count()
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_length_counts_the_leading_entries_of_one_cpu() {
        for len in [0usize, 1, 15, 16, 17, 31, 32, 33, 70] {
            for first_other in 0..=len {
                let mut cpus = vec![3u32; len];
                if first_other < len {
                    cpus[first_other] = 5;
                }
                let expected = cpus.iter().take_while(|&&c| c == 3).count();
                assert_eq!(super::run_length(&cpus, 3), expected, "{len} {first_other}");
            }
        }
    }
}
