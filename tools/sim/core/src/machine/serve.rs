//! Serving a line that is in none of the CPU's own levels: a group-mate's cache, another
//! group's cache, or DRAM through the node's queue; and the counting of every served line.

use super::{At, Machine, Source};

impl Machine {
    /// NUMA node holding physical line `line`.
    #[inline]
    pub fn node_of_line(&self, line: u64) -> usize {
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

    /// Where a line in none of `cpu`'s own levels comes from, counted.
    #[inline(always)]
    pub(super) fn serve_miss(
        &mut self,
        cpu: usize,
        phys: u64,
        slot: u32,
        now: f64,
    ) -> (Source, f64) {
        let own = *self.group_of.at(cpu) as usize;
        let base = slot as usize * self.n_groups;
        debug_assert!(base + self.n_groups <= self.dir.len());
        // SAFETY: slots index the directory (sized n_slots x n_groups in register_page /
        // prepare_trace).
        let counts = unsafe { self.dir.get_unchecked(base..base + self.n_groups) };
        let same = counts[own] > 0;
        let elsewhere = !same && counts.iter().any(|&c| c > 0);
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

    /// Serve a line from DRAM through the node's queue ([`crate::dram::DramQueue`]).
    #[inline]
    fn dram(&mut self, cpu: usize, phys: u64, now: f64) -> (Source, f64) {
        let node = self.node_of_line(phys);
        let local = self.cfg.cpu_node[cpu] as usize == node;
        let wait = self.queues[node].request(now);
        self.counters.dram_queue_cycles += wait;
        self.counters.dram_lines[node] += 1;
        let nd = &self.cfg.nodes[node];
        if local {
            let c = nd.local_line_cycles;
            self.count(Source::DramLocal, wait + c)
        } else {
            let c = nd.remote_line_cycles;
            self.count(Source::DramRemote, wait + c)
        }
    }
}
