//! Physical page allocator: 4 KiB (configurable) frames per NUMA node, random or colored.
//!
//! Frames are drawn at random from a node (as a buddy allocator's free lists look after
//! some uptime), so the cache sets a page maps to — its color — are realistic.
//! A color set restricts the draw to frames whose color is in the set.

use crate::error::{Result, SimError};
use crate::rng::Rng;
use std::collections::HashSet;

/// Allocates physical frames; frame numbers are global (node ranges are contiguous).
pub struct PageAllocator {
    node_first_frame: Vec<u64>,
    node_frames: Vec<u64>,
    used: HashSet<u64>,
    used_per_node: Vec<u64>,
    rng: Rng,
}

impl PageAllocator {
    /// New allocator over nodes of the given sizes in bytes.
    pub fn new(node_bytes: &[u64], page_size: u64, seed: u64) -> Self {
        let mut first = Vec::new();
        let mut frames = Vec::new();
        let mut base = 0u64;
        for &b in node_bytes {
            first.push(base / page_size);
            frames.push(b / page_size);
            base += b;
        }
        PageAllocator {
            used_per_node: vec![0; first.len()],
            node_first_frame: first,
            node_frames: frames,
            used: HashSet::new(),
            rng: Rng::new(seed),
        }
    }

    /// Frames allocated so far on `node`.
    pub fn used_on(&self, node: usize) -> u64 {
        self.used_per_node[node]
    }

    /// Allocate one frame on `node`. With `colors = Some((n_colors, mask))`, only frames whose
    /// `frame % n_colors` bit is set in `mask` qualify.
    pub fn alloc(&mut self, node: usize, colors: Option<(u64, u64)>) -> Result<u64> {
        if node >= self.node_frames.len() {
            return Err(SimError::NotFound("NUMA node", node as u64));
        }
        let nf = self.node_frames[node];
        if self.used_per_node[node] >= nf {
            return Err(SimError::OutOfMemory(node as u32));
        }
        let allowed: Vec<u64> = match colors {
            None => Vec::new(),
            Some((n, mask)) => {
                let v: Vec<u64> = (0..n.min(64)).filter(|c| mask & (1 << c) != 0).collect();
                if v.is_empty() || n == 0 {
                    return Err(SimError::Config("empty color set".into()));
                }
                v
            }
        };
        // Random draw with rejection: the simulator uses a tiny fraction of memory.
        for _ in 0..10_000 {
            let frame = match colors {
                None => self.node_first_frame[node] + self.rng.below(nf),
                Some((n, _)) => {
                    let c = allowed[self.rng.below(allowed.len() as u64) as usize];
                    let slots = nf / n;
                    if slots == 0 {
                        return Err(SimError::OutOfMemory(node as u32));
                    }
                    let base = self.node_first_frame[node];
                    // first frame >= base with color c
                    let first_c = base + ((c + n - base % n) % n);
                    let f = first_c + self.rng.below(slots) * n;
                    if f >= base + nf {
                        continue;
                    }
                    f
                }
            };
            if self.used.insert(frame) {
                self.used_per_node[node] += 1;
                return Ok(frame);
            }
        }
        Err(SimError::OutOfMemory(node as u32))
    }

    /// Allocate one frame on `node` whose color `frame % n_colors` is `color` (any number of
    /// colors, unlike the 64-bit mask of [`PageAllocator::alloc`]): the per-color free lists
    /// of a coloring allocator (SRM-buffer §3.2's colored zone).
    pub fn alloc_color(&mut self, node: usize, n_colors: u64, color: u64) -> Result<u64> {
        if node >= self.node_frames.len() {
            return Err(SimError::NotFound("NUMA node", node as u64));
        }
        if n_colors == 0 || color >= n_colors {
            return Err(SimError::Config(format!(
                "color {color} is not one of {n_colors} colors"
            )));
        }
        let nf = self.node_frames[node];
        let base = self.node_first_frame[node];
        let first_c = base + ((color + n_colors - base % n_colors) % n_colors);
        if first_c >= base + nf {
            return Err(SimError::OutOfMemory(node as u32));
        }
        let slots = (base + nf - first_c).div_ceil(n_colors);
        // random draw with rejection, then a linear scan so a full color is reported exactly
        for _ in 0..64 {
            let f = first_c + self.rng.below(slots) * n_colors;
            if self.used.insert(f) {
                self.used_per_node[node] += 1;
                return Ok(f);
            }
        }
        for k in 0..slots {
            let f = first_c + k * n_colors;
            if self.used.insert(f) {
                self.used_per_node[node] += 1;
                return Ok(f);
            }
        }
        Err(SimError::OutOfMemory(node as u32))
    }

    /// Number of frames of `node` (its memory in pages).
    pub fn frames_of(&self, node: usize) -> u64 {
        self.node_frames.get(node).copied().unwrap_or(0)
    }

    /// Return a frame to its node.
    pub fn free(&mut self, frame: u64) {
        if self.used.remove(&frame) {
            let node = self
                .node_first_frame
                .iter()
                .rposition(|&f| frame >= f)
                .unwrap_or(0);
            self.used_per_node[node] -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_stay_on_their_node_and_are_unique() {
        let mut a = PageAllocator::new(&[1 << 20, 1 << 20], 4096, 1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let f = a.alloc(1, None).unwrap();
            assert!((256..512).contains(&f));
            assert!(seen.insert(f));
        }
    }

    #[test]
    fn colored_frames_have_the_requested_color() {
        let mut a = PageAllocator::new(&[1 << 24], 4096, 7);
        for _ in 0..100 {
            let f = a.alloc(0, Some((16, 0b100))).unwrap();
            assert_eq!(f % 16, 2);
        }
    }

    #[test]
    fn alloc_color_gives_the_color_on_the_node_for_any_color_count() {
        // 2 nodes of 8 MiB, 100 colors (not a power of two, more than a 64-bit mask holds)
        let mut a = PageAllocator::new(&[8 << 20, 8 << 20], 4096, 5);
        let mut seen = std::collections::HashSet::new();
        for i in 0..300 {
            let c = (i * 7) % 100;
            let f = a.alloc_color(1, 100, c).unwrap();
            assert_eq!(f % 100, c);
            assert!((2048..4096).contains(&f));
            assert!(seen.insert(f));
        }
        assert_eq!(a.used_on(1), 300);
        assert_eq!(a.used_on(0), 0);
    }

    #[test]
    fn alloc_color_fills_a_color_exactly_then_reports_out_of_memory() {
        // 64 frames, 16 colors: 4 frames of color 3
        let mut a = PageAllocator::new(&[64 * 4096], 4096, 9);
        for _ in 0..4 {
            assert_eq!(a.alloc_color(0, 16, 3).unwrap() % 16, 3);
        }
        assert_eq!(a.alloc_color(0, 16, 3), Err(SimError::OutOfMemory(0)));
        assert!(a.alloc_color(0, 16, 16).is_err());
        assert!(a.alloc_color(2, 16, 1).is_err());
    }

    #[test]
    fn exhausted_node_reports_out_of_memory() {
        let mut a = PageAllocator::new(&[8192], 4096, 3);
        a.alloc(0, None).unwrap();
        a.alloc(0, None).unwrap();
        assert_eq!(a.alloc(0, None), Err(SimError::OutOfMemory(0)));
    }
}
