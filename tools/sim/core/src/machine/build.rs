//! Building a machine: the level tables the hot path reads, from a validated configuration.

use super::paths::Shape;
use super::{Counters, Down, Machine, SlotMode, VictimAction};
use crate::cache::Cache;
use crate::config::{Inclusion, MachineConfig};
use crate::dram::DramQueue;
use crate::error::Result;
use crate::simd::{has_avx2, has_avx512};

impl Machine {
    /// Build an empty (cold) machine from a validated configuration.
    pub fn new(cfg: MachineConfig) -> Result<Self> {
        cfg.validate()?;
        let n = cfg.levels.len();
        let ncpu = cfg.n_cpus();
        let n_inst: Vec<usize> = cfg
            .levels
            .iter()
            .map(|l| l.instance_of.iter().copied().max().unwrap_or(0) as usize + 1)
            .collect();
        let mut caches = Vec::new();
        let mut level_base = Vec::new();
        for (l, &k) in cfg.levels.iter().zip(&n_inst) {
            level_base.push(caches.len());
            caches.extend((0..k).map(|_| Cache::new(l.sets, l.ways)));
        }
        let mut hier = Vec::with_capacity(ncpu * n);
        for c in 0..ncpu {
            for (i, l) in cfg.levels.iter().enumerate() {
                hier.push((level_base[i] + l.instance_of[c] as usize) as u32);
            }
        }
        // `covered[j][inst]`: the (level, instance) pairs above instance `inst` of level j
        let mut covered: Vec<Vec<Vec<(usize, u32)>>> =
            n_inst.iter().map(|&k| vec![Vec::new(); k]).collect();
        for (j, above) in covered.iter_mut().enumerate() {
            for c in 0..ncpu {
                let list = &mut above[cfg.levels[j].instance_of[c] as usize];
                for k in 0..j {
                    let up = (k, cfg.levels[k].instance_of[c]);
                    if !list.contains(&up) {
                        list.push(up);
                    }
                }
            }
        }
        // a victim-filled level whose every instance sits under one instance above receives
        // only lines it cannot hold already
        let mut sole_victim_target = vec![false; n];
        for l in 1..n {
            let mut children = vec![Vec::<u32>::new(); n_inst[l]];
            for c in 0..ncpu {
                let above = cfg.levels[l - 1].instance_of[c];
                let list = &mut children[cfg.levels[l].instance_of[c] as usize];
                if !list.contains(&above) {
                    list.push(above);
                }
            }
            sole_victim_target[l] =
                cfg.levels[l].inclusion.victim_filled() && children.iter().all(|ch| ch.len() == 1);
        }
        let mut covered_c = vec![Vec::new(); caches.len()];
        for j in 0..n {
            for (k, up) in covered[j].iter().enumerate() {
                covered_c[level_base[j] + k] = up
                    .iter()
                    .map(|&(l, i)| (level_base[l] + i as usize) as u32)
                    .collect();
            }
        }
        let fill_levels: Vec<usize> = (0..n)
            .rev()
            .filter(|&j| j == 0 || !cfg.levels[j].inclusion.victim_filled())
            .collect();
        let victim_action: Vec<VictimAction> = (0..n)
            .map(|j| VictimAction {
                back_invalidate: j > 0 && cfg.levels[j].inclusion == Inclusion::Inclusive,
                down: if j + 1 < n && cfg.levels[j + 1].inclusion.victim_filled() {
                    if sole_victim_target[j + 1] {
                        Down::Sole
                    } else {
                        Down::Shared
                    }
                } else {
                    Down::Drop
                },
            })
            .collect();
        let group_of: Vec<u32> = cfg.levels[n - 1].instance_of.clone();
        let n_groups = n_inst[n - 1];
        let line = cfg.line_size as u64;
        let mut node_base_line = Vec::with_capacity(cfg.nodes.len());
        let mut base = 0u64;
        for nd in &cfg.nodes {
            node_base_line.push(base / line);
            base += nd.memory_bytes;
        }
        let node_shift = match node_base_line.get(1) {
            None => Some(63),
            Some(&second) => (second.is_power_of_two()
                && node_base_line
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == (i as u64) << second.trailing_zeros()))
            .then_some(second.trailing_zeros()),
        };
        let row_mask = match n_groups {
            0 => 0,
            1..=7 => (1u64 << (8 * n_groups)) - 1,
            _ => u64::MAX,
        };
        let queues = cfg
            .nodes
            .iter()
            .map(|nd| DramQueue::new(nd.service_line_cycles))
            .collect();
        let counters = Counters {
            served: vec![0; n + 4],
            dram_lines: vec![0; cfg.nodes.len()],
            dram_queue_cycles: 0.0,
        };
        let mut m = Machine {
            queues,
            caches,
            level_base,
            hier,
            hit_cycles: cfg.levels.iter().map(|l| l.hit_cycles).collect(),
            n_levels: n,
            inst: cfg.levels.iter().map(|l| l.instance_of.clone()).collect(),
            victim_filled: cfg
                .levels
                .iter()
                .map(|l| l.inclusion.victim_filled())
                .collect(),
            covered_c,
            victim_action,
            fill_levels,
            group_of,
            n_groups,
            dir: Vec::new(),
            frame_of_page: Vec::new(),
            n_slots: 0,
            lpp_shift: (cfg.page_size / cfg.line_size).trailing_zeros(),
            mode: SlotMode::Unset,
            node_base_line,
            node_shift,
            row_mask,
            counters,
            avx512: has_avx512(),
            avx2: has_avx2(),
            shape: Shape::Generic,
            mask3: [0; 3],
            cfg,
        };
        m.set_shape(true);
        Ok(m)
    }
}
