//! Slots and the presence directory: which slot names which physical line, and how many
//! copies of each line every LLC group holds.

use super::{At, Machine, SlotMode};
use crate::error::{Result, SimError};

/// The largest slot id (the cache's empty marker is `u32::MAX`).
pub const MAX_SLOT: u64 = (u32::MAX - 1) as u64;

/// Zero bytes kept past the directory's last row, so that a row of up to this many groups
/// can be read as one word (`Machine::held_anywhere`).
pub(super) const DIR_PAD: usize = 8;

/// The most directory bytes [`Machine::reserve_pages`] sets aside ahead of use.
const DIR_RESERVE_MAX: usize = 1 << 30;

/// The directory as the hot path reads it: its pointer and row width, taken once per
/// access (see [`Machine::dir_mut`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Dir {
    counts: *mut u8,
    n_groups: usize,
}

impl Dir {
    /// Copies of `slot` held in group `g`.
    ///
    /// # Safety
    ///
    /// `slot` indexes the machine's directory (sized n_slots x n_groups in
    /// [`Machine::register_page`] / [`Machine::prepare_trace`]), and the directory has not
    /// been resized since this `Dir` was taken.
    #[inline(always)]
    pub(super) unsafe fn at(self, slot: u32, g: usize) -> *mut u8 {
        debug_assert!(g < self.n_groups);
        // SAFETY: the caller's contract.
        unsafe { self.counts.add(slot as usize * self.n_groups + g) }
    }

    /// `n` more copies of `slot` in group `g`. Safety: as [`Dir::at`].
    #[inline(always)]
    pub(super) unsafe fn add(self, slot: u32, g: usize, n: u8) {
        // SAFETY: the caller's contract.
        unsafe {
            let d = self.at(slot, g);
            *d = (*d).wrapping_add(n);
        }
    }

    /// One copy fewer of `slot` in group `g`. Safety: as [`Dir::at`].
    #[inline(always)]
    pub(super) unsafe fn dec(self, slot: u32, g: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            let d = self.at(slot, g);
            *d = (*d).wrapping_sub(1);
        }
    }
}

impl Machine {
    /// Give the lines of physical page `frame` slots; returns the first one.
    pub fn register_page(&mut self, frame: u64) -> Result<u32> {
        if self.mode == SlotMode::Trace {
            return Err(SimError::Config(
                "this machine already ran a raw trace".into(),
            ));
        }
        self.mode = SlotMode::Pages;
        let lpp = 1u64 << self.lpp_shift;
        let first = self.n_slots as u64;
        if first + lpp > MAX_SLOT {
            return Err(SimError::Config("too many pages for 32-bit slots".into()));
        }
        self.frame_of_page.push(frame);
        self.n_slots += lpp as usize;
        self.grow_dir();
        Ok(first as u32)
    }

    /// Prepare raw-trace use: line addresses below `max_line` become their own slots.
    pub fn prepare_trace(&mut self, max_line: u64) -> Result<()> {
        if self.mode == SlotMode::Pages {
            return Err(SimError::Config(
                "this machine already holds engine pages".into(),
            ));
        }
        if max_line > MAX_SLOT {
            return Err(SimError::Config(format!(
                "trace line {max_line} is beyond 32-bit slots"
            )));
        }
        self.mode = SlotMode::Trace;
        let need = max_line as usize + 1;
        if self.n_slots < need {
            self.n_slots = need;
            self.grow_dir();
        }
        Ok(())
    }

    /// Make the directory hold `n_slots` rows and the pad, doubling if it must grow.
    fn grow_dir(&mut self) {
        let need = self.n_slots * self.n_groups + DIR_PAD;
        if need > self.dir.len() {
            self.resize_dir(need.max(2 * self.dir.len()));
        }
    }

    /// Room in the directory for `pages` more pages than it has room for now (an engine
    /// object's, declared before it is touched), up to [`DIR_RESERVE_MAX`] bytes:
    /// registering those pages then neither copies nor clears the directory.
    pub fn reserve_pages(&mut self, pages: u64) {
        let bytes = ((pages << self.lpp_shift) as usize).saturating_mul(self.n_groups);
        let want = self.dir.len().max(DIR_PAD).saturating_add(bytes).min(DIR_RESERVE_MAX);
        if want > self.dir.len() {
            // doubling: many small objects do not reallocate it once each
            self.resize_dir(want.max(2 * self.dir.len()).min(DIR_RESERVE_MAX));
        }
    }

    /// A fresh zeroed directory of `len` bytes holding the rows in use: the allocator's
    /// zeroed pages (no `memset` of new rows; untouched ones cost no memory), one copy
    /// of the rows in use. Its length is its capacity; every byte past the last row is
    /// zero.
    fn resize_dir(&mut self, len: usize) {
        let used = (self.n_slots * self.n_groups + DIR_PAD).min(self.dir.len());
        let mut grown = vec![0u8; len];
        grown[..used].copy_from_slice(&self.dir[..used]);
        self.dir = grown;
    }

    /// The directory for one access (it must not be resized while the `Dir` is used).
    #[inline(always)]
    pub(super) fn dir_mut(&mut self) -> Dir {
        Dir {
            counts: self.dir.as_mut_ptr(),
            n_groups: self.n_groups,
        }
    }

    /// Physical line of a slot.
    #[inline(always)]
    fn phys_of(&self, slot: u32) -> u64 {
        if self.mode == SlotMode::Trace {
            return slot as u64;
        }
        let page = (slot >> self.lpp_shift) as usize;
        let mask = (1u64 << self.lpp_shift) - 1;
        (*self.frame_of_page.at(page) << self.lpp_shift) | (slot as u64 & mask)
    }

    /// [`Machine::phys_of`], known to be the identity when `TRACE` (raw-trace mode).
    #[inline(always)]
    pub(super) fn phys_of_m<const TRACE: bool>(&self, slot: u32) -> u64 {
        debug_assert!(!TRACE || self.mode == SlotMode::Trace);
        if TRACE {
            slot as u64
        } else {
            self.phys_of(slot)
        }
    }

    /// Check the directory against the caches: for every slot and group, the count must
    /// equal the number of that group's instances holding the line. Returns the first
    /// mismatch as (slot, group, counted, actual). For tests; O(slots x instances).
    pub fn check_directory(&self) -> Option<(u32, usize, u8, u8)> {
        for slot in 0..self.n_slots as u32 {
            let phys = self.phys_of(slot);
            let mut actual = vec![0u8; self.n_groups];
            for j in 0..self.n_levels {
                let count = self
                    .level_base
                    .get(j + 1)
                    .copied()
                    .unwrap_or(self.caches.len())
                    - self.level_base[j];
                for k in 0..count {
                    if self.caches[self.level_base[j] + k].contains(phys, slot) {
                        let cpu = self.inst[j]
                            .iter()
                            .position(|&x| x as usize == k)
                            .unwrap_or(0);
                        actual[self.group_of[cpu] as usize] += 1;
                    }
                }
            }
            for (g, &a) in actual.iter().enumerate() {
                let c = self.dir[slot as usize * self.n_groups + g];
                if c != a {
                    return Some((slot, g, c, a));
                }
            }
        }
        None
    }
}
