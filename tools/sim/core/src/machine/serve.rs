//! Serving a line that is in none of the CPU's own levels: a group-mate's cache, another
//! group's cache, or DRAM through the node's queue; and the counting of every served line.

use super::slots::DIR_PAD;
use super::{At, Machine, Source};

impl Machine {
    /// NUMA node holding physical line `line`.
    #[inline]
    pub fn node_of_line(&self, line: u64) -> usize {
        if let Some(shift) = self.node_shift {
            // nodes of one power-of-two size: the same answer as the scan below
            return (line >> shift).min(self.node_base_line.len() as u64 - 1) as usize;
        }
        let mut node = 0;
        for (i, &b) in self.node_base_line.iter().enumerate() {
            if line >= b {
                node = i;
            }
        }
        node
    }

    /// Count a line served by `src` at a cost of `cycles`; returns both.
    #[inline(always)]
    pub(super) fn count(&mut self, src: Source, cycles: f64) -> (Source, f64) {
        let k = self.source_index(src);
        *self.counters.served.at_mut(k) += 1;
        (src, cycles)
    }

    /// Where a line in none of `cpu`'s own levels comes from, counted; `same`: whether
    /// its group holds a copy (the caller has read the directory, and passes a constant
    /// from each of its branches, so each gets only its half of this function).
    #[inline(always)]
    pub(super) fn serve_miss(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        now: f64,
        same: bool,
    ) -> (Source, f64) {
        // with one group, "any group" is the cpu's own
        let elsewhere = !same && self.n_groups > 1 && self.held_anywhere(slot);
        // the simulator's lines are never dirty: without clean forwarding, DRAM serves them
        let result = if same || (elsewhere && !self.cfg.cross_group_clean_from_dram) {
            // selects rather than branches: which cache serves is data-dependent
            let n = self.n_levels;
            let (src, k, cycles) = if same {
                (Source::SameGroup, n, self.cfg.same_group_c2c_cycles)
            } else {
                (Source::CrossGroup, n + 1, self.cfg.cross_group_c2c_cycles)
            };
            *self.counters.served.at_mut(k) += 1;
            (src, cycles)
        } else {
            self.dram(cpu, phys, now)
        };
        result
    }

    /// Whether any group holds a copy of `slot`.
    #[inline(always)]
    fn held_anywhere(&self, slot: u32) -> bool {
        let base = slot as usize * self.n_groups;
        debug_assert!(base + self.n_groups <= self.dir.len());
        if self.n_groups <= DIR_PAD {
            // the row's counts as one word: the directory has DIR_PAD bytes past its last row
            debug_assert!(base + DIR_PAD <= self.dir.len());
            // SAFETY: as above; an unaligned read of DIR_PAD bytes inside the vector.
            let word = unsafe { self.dir.as_ptr().add(base).cast::<u64>().read_unaligned() };
            let bytes = u64::from_le(word);
            return bytes & self.row_mask != 0;
        }
        // SAFETY: slots index the directory (sized n_slots x n_groups in register_page /
        // prepare_trace).
        let counts = unsafe { self.dir.get_unchecked(base..base + self.n_groups) };
        counts.iter().any(|&c| c > 0)
    }

    /// Serve a line from DRAM through the node's queue ([`crate::dram::DramQueue`]).
    #[inline(always)]
    fn dram(&mut self, cpu: usize, phys: u64, now: f64) -> (Source, f64) {
        let node = self.node_of_line(phys);
        let local = *self.cfg.cpu_node.at(cpu) as usize == node;
        let wait = self.queues.at_mut(node).request(now);
        self.counters.dram_queue_cycles += wait;
        *self.counters.dram_lines.at_mut(node) += 1;
        let nd = self.cfg.nodes.at(node);
        if local {
            let c = nd.local_line_cycles;
            self.count(Source::DramLocal, wait + c)
        } else {
            let c = nd.remote_line_cycles;
            self.count(Source::DramRemote, wait + c)
        }
    }
}
