//! The hot path, written once: one access through a CPU's levels, the fills after a hit
//! below L1 or a miss, and the chain of evictions they cause.
//!
//! Generic over the set operations ([`Isa`]), over how the CPU's caches and the rules are
//! reached ([`View`]: tables at run time, or a shape fixed at compile time), and over
//! whether slots are line addresses (`TRACE`: raw traces).
//!
//! The closures handed to [`View::walk`] and [`View::each_fill_level`] are
//! `#[inline(always)]`: one left out of line is compiled without the `#[target_feature]`
//! of the function it serves and calls its vector intrinsics (about 9x the instructions).

use std::ops::ControlFlow::{Break, Continue};

use super::slots::Dir;
use super::view::View;
use super::{AccessKind, At, Down, Machine, Source, LAST_DROP};
use crate::cache::{set_insert, set_insert_absent, set_touch, set_touch_or_take, Inserted, EMPTY};
use crate::simd::Isa;

// SAFETY (every `unsafe` block of this module): `dir` was taken at the start of the
// access, and slots index the directory, which no access resizes (`Dir::at`); `w` was made
// of this machine, and each set it gives is used before the next is made (`View::set`).

impl Machine {
    /// Access line `phys` (slot `slot`) from `cpu`, whose caches `w` shows, at thread time
    /// `now`; returns where it was served from and the stall cycles.
    #[inline(always)]
    pub(super) fn access_w<I: Isa, V: View, const TRACE: bool>(
        &mut self,
        w: V,
        cpu: usize,
        phys: u64,
        slot: u32,
        kind: AccessKind,
        now: f64,
    ) -> (Source, f64) {
        let g = w.group();
        let dir = self.dir_mut();
        debug_assert!((slot as usize + 1) * self.n_groups <= self.dir.len());
        // The directory counts the copies in the cpu's group, its own levels included: with
        // none, every lookup would miss (and a miss changes nothing), so skip them.
        let result = if unsafe { *dir.at(slot, g) } != 0 {
            if kind == AccessKind::NonTemporal {
                let hit = w.walk(
                    self,
                    0,
                    #[inline(always)]
                    |m, i| {
                        if I::find(unsafe { w.set(m, i, phys) }, slot).is_some() {
                            Break(i)
                        } else {
                            Continue(())
                        }
                    },
                );
                if let Some(i) = hit {
                    return self.count(Source::Level(i), *self.hit_cycles.at(i));
                }
            } else {
                if set_touch::<I>(unsafe { w.set(self, 0, phys) }, slot) {
                    return self.count(Source::Level(0), *self.hit_cycles.at(0));
                }
                // below L1: a hit in a victim-filled level takes the line out, any other
                // stays (most recently used); either way the line fills the levels above
                let hit = w.walk(
                    self,
                    1,
                    #[inline(always)]
                    |m, i| {
                        let take = w.victim_filled(m, i);
                        if set_touch_or_take::<I>(unsafe { w.set(m, i, phys) }, slot, take) {
                            Break((i, take))
                        } else {
                            Continue(())
                        }
                    },
                );
                if let Some((i, take)) = hit {
                    if take {
                        unsafe { dir.dec(slot, g) };
                    }
                    self.fill_w::<I, V, TRACE>(w, dir, cpu, phys, slot, i);
                    return self.count(Source::Level(i), *self.hit_cycles.at(i));
                }
            }
            // in none of the cpu's levels, and the group's count (unchanged) is not zero
            self.serve_miss(cpu, phys, slot, now, true)
        } else {
            self.serve_miss(cpu, phys, slot, now, false)
        };
        if kind != AccessKind::NonTemporal {
            let n = w.levels(self);
            self.fill_w::<I, V, TRACE>(w, dir, cpu, phys, slot, n);
        }
        result
    }

    /// Install the line in `cpu`'s levels above `upto` that are filled on misses (L1
    /// always). The line is known to be absent from all of them.
    #[inline(always)]
    fn fill_w<I: Isa, V: View, const TRACE: bool>(
        &mut self,
        w: V,
        dir: Dir,
        cpu: usize,
        phys: u64,
        slot: u32,
        upto: usize,
    ) {
        let g = w.group();
        // the copies placed are counted once at the end: the evictions in between never
        // read or write this line's count (a victim is never the line just placed)
        let mut placed_copies = 0u8;
        w.each_fill_level(
            self,
            #[inline(always)]
            |m, j| {
                if j >= upto {
                    return;
                }
                let placed = set_insert_absent::<I>(unsafe { w.set(m, j, phys) }, slot);
                if placed != Inserted::Present {
                    placed_copies += 1;
                }
                if let Inserted::Evicted(v) = placed {
                    m.evicted_w::<I, V, TRACE>(w, dir, cpu, j, v);
                }
            },
        );
        unsafe { dir.add(slot, g, placed_copies) };
    }

    /// Line `v` was pushed out of `cpu`'s level `j`: back-invalidate above an inclusive
    /// level, then move it into a victim-filled level below or drop it; what that level
    /// pushes out goes on the same way. The last level drops its victims, so the walk
    /// ends there at the latest.
    #[inline(always)]
    fn evicted_w<I: Isa, V: View, const TRACE: bool>(
        &mut self,
        w: V,
        dir: Dir,
        cpu: usize,
        j: usize,
        v: u32,
    ) {
        let g = w.group();
        let mut v = v;
        w.walk(
            self,
            j,
            #[inline(always)]
            |m, j| {
                let vphys = m.phys_of_m::<TRACE>(v);
                let action = w.victim_action(m, j);
                if action.back_invalidate {
                    m.back_invalidate::<I>(dir, cpu, j, vphys, v, g);
                }
                let placed = match action.down {
                    Down::Drop => {
                        unsafe { dir.dec(v, g) };
                        return Break(());
                    }
                    Down::Sole => set_insert_absent::<I>(unsafe { w.set(m, j + 1, vphys) }, v),
                    Down::Shared => {
                        let placed = set_insert::<I>(unsafe { w.set(m, j + 1, vphys) }, v);
                        if w.victim_action(m, j + 1) == LAST_DROP {
                            // the level below drops its victims: one copy fewer either way
                            // (the arriving copy if already there, else the evicted line)
                            let gone = match placed {
                                Inserted::Present => v,
                                Inserted::Evicted(x) => x,
                                Inserted::Fresh => EMPTY,
                            };
                            if gone != EMPTY {
                                unsafe { dir.dec(gone, g) };
                            }
                            return Break(());
                        }
                        placed
                    }
                };
                match placed {
                    // another copy was already there: one copy fewer in the group
                    Inserted::Present => {
                        unsafe { dir.dec(v, g) };
                        Break(())
                    }
                    // moved down: same number of copies
                    Inserted::Fresh => Break(()),
                    Inserted::Evicted(x) => {
                        v = x;
                        Continue(())
                    }
                }
            },
        );
    }

    /// Drop line `v` (at `vphys`) from every cache above `cpu`'s level `j`, its group
    /// `g`'s copies counted down.
    #[inline(always)]
    fn back_invalidate<I: Isa>(
        &mut self,
        dir: Dir,
        cpu: usize,
        j: usize,
        vphys: u64,
        v: u32,
        g: usize,
    ) {
        let c = *self.hier.at(cpu * self.n_levels + j) as usize;
        for idx in 0..self.covered_c.at(c).len() {
            let up = *self.covered_c.at(c).at(idx) as usize;
            if set_touch_or_take::<I>(self.caches.at_mut(up).set_mut(vphys), v, true) {
                unsafe { dir.dec(v, g) };
            }
        }
    }
}
