//! One set-associative LRU cache instance.
//!
//! Lines are identified by a dense 32-bit *slot* id (see [`crate::machine`]) and placed in
//! a set by their physical line address. Each set keeps its tags where they were placed
//! and its recency order as one byte per way, the way's *rank* (0 = most recently used,
//! ways - 1 = least; the ranks of a set are a permutation of 0..ways): a hit gives its
//! way rank 0 and ages the younger ways by one, a miss replaces the tag of the last rank.
//! This is true LRU, the order move-to-front would keep, but an access writes one tag and
//! the set's ranks (one vector store) instead of shifting the tags. The set operations
//! under it are in the crate's `simd` module, one implementation per instruction set.

use crate::simd::{Isa, Scalar};

/// Marker for an empty way.
pub const EMPTY: u32 = u32::MAX;

/// The most ways a set may have (ranks are bytes).
pub const MAX_WAYS: u32 = 256;

/// A set-associative cache with true LRU replacement.
#[derive(Debug, Clone)]
pub struct Cache {
    sets: u64,
    ways: usize,
    /// `sets - 1`, used when `pow2`.
    mask: u64,
    pow2: bool,
    /// `tags[set * ways + way]`: the slot in that way, or [`EMPTY`].
    tags: Aligned<u32>,
    /// `ranks[set * ways + way]`: that way's rank in its set's recency order.
    ranks: Aligned<u8>,
}

/// 64-byte block: sets of 8, 16 or 32 ways (their tags, their ranks) then never straddle a
/// host cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// An array of `len` values of `T` (tags or ranks), 64-byte aligned.
#[derive(Debug, Clone)]
struct Aligned<T> {
    blocks: Vec<Block>,
    len: usize,
    of: std::marker::PhantomData<T>,
}

impl<T: Copy> Aligned<T> {
    /// `len` values, the k-th `value(k)`.
    fn new(len: usize, value: impl Fn(usize) -> T) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        let mut a = Aligned {
            blocks: vec![Block([0; 64]); bytes.div_ceil(64)],
            len,
            of: std::marker::PhantomData,
        };
        a.iter_mut().enumerate().for_each(|(k, x)| *x = value(k));
        a
    }
}

impl<T> std::ops::Deref for Aligned<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `T` is u32 or u8 (no padding, alignment <= 64, any bit pattern valid, as
        // the blocks start zeroed), and `len` values fit in the blocks (`new`).
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr() as *const T, self.len) }
    }
}

impl<T> std::ops::DerefMut for Aligned<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, with unique access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr() as *mut T, self.len) }
    }
}

/// One set: its tags and their ranks (same length).
pub(crate) struct Set<'a> {
    pub(crate) tags: &'a mut [u32],
    pub(crate) ranks: &'a mut [u8],
}

impl<'a> Set<'a> {
    /// The set of `ways` ways starting at `tags` and `ranks`.
    ///
    /// # Safety
    ///
    /// `ways` tags and ranks lie there, and nothing else refers to them while the set is used.
    #[inline(always)]
    pub(crate) unsafe fn from_raw(tags: *mut u32, ranks: *mut u8, ways: usize) -> Self {
        // SAFETY: the caller's contract.
        unsafe {
            Set {
                tags: std::slice::from_raw_parts_mut(tags, ways),
                ranks: std::slice::from_raw_parts_mut(ranks, ways),
            }
        }
    }

    /// Ask the CPU to bring the set's tags into its caches (a hint).
    #[inline(always)]
    fn prefetch_tags(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = self.tags.as_ptr() as *const i8;
            // SAFETY: prefetch never faults.
            unsafe {
                _mm_prefetch(p, _MM_HINT_T0);
                if self.tags.len() > 16 {
                    _mm_prefetch(p.add(64), _MM_HINT_T0);
                }
            }
        }
    }

    /// The rank of `way` (< ways).
    #[inline(always)]
    fn rank(&self, way: usize) -> u8 {
        debug_assert!(way < self.ranks.len());
        // SAFETY: `way` comes from a search of this set.
        unsafe { *self.ranks.get_unchecked(way) }
    }

    /// Put `id` in `way` (< ways); returns what was there.
    #[inline(always)]
    fn replace(&mut self, way: usize, id: u32) -> u32 {
        debug_assert!(way < self.tags.len());
        // SAFETY: `way` comes from a search or a rank update of this set.
        unsafe { std::mem::replace(self.tags.get_unchecked_mut(way), id) }
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
    /// New empty cache of `sets` x `ways` lines (`ways` at most [`MAX_WAYS`]).
    pub fn new(sets: u32, ways: u32) -> Self {
        assert!(ways <= MAX_WAYS, "{ways} ways: ranks are bytes");
        let sets = sets as u64;
        let pow2 = sets.is_power_of_two();
        let mask = sets.wrapping_sub(1);
        let n = (sets as usize) * ways as usize;
        let w = ways as usize;
        Cache {
            sets,
            ways: w,
            mask,
            pow2,
            tags: Aligned::new(n, |_| EMPTY),
            ranks: Aligned::new(n, |k| (k % w) as u8),
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

    /// The tags of the set of `phys`.
    #[inline(always)]
    fn set_tags(&self, phys: u64) -> &[u32] {
        let b = self.base(phys);
        debug_assert!(b + self.ways <= self.tags.len());
        // SAFETY: `base` returns set * ways with set < sets, so b + ways <= sets * ways.
        unsafe { self.tags.get_unchecked(b..b + self.ways) }
    }

    /// The set of `phys`, to change (for the hot paths of [`crate::machine`], which apply
    /// the set operations of their [`Isa`]).
    #[inline(always)]
    pub(crate) fn set_mut(&mut self, phys: u64) -> Set<'_> {
        let b = self.base(phys);
        debug_assert!(b + self.ways <= self.tags.len());
        // SAFETY: as in `set_tags`, for both arrays of sets * ways values, borrowed
        // mutably through `self`.
        unsafe {
            Set::from_raw(
                self.tags.as_mut_ptr().add(b),
                self.ranks.as_mut_ptr().add(b),
                self.ways,
            )
        }
    }

    /// Ask the CPU to bring the set of `phys` into its caches (a hint; no effect on state).
    #[inline(always)]
    pub fn prefetch(&self, phys: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let b = self.base(phys);
            // SAFETY: prefetch never faults; the pointers stay inside the vectors.
            unsafe {
                _mm_prefetch(self.tags.as_ptr().add(b) as *const i8, _MM_HINT_T0);
                if self.ways > 16 {
                    _mm_prefetch(self.tags.as_ptr().add(b + 16) as *const i8, _MM_HINT_T0);
                }
                _mm_prefetch(self.ranks.as_ptr().add(b) as *const i8, _MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = phys;
    }

    /// Whether `id` is present, without changing any state.
    #[inline]
    pub fn contains(&self, phys: u64, id: u32) -> bool {
        Scalar::find(self.set_tags(phys), id).is_some()
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

    /// Pointers to the first tag and the first rank, for [`crate::machine`]'s fixed shapes
    /// (valid while the cache lives: the arrays never reallocate).
    pub(crate) fn set_ptrs(&mut self) -> (*mut u32, *mut u8) {
        (self.tags.as_mut_ptr(), self.ranks.as_mut_ptr())
    }

    /// The set mask (sets - 1) when the number of sets is a power of two.
    pub(crate) fn pow2_mask(&self) -> Option<u64> {
        self.pow2.then_some(self.mask)
    }

    /// Drop every line.
    pub fn clear(&mut self) {
        self.tags.iter_mut().for_each(|t| *t = EMPTY);
        let w = self.ways;
        self.ranks
            .iter_mut()
            .enumerate()
            .for_each(|(k, r)| *r = (k % w) as u8);
    }

    /// Number of valid lines held.
    pub fn occupancy(&self) -> usize {
        self.tags.iter().filter(|&&t| t != EMPTY).count()
    }
}

/// On a set: on a hit make `id` most-recently used. Returns whether it hit.
#[inline(always)]
pub(crate) fn set_touch<I: Isa>(set: Set<'_>, id: u32) -> bool {
    match I::find(set.tags, id) {
        Some(way) => {
            let r = set.rank(way);
            if r != 0 {
                I::promote(set.ranks, r);
            }
            true
        }
        None => false,
    }
}

/// On a set: on a hit take `id` out (`take`: its way emptied and made least-recently
/// used) or make it most-recently used.
#[inline(always)]
pub(crate) fn set_touch_or_take<I: Isa>(mut set: Set<'_>, id: u32, take: bool) -> bool {
    match I::find(set.tags, id) {
        Some(way) => {
            let r = set.rank(way);
            if take {
                set.replace(way, EMPTY);
                I::demote(set.ranks, r);
            } else if r != 0 {
                I::promote(set.ranks, r);
            }
            true
        }
        None => false,
    }
}

/// On a set: insert `id` as most-recently used (promote if present).
#[inline(always)]
pub(crate) fn set_insert<I: Isa>(set: Set<'_>, id: u32) -> Inserted {
    match I::find(set.tags, id) {
        Some(way) => {
            let r = set.rank(way);
            if r != 0 {
                I::promote(set.ranks, r);
            }
            Inserted::Present
        }
        None => set_insert_absent::<I>(set, id),
    }
}

/// On a set: insert `id` known to be absent, in the way of the least-recently-used line
/// (empty ways hold the last ranks, so an empty way is taken while there is one).
#[inline(always)]
pub(crate) fn set_insert_absent<I: Isa>(mut set: Set<'_>, id: u32) -> Inserted {
    // the way to read depends on the ranks: fetch the tags meanwhile, so that the two
    // loads are not one host cache miss after the other
    set.prefetch_tags();
    let way = I::recycle(set.ranks);
    let old = set.replace(way, id);
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

    /// The order a move-to-front list keeps: what the ranks must give, exactly.
    #[test]
    fn ranks_give_the_move_to_front_order() {
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
