//! What a store and the DMC what-if need beyond the hot path: taking a line away from every
//! cache but the writer's own private levels (a store makes the line modified, MSI), and
//! finding which CPUs and groups hold a line (the directory lookup of DMC's `cllookup`).
//!
//! Off the hot path: these walk every cache instance, which is cheap on the small machines
//! and the few lines the DMC microbenchmarks and lookups touch.

use super::Machine;

impl Machine {
    /// Whether level `level` is private to cores: it has more instances than there are
    /// LLC groups.
    fn level_is_private(&self, level: usize) -> bool {
        let instances = self.inst[level].iter().copied().max().unwrap_or(0) as usize + 1;
        instances > self.n_groups
    }

    /// Drop line `phys` (slot `slot`) from every cache instance except `cpu`'s private
    /// levels, the directory counted down: the other copies a store invalidates. A shared
    /// level's copy goes too, as its data is stale while an L1 holds the line modified;
    /// the next reader is served by the writer's cache. Returns how many copies went from
    /// caches outside `cpu`'s own hierarchy (the invalidations the store waits for).
    pub fn invalidate_others(&mut self, cpu: usize, phys: u64, slot: u32) -> u32 {
        let n = self.n_levels;
        let own: Vec<usize> = (0..n).map(|i| self.hier[cpu * n + i] as usize).collect();
        let keep: Vec<usize> = (0..n)
            .filter(|&i| self.level_is_private(i))
            .map(|i| own[i])
            .collect();
        let mut seen = vec![false; self.caches.len()];
        let mut dropped = 0;
        for other in 0..self.cfg.n_cpus() {
            let g = self.group_of[other] as usize;
            for i in 0..n {
                let c = self.hier[other * n + i] as usize;
                if seen[c] || keep.contains(&c) {
                    continue;
                }
                seen[c] = true;
                if self.caches[c].remove(phys, slot) {
                    self.dir[slot as usize * self.n_groups + g] -= 1;
                    if !own.contains(&c) {
                        dropped += 1;
                    }
                }
            }
        }
        dropped
    }

    /// Where line `phys` (slot `slot`) is: the CPUs whose private levels hold it, and the
    /// LLC groups whose caches (any level) hold it. No state changes.
    pub fn locate(&self, phys: u64, slot: u32) -> (Vec<usize>, Vec<usize>) {
        let n = self.n_levels;
        let private: Vec<usize> = (0..n).filter(|&i| self.level_is_private(i)).collect();
        let cpus = (0..self.cfg.n_cpus())
            .filter(|&cpu| {
                private
                    .iter()
                    .any(|&i| self.caches[self.hier[cpu * n + i] as usize].contains(phys, slot))
            })
            .collect();
        let row = &self.dir[slot as usize * self.n_groups..(slot as usize + 1) * self.n_groups];
        let groups = (0..self.n_groups).filter(|&g| row[g] > 0).collect();
        (cpus, groups)
    }
}
