//! One set-associative LRU cache instance.
//!
//! Lines are identified by a dense 32-bit *slot* id (see [`crate::machine`]) and placed in
//! a set by their physical line address. Each set keeps its ways ordered from most- to
//! least-recently used (move to front): a hit rotates the prefix, a miss shifts the set
//! and drops the last way. This is true LRU. The set operations under it are in
//! the crate's `simd` module, one implementation per instruction set.

use crate::simd::{Isa, Scalar};

/// Marker for an empty way.
pub const EMPTY: u32 = u32::MAX;

/// A set-associative cache with true LRU replacement.
#[derive(Debug, Clone)]
pub struct Cache {
    sets: u64,
    ways: usize,
    /// `sets - 1`, used when `pow2`.
    mask: u64,
    pow2: bool,
    tags: Tags,
}

/// 64-byte block of tags: sets of 8, 16 or 32 ways then never straddle a host cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Block([u32; 16]);

/// The tag array, 64-byte aligned, seen as a slice of `len` tags.
#[derive(Debug, Clone)]
struct Tags {
    blocks: Vec<Block>,
    len: usize,
}

impl Tags {
    fn new(len: usize) -> Self {
        Tags {
            blocks: vec![Block([EMPTY; 16]); len.div_ceil(16)],
            len,
        }
    }
}

impl std::ops::Deref for Tags {
    type Target = [u32];
    #[inline(always)]
    fn deref(&self) -> &[u32] {
        // SAFETY: `Block` is 16 contiguous u32 without padding (repr(C), size 64), and
        // `len` <= 16 * blocks.len().
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr() as *const u32, self.len) }
    }
}

impl std::ops::DerefMut for Tags {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `deref`, with unique access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr() as *mut u32, self.len) }
    }
}

/// Result of an insertion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// The line was already there (now most-recently used).
    Present,
    /// The line took an empty way.
    Fresh,
    /// The line replaced the given least-recently-used line.
    Evicted(u32),
}

impl Cache {
    /// New empty cache of `sets` x `ways` lines.
    pub fn new(sets: u32, ways: u32) -> Self {
        let sets = sets as u64;
        let pow2 = sets.is_power_of_two();
        let mask = sets.wrapping_sub(1);
        let n = (sets as usize) * ways as usize;
        Cache {
            sets,
            ways: ways as usize,
            mask,
            pow2,
            tags: Tags::new(n),
        }
    }

    /// Capacity in lines.
    pub fn lines(&self) -> usize {
        self.tags.len()
    }

    /// Index of the first way of the set of `phys`.
    #[inline(always)]
    fn base(&self, phys: u64) -> usize {
        let set = if self.pow2 {
            phys & self.mask
        } else {
            phys % self.sets
        } as usize;
        set * self.ways
    }

    /// The ways of the set of `phys`.
    #[inline(always)]
    fn set(&self, phys: u64) -> &[u32] {
        let b = self.base(phys);
        debug_assert!(b + self.ways <= self.tags.len());
        // SAFETY: `base` returns set * ways with set < sets, so b + ways <= sets * ways.
        unsafe { self.tags.get_unchecked(b..b + self.ways) }
    }

    /// The ways of the set of `phys`, to change (for the hot paths of
    /// [`crate::machine`], which apply the set operations of their [`Isa`]).
    #[inline(always)]
    pub(crate) fn set_mut(&mut self, phys: u64) -> &mut [u32] {
        let b = self.base(phys);
        debug_assert!(b + self.ways <= self.tags.len());
        // SAFETY: as in `set`.
        unsafe { self.tags.get_unchecked_mut(b..b + self.ways) }
    }

    /// Ask the CPU to bring the set of `phys` into its caches (a hint; no effect on state).
    #[inline(always)]
    pub fn prefetch(&self, phys: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let b = self.base(phys);
            // SAFETY: prefetch never faults; the pointers stay inside the vector.
            unsafe {
                _mm_prefetch(self.tags.as_ptr().add(b) as *const i8, _MM_HINT_T0);
                if self.ways > 16 {
                    _mm_prefetch(self.tags.as_ptr().add(b + 16) as *const i8, _MM_HINT_T0);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = phys;
    }

    /// Whether `id` is present, without changing any state.
    #[inline]
    pub fn contains(&self, phys: u64, id: u32) -> bool {
        Scalar::find(self.set(phys), id).is_some()
    }

    /// Look `id` up; on a hit make it most-recently used. Returns whether it hit.
    #[inline]
    pub fn touch(&mut self, phys: u64, id: u32) -> bool {
        set_touch::<Scalar>(self.set_mut(phys), id)
    }

    /// Look `id` up; on a hit either take it out (`take`) or make it most-recently used.
    /// Returns whether it hit. Same as [`Cache::touch`] then, if `take`, [`Cache::remove`].
    #[inline]
    pub fn touch_or_take(&mut self, phys: u64, id: u32, take: bool) -> bool {
        set_touch_or_take::<Scalar>(self.set_mut(phys), id, take)
    }

    /// Remove `id` if present. Returns whether it was present.
    #[inline]
    pub fn remove(&mut self, phys: u64, id: u32) -> bool {
        set_touch_or_take::<Scalar>(self.set_mut(phys), id, true)
    }

    /// Insert `id` as most-recently used (promote if present).
    #[inline]
    pub fn insert(&mut self, phys: u64, id: u32) -> Inserted {
        set_insert::<Scalar>(self.set_mut(phys), id)
    }

    /// Insert `id` known to be absent (the caller has just looked it up).
    #[inline]
    pub fn insert_absent(&mut self, phys: u64, id: u32) -> Inserted {
        set_insert_absent::<Scalar>(self.set_mut(phys), id)
    }

    /// Pointer to the first tag, for [`crate::machine`]'s fixed shapes (valid while
    /// the cache lives: the tag array never reallocates).
    pub(crate) fn tags_ptr(&mut self) -> *mut u32 {
        self.tags.as_mut_ptr()
    }

    /// The set mask (sets - 1) when the number of sets is a power of two.
    pub(crate) fn pow2_mask(&self) -> Option<u64> {
        self.pow2.then_some(self.mask)
    }

    /// Drop every line.
    pub fn clear(&mut self) {
        self.tags.iter_mut().for_each(|t| *t = EMPTY);
    }

    /// Number of valid lines held.
    pub fn occupancy(&self) -> usize {
        self.tags.iter().filter(|&&t| t != EMPTY).count()
    }
}

/// On a set (ways ordered most- to least-recently used): on a hit make `id` most-recently
/// used. Returns whether it hit.
#[inline(always)]
pub(crate) fn set_touch<I: Isa>(set: &mut [u32], id: u32) -> bool {
    match I::find(set, id) {
        Some(0) => true,
        Some(i) => {
            I::push_front(set, i, id);
            true
        }
        None => false,
    }
}

/// On a set: on a hit take `id` out (`take`) or make it most-recently used.
#[inline(always)]
pub(crate) fn set_touch_or_take<I: Isa>(set: &mut [u32], id: u32, take: bool) -> bool {
    match I::find(set, id) {
        Some(i) => {
            if take {
                I::pull_down(set, i);
            } else if i > 0 {
                I::push_front(set, i, id);
            }
            true
        }
        None => false,
    }
}

/// On a set: insert `id` as most-recently used (promote if present).
#[inline(always)]
pub(crate) fn set_insert<I: Isa>(set: &mut [u32], id: u32) -> Inserted {
    let n = set.len();
    if n >= 16 {
        // one shift either way: up to the hit way, or over the whole set
        let last = n - 1;
        let hit = I::find(set, id);
        let upto = hit.unwrap_or(last);
        let old = set[last];
        I::push_front(set, upto, id);
        return if hit.is_some() {
            Inserted::Present
        } else if old == EMPTY {
            Inserted::Fresh
        } else {
            Inserted::Evicted(old)
        };
    }
    match I::find(set, id) {
        Some(0) => Inserted::Present,
        Some(i) => {
            I::push_front(set, i, id);
            Inserted::Present
        }
        None => set_insert_absent::<I>(set, id),
    }
}

/// On a set: insert `id` known to be absent.
#[inline(always)]
pub(crate) fn set_insert_absent<I: Isa>(set: &mut [u32], id: u32) -> Inserted {
    let last = set.len() - 1;
    let old = set[last];
    I::push_front(set, last, id);
    if old == EMPTY {
        Inserted::Fresh
    } else {
        Inserted::Evicted(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut c = Cache::new(1, 2);
        assert_eq!(c.insert(0, 1), Inserted::Fresh);
        assert_eq!(c.insert(0, 2), Inserted::Fresh);
        assert!(c.touch(0, 1));
        assert_eq!(c.insert(0, 3), Inserted::Evicted(2));
        assert!(c.contains(0, 1) && c.contains(0, 3) && !c.contains(0, 2));
    }

    #[test]
    fn non_power_of_two_sets_index_by_modulo() {
        let mut c = Cache::new(3, 1);
        c.insert(0, 0);
        c.insert(1, 1);
        c.insert(2, 2);
        assert_eq!(c.occupancy(), 3);
        assert_eq!(c.insert(3, 3), Inserted::Evicted(0));
    }

    #[test]
    fn remove_frees_a_way() {
        let mut c = Cache::new(1, 2);
        c.insert(0, 1);
        c.insert(0, 2);
        assert!(c.remove(0, 2));
        assert_eq!(c.insert(0, 3), Inserted::Fresh);
        assert!(!c.remove(0, 9));
    }

    #[test]
    fn wide_sets_find_ways_past_the_first_group_of_eight() {
        let mut c = Cache::new(1, 20);
        for id in 0..20 {
            c.insert(0, id);
        }
        for id in 0..20 {
            assert!(c.contains(0, id), "{id}");
        }
        assert_eq!(c.insert(0, 99), Inserted::Evicted(0));
    }

    /// Every operation against a list of each set's lines, most- to least-recently used:
    /// the exact order (and outcome) any representation of a set must give.
    #[test]
    fn the_order_is_a_recency_list() {
        let mut rng = crate::rng::Rng::new(3);
        for (sets, ways) in [(1u32, 1u32), (2, 3), (4, 8), (2, 16), (1, 32), (3, 20)] {
            let mut c = Cache::new(sets, ways);
            // per set, the lines most- to least-recently used
            let mut lists: Vec<Vec<u32>> = vec![Vec::new(); sets as usize];
            for _ in 0..5000 {
                let id = rng.below(4 * (sets * ways) as u64) as u32;
                let phys = id as u64;
                let list = &mut lists[(phys % sets as u64) as usize];
                let at = list.iter().position(|&t| t == id);
                match rng.below(4) {
                    0 => {
                        assert_eq!(c.touch(phys, id), at.is_some());
                        if let Some(i) = at {
                            list.remove(i);
                            list.insert(0, id);
                        }
                    }
                    1 => {
                        assert_eq!(c.remove(phys, id), at.is_some());
                        if let Some(i) = at {
                            list.remove(i);
                        }
                    }
                    _ => {
                        let expected = match at {
                            Some(i) => {
                                list.remove(i);
                                Inserted::Present
                            }
                            None if list.len() == ways as usize => {
                                Inserted::Evicted(list.pop().expect("full"))
                            }
                            None => Inserted::Fresh,
                        };
                        list.insert(0, id);
                        assert_eq!(c.insert(phys, id), expected);
                    }
                }
            }
            let held: usize = lists.iter().map(Vec::len).sum();
            assert_eq!(c.occupancy(), held);
        }
    }
}
