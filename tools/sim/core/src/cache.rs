//! One set-associative LRU cache instance.
//!
//! Lines are identified by a dense 32-bit *slot* id (see [`crate::machine`]) and placed in
//! a set by their physical line address. Each set keeps its ways ordered from most- to
//! least-recently used (move to front): a hit rotates the prefix, a miss shifts the set
//! and drops the last way. This is true LRU.

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

    /// Associativity: `W` when the caller knows it at compile time, else the runtime value.
    #[inline(always)]
    fn w<const W: usize>(&self) -> usize {
        debug_assert!(W == 0 || W == self.ways);
        if W == 0 {
            self.ways
        } else {
            W
        }
    }

    #[inline(always)]
    fn base(&self, phys: u64) -> usize {
        self.base_w::<0>(phys)
    }

    #[inline(always)]
    fn base_w<const W: usize>(&self, phys: u64) -> usize {
        let set = if self.pow2 {
            phys & self.mask
        } else {
            phys % self.sets
        } as usize;
        set * self.w::<W>()
    }

    /// The ways of the set starting at `b` (a value of [`Cache::base`]).
    #[inline(always)]
    fn set<const W: usize>(&self, b: usize) -> &[u32] {
        let w = self.w::<W>();
        debug_assert!(b + w <= self.tags.len());
        // SAFETY: `base` returns set * ways with set < sets, so b + ways <= sets * ways.
        unsafe { self.tags.get_unchecked(b..b + w) }
    }

    /// Mutable ways of the set starting at `b` (a value of [`Cache::base`]).
    #[inline(always)]
    fn set_mut<const W: usize>(&mut self, b: usize) -> &mut [u32] {
        let w = self.w::<W>();
        debug_assert!(b + w <= self.tags.len());
        // SAFETY: as in `set`.
        unsafe { self.tags.get_unchecked_mut(b..b + w) }
    }

    #[inline(always)]
    fn find<I: Isa, const W: usize>(&self, base: usize, id: u32) -> Option<usize> {
        I::find(self.set::<W>(base), id)
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
        self.contains_i::<Scalar, 0>(phys, id)
    }

    /// [`Cache::contains`] with the set operations of `I`.
    #[inline(always)]
    pub(crate) fn contains_i<I: Isa, const W: usize>(&self, phys: u64, id: u32) -> bool {
        self.find::<I, W>(self.base_w::<W>(phys), id).is_some()
    }

    /// Look `id` up; on a hit make it most-recently used. Returns whether it hit.
    #[inline]
    pub fn touch(&mut self, phys: u64, id: u32) -> bool {
        self.touch_i::<Scalar, 0>(phys, id)
    }

    /// [`Cache::touch`] with the set operations of `I`.
    #[inline(always)]
    pub(crate) fn touch_i<I: Isa, const W: usize>(&mut self, phys: u64, id: u32) -> bool {
        let b = self.base_w::<W>(phys);
        set_touch::<I>(self.set_mut::<W>(b), id)
    }

    /// Look `id` up; on a hit either take it out (`take`) or make it most-recently used.
    /// Returns whether it hit. Same as [`Cache::touch`] then, if `take`, [`Cache::remove`].
    #[inline]
    pub fn touch_or_take(&mut self, phys: u64, id: u32, take: bool) -> bool {
        self.touch_or_take_i::<Scalar, 0>(phys, id, take)
    }

    /// [`Cache::touch_or_take`] with the set operations of `I`.
    #[inline(always)]
    pub(crate) fn touch_or_take_i<I: Isa, const W: usize>(
        &mut self,
        phys: u64,
        id: u32,
        take: bool,
    ) -> bool {
        let b = self.base_w::<W>(phys);
        set_touch_or_take::<I>(self.set_mut::<W>(b), id, take)
    }

    /// Remove `id` if present. Returns whether it was present.
    #[inline]
    pub fn remove(&mut self, phys: u64, id: u32) -> bool {
        self.remove_i::<Scalar, 0>(phys, id)
    }

    /// [`Cache::remove`] with the set operations of `I`.
    #[inline(always)]
    pub(crate) fn remove_i<I: Isa, const W: usize>(&mut self, phys: u64, id: u32) -> bool {
        let b = self.base_w::<W>(phys);
        set_touch_or_take::<I>(self.set_mut::<W>(b), id, true)
    }

    /// Insert `id` as most-recently used (promote if present).
    #[inline]
    pub fn insert(&mut self, phys: u64, id: u32) -> Inserted {
        self.insert_i::<Scalar, 0>(phys, id)
    }

    /// [`Cache::insert`] with the set operations of `I`.
    #[inline(always)]
    pub(crate) fn insert_i<I: Isa, const W: usize>(&mut self, phys: u64, id: u32) -> Inserted {
        let b = self.base_w::<W>(phys);
        set_insert::<I>(self.set_mut::<W>(b), id)
    }

    /// Insert `id` known to be absent (the caller has just looked it up).
    #[inline]
    pub fn insert_absent(&mut self, phys: u64, id: u32) -> Inserted {
        self.insert_absent_i::<Scalar, 0>(phys, id)
    }

    /// [`Cache::insert_absent`] with the set operations of `I`.
    #[inline(always)]
    pub(crate) fn insert_absent_i<I: Isa, const W: usize>(
        &mut self,
        phys: u64,
        id: u32,
    ) -> Inserted {
        let b = self.base_w::<W>(phys);
        set_insert_absent::<I>(self.set_mut::<W>(b), id)
    }

    /// Pointer to the first tag, for [`crate::machine`]'s specialised path (valid while
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

/// The set operations (find a tag, move a way to the front, remove a way), in one
/// implementation per instruction set. The hot paths are generic over it and compiled once
/// per implementation; [`crate::machine::Machine`] picks one at run time
/// (`is_x86_feature_detected!`), so the build needs no `target-cpu`.
pub(crate) trait Isa {
    /// Index of `id` in `set`.
    fn find(set: &[u32], id: u32) -> Option<usize>;
    /// Move `set[0..upto]` to `set[1..=upto]` and put `id` in `set[0]`.
    fn push_front(set: &mut [u32], upto: usize, id: u32);
    /// Move `set[i+1..]` to `set[i..len-1]` and empty the last way.
    fn pull_down(set: &mut [u32], i: usize);
}

/// Portable code (any CPU).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scalar;

impl Isa for Scalar {
    #[inline(always)]
    fn find(set: &[u32], id: u32) -> Option<usize> {
        simd::scalar::find(set, id)
    }
    #[inline(always)]
    fn push_front(set: &mut [u32], upto: usize, id: u32) {
        simd::scalar::push_front(set, upto, id)
    }
    #[inline(always)]
    fn pull_down(set: &mut [u32], i: usize) {
        simd::scalar::pull_down(set, i)
    }
}

/// AVX-512 (F and VL). Only valid inside functions compiled with
/// `#[target_feature(enable = "avx512f,avx512vl")]` on a CPU that has them.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Isa for Avx512 {
    #[inline(always)]
    fn find(set: &[u32], id: u32) -> Option<usize> {
        simd::avx512::find(set, id)
    }
    #[inline(always)]
    fn push_front(set: &mut [u32], upto: usize, id: u32) {
        simd::avx512::push_front(set, upto, id)
    }
    #[inline(always)]
    fn pull_down(set: &mut [u32], i: usize) {
        simd::avx512::pull_down(set, i)
    }
}

/// AVX2. Only valid inside functions compiled with `#[target_feature(enable = "avx2")]`
/// on a CPU that has it.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Isa for Avx2 {
    #[inline(always)]
    fn find(set: &[u32], id: u32) -> Option<usize> {
        simd::avx2::find(set, id)
    }
    #[inline(always)]
    fn push_front(set: &mut [u32], upto: usize, id: u32) {
        simd::avx2::push_front(set, upto, id)
    }
    #[inline(always)]
    fn pull_down(set: &mut [u32], i: usize) {
        simd::avx2::pull_down(set, i)
    }
}

/// Whether this CPU can run the [`Avx2`] set operations.
pub(crate) fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU can run the [`Avx512`] set operations.
pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

mod simd {
    #[cfg(target_arch = "x86_64")]
    pub(super) mod avx512 {
        use std::arch::x86_64::*;

        #[inline(always)]
        fn lanes(n: usize) -> u16 {
            if n >= 16 {
                0xFFFF
            } else {
                ((1u32 << n) - 1) as u16
            }
        }

        /// Index of `id` in `set`.
        #[inline(always)]
        pub fn find(set: &[u32], id: u32) -> Option<usize> {
            let n = set.len();
            // SAFETY: full loads only when 8 or 16 lanes lie inside `set`; otherwise the
            // masked loads read only the `k` lanes inside it.
            unsafe {
                if n == 8 {
                    let v = _mm256_loadu_si256(set.as_ptr() as *const __m256i);
                    let m = _mm256_cmpeq_epi32_mask(v, _mm256_set1_epi32(id as i32));
                    return if m == 0 {
                        None
                    } else {
                        Some(m.trailing_zeros() as usize)
                    };
                }
                let needle = _mm512_set1_epi32(id as i32);
                if n == 16 {
                    let v = _mm512_loadu_si512(set.as_ptr() as *const __m512i);
                    let m = _mm512_cmpeq_epi32_mask(v, needle);
                    return if m == 0 {
                        None
                    } else {
                        Some(m.trailing_zeros() as usize)
                    };
                }
                if n == 32 {
                    let p = set.as_ptr() as *const __m256i;
                    let nd = _mm256_set1_epi32(id as i32);
                    let m = (_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p), nd) as u32)
                        | ((_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p.add(1)), nd) as u32) << 8)
                        | ((_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p.add(2)), nd) as u32)
                            << 16)
                        | ((_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p.add(3)), nd) as u32)
                            << 24);
                    return if m == 0 {
                        None
                    } else {
                        Some(m.trailing_zeros() as usize)
                    };
                }
                let mut off = 0;
                while off < n {
                    let m = if n - off >= 16 {
                        let v = _mm512_loadu_si512(set.as_ptr().add(off) as *const __m512i);
                        _mm512_cmpeq_epi32_mask(v, needle)
                    } else {
                        let k = lanes(n - off);
                        let v = _mm512_maskz_loadu_epi32(k, set.as_ptr().add(off) as *const i32);
                        _mm512_mask_cmpeq_epi32_mask(k, v, needle)
                    };
                    if m != 0 {
                        return Some(off + m.trailing_zeros() as usize);
                    }
                    off += 16;
                }
                None
            }
        }

        /// Move `set[0..upto]` to `set[1..=upto]` and put `id` in `set[0]`.
        #[inline(always)]
        pub fn push_front(set: &mut [u32], upto: usize, id: u32) {
            let n = set.len();
            // SAFETY: the vector paths load and store whole 8- or 16-lane groups that lie
            // inside `set` (n == 8, or n a multiple of 16); groups are written from the
            // last to the first, and each group reads its lower neighbour before that
            // neighbour is written.
            unsafe {
                if n == 8 {
                    let p = set.as_mut_ptr() as *mut __m256i;
                    let v = _mm256_loadu_si256(p);
                    let shifted = _mm256_alignr_epi32(v, _mm256_set1_epi32(id as i32), 7);
                    let keep = (0xFFu32 << (upto + 1)) as u8; // lanes above `upto` stay
                    _mm256_storeu_si256(p, _mm256_mask_blend_epi32(keep, shifted, v));
                    return;
                }
                if n == 32 {
                    // branch-free, in 8-lane groups: lanes above `upto` kept
                    let p = set.as_mut_ptr() as *mut __m256i;
                    let keep_all = ((!0u64) << (upto + 1)) as u32;
                    let v0 = _mm256_loadu_si256(p);
                    let v1 = _mm256_loadu_si256(p.add(1));
                    let v2 = _mm256_loadu_si256(p.add(2));
                    let v3 = _mm256_loadu_si256(p.add(3));
                    let s0 = _mm256_alignr_epi32(v0, _mm256_set1_epi32(id as i32), 7);
                    let s1 = _mm256_alignr_epi32(v1, v0, 7);
                    let s2 = _mm256_alignr_epi32(v2, v1, 7);
                    let s3 = _mm256_alignr_epi32(v3, v2, 7);
                    _mm256_storeu_si256(p, _mm256_mask_blend_epi32(keep_all as u8, s0, v0));
                    _mm256_storeu_si256(
                        p.add(1),
                        _mm256_mask_blend_epi32((keep_all >> 8) as u8, s1, v1),
                    );
                    _mm256_storeu_si256(
                        p.add(2),
                        _mm256_mask_blend_epi32((keep_all >> 16) as u8, s2, v2),
                    );
                    _mm256_storeu_si256(
                        p.add(3),
                        _mm256_mask_blend_epi32((keep_all >> 24) as u8, s3, v3),
                    );
                    return;
                }
                if n == 16 || n == 32 {
                    // branch-free: every group is rewritten, lanes above `upto` kept
                    let p = set.as_mut_ptr() as *mut i32;
                    let a = _mm512_loadu_si512(p as *const __m512i);
                    let idv = _mm512_set1_epi32(id as i32);
                    let keep_all = ((!0u64) << (upto + 1)) as u32;
                    let sa = _mm512_alignr_epi32(a, idv, 15);
                    if n == 32 {
                        let b = _mm512_loadu_si512(p.add(16) as *const __m512i);
                        let sb = _mm512_alignr_epi32(b, a, 15);
                        let kb = (keep_all >> 16) as u16;
                        _mm512_storeu_si512(
                            p.add(16) as *mut __m512i,
                            _mm512_mask_blend_epi32(kb, sb, b),
                        );
                    }
                    _mm512_storeu_si512(
                        p as *mut __m512i,
                        _mm512_mask_blend_epi32(keep_all as u16, sa, a),
                    );
                    return;
                }
                if n.is_multiple_of(16) {
                    let p = set.as_mut_ptr() as *mut i32;
                    let mut c = upto / 16;
                    loop {
                        let v = _mm512_loadu_si512(p.add(16 * c) as *const __m512i);
                        let prev = if c == 0 {
                            _mm512_set1_epi32(id as i32)
                        } else {
                            _mm512_loadu_si512(p.add(16 * (c - 1)) as *const __m512i)
                        };
                        let shifted = _mm512_alignr_epi32(v, prev, 15);
                        let first_kept = (upto + 1).saturating_sub(16 * c).min(16);
                        let keep = (0xFFFFu32 << first_kept) as u16;
                        let out = _mm512_mask_blend_epi32(keep, shifted, v);
                        _mm512_storeu_si512(p.add(16 * c) as *mut __m512i, out);
                        if c == 0 {
                            break;
                        }
                        c -= 1;
                    }
                    return;
                }
            }
            set.copy_within(0..upto, 1);
            set[0] = id;
        }

        /// Move `set[i+1..]` to `set[i..len-1]` and empty the last way.
        #[inline(always)]
        pub fn pull_down(set: &mut [u32], i: usize) {
            let n = set.len();
            // SAFETY: whole 8- or 16-lane groups inside `set` (n == 8, or n a multiple of
            // 16); groups are written from the first to the last, and each group reads its
            // upper neighbour before that neighbour is written.
            unsafe {
                if n == 8 {
                    let p = set.as_mut_ptr() as *mut __m256i;
                    let v = _mm256_loadu_si256(p);
                    let shifted = _mm256_alignr_epi32(_mm256_set1_epi32(-1), v, 1);
                    let keep = ((1u32 << i) - 1) as u8; // lanes below `i` stay
                    _mm256_storeu_si256(p, _mm256_mask_blend_epi32(keep, shifted, v));
                    return;
                }
                if n == 16 || n == 32 {
                    // branch-free: every group is rewritten, lanes below `i` kept
                    let p = set.as_mut_ptr() as *mut i32;
                    let a = _mm512_loadu_si512(p as *const __m512i);
                    let empty = _mm512_set1_epi32(-1);
                    let keep_all = ((1u64 << i) - 1) as u32;
                    if n == 32 {
                        let b = _mm512_loadu_si512(p.add(16) as *const __m512i);
                        let sa = _mm512_alignr_epi32(b, a, 1);
                        let sb = _mm512_alignr_epi32(empty, b, 1);
                        _mm512_storeu_si512(
                            p as *mut __m512i,
                            _mm512_mask_blend_epi32(keep_all as u16, sa, a),
                        );
                        _mm512_storeu_si512(
                            p.add(16) as *mut __m512i,
                            _mm512_mask_blend_epi32((keep_all >> 16) as u16, sb, b),
                        );
                    } else {
                        let sa = _mm512_alignr_epi32(empty, a, 1);
                        _mm512_storeu_si512(
                            p as *mut __m512i,
                            _mm512_mask_blend_epi32(keep_all as u16, sa, a),
                        );
                    }
                    return;
                }
                if n.is_multiple_of(16) {
                    let p = set.as_mut_ptr() as *mut i32;
                    let groups = n / 16;
                    for c in i / 16..groups {
                        let v = _mm512_loadu_si512(p.add(16 * c) as *const __m512i);
                        let next = if c + 1 == groups {
                            _mm512_set1_epi32(-1)
                        } else {
                            _mm512_loadu_si512(p.add(16 * (c + 1)) as *const __m512i)
                        };
                        let shifted = _mm512_alignr_epi32(next, v, 1);
                        let below = i.saturating_sub(16 * c).min(16);
                        let keep = ((1u32 << below) - 1) as u16;
                        let out = _mm512_mask_blend_epi32(keep, shifted, v);
                        _mm512_storeu_si512(p.add(16 * c) as *mut __m512i, out);
                    }
                    return;
                }
            }
            set.copy_within(i + 1..n, i);
            set[n - 1] = u32::MAX;
        }
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) mod avx2 {
        //! 8-lane groups: compare + movemask; shifts by a lane permute, the lane crossing
        //! into the next group by a blend, and a per-lane select against the lane index.
        use std::arch::x86_64::*;

        /// Index of `id` in `set`.
        #[inline(always)]
        pub fn find(set: &[u32], id: u32) -> Option<usize> {
            let n = set.len();
            if n != 8 && n != 16 && n != 32 {
                return super::scalar::find(set, id);
            }
            // SAFETY: n / 8 whole 8-lane groups lie inside `set`.
            let m = unsafe {
                let needle = _mm256_set1_epi32(id as i32);
                let p = set.as_ptr() as *const __m256i;
                let mut m = 0u32;
                for g in 0..n / 8 {
                    let eq = _mm256_cmpeq_epi32(_mm256_loadu_si256(p.add(g)), needle);
                    m |= (_mm256_movemask_ps(_mm256_castsi256_ps(eq)) as u32) << (8 * g);
                }
                m
            };
            if m == 0 {
                None
            } else {
                Some(m.trailing_zeros() as usize)
            }
        }

        /// Move `set[0..upto]` to `set[1..=upto]` and put `id` in `set[0]`.
        #[inline(always)]
        pub fn push_front(set: &mut [u32], upto: usize, id: u32) {
            let n = set.len();
            if n != 8 && n != 16 && n != 32 {
                return super::scalar::push_front(set, upto, id);
            }
            // SAFETY: n / 8 whole 8-lane groups inside `set`, all loaded before any store.
            unsafe {
                let p = set.as_mut_ptr() as *mut __m256i;
                let mut v = [_mm256_setzero_si256(); 4];
                for (g, x) in v.iter_mut().enumerate().take(n / 8) {
                    *x = _mm256_loadu_si256(p.add(g));
                }
                let rot = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
                let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                let last = _mm256_set1_epi32(7);
                let mut carry = _mm256_set1_epi32(id as i32);
                for (g, &x) in v.iter().enumerate().take(n / 8) {
                    let r = _mm256_permutevar8x32_epi32(x, rot);
                    let shifted = _mm256_blend_epi32::<1>(r, carry);
                    carry = _mm256_permutevar8x32_epi32(x, last);
                    // lanes at or below `upto` take the shifted value
                    let bound = _mm256_set1_epi32(upto as i32 - 8 * g as i32 + 1);
                    let take = _mm256_cmpgt_epi32(bound, lane);
                    let out = _mm256_blendv_epi8(x, shifted, take);
                    _mm256_storeu_si256(p.add(g), out);
                }
            }
        }

        /// Move `set[i+1..]` to `set[i..len-1]` and empty the last way.
        #[inline(always)]
        pub fn pull_down(set: &mut [u32], i: usize) {
            let n = set.len();
            if n != 8 && n != 16 && n != 32 {
                return super::scalar::pull_down(set, i);
            }
            // SAFETY: as in `push_front`.
            unsafe {
                let p = set.as_mut_ptr() as *mut __m256i;
                let groups = n / 8;
                let mut v = [_mm256_setzero_si256(); 4];
                for (g, x) in v.iter_mut().enumerate().take(groups) {
                    *x = _mm256_loadu_si256(p.add(g));
                }
                let rot = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
                let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                let first = _mm256_setzero_si256();
                for g in 0..groups {
                    let x = v[g];
                    let next = if g + 1 < groups {
                        _mm256_permutevar8x32_epi32(v[g + 1], first)
                    } else {
                        _mm256_set1_epi32(-1)
                    };
                    let r = _mm256_permutevar8x32_epi32(x, rot);
                    let shifted = _mm256_blend_epi32::<0x80>(r, next);
                    // lanes at or above `i` take the shifted value
                    let bound = _mm256_set1_epi32(i as i32 - 8 * g as i32 - 1);
                    let take = _mm256_cmpgt_epi32(lane, bound);
                    let out = _mm256_blendv_epi8(x, shifted, take);
                    _mm256_storeu_si256(p.add(g), out);
                }
            }
        }
    }

    pub(super) mod scalar {
        //! Plain Rust. For 8, 16 and 32 ways the tag compare has a fixed trip count and no
        //! early exit, so the compiler turns it into SSE2 compares and a mask (measured: a
        //! select-based shift was slower than `copy_within` here).

        /// Move `set[i+1..]` to `set[i..len-1]` and empty the last way.
        #[inline(always)]
        pub fn pull_down(set: &mut [u32], i: usize) {
            let n = set.len();
            set.copy_within(i + 1..n, i);
            set[n - 1] = u32::MAX;
        }

        /// Move `set[0..upto]` to `set[1..=upto]` and put `id` in `set[0]`.
        #[inline(always)]
        pub fn push_front(set: &mut [u32], upto: usize, id: u32) {
            set.copy_within(0..upto, 1);
            set[0] = id;
        }

        /// Index of `id` in `set`.
        #[inline(always)]
        pub fn find(set: &[u32], id: u32) -> Option<usize> {
            let mask = match set.len() {
                8 => mask_n::<8>(set.try_into().expect("8 ways"), id),
                16 => mask_n::<16>(set.try_into().expect("16 ways"), id),
                32 => mask_n::<32>(set.try_into().expect("32 ways"), id),
                _ => return set.iter().position(|&t| t == id),
            };
            if mask == 0 {
                None
            } else {
                Some(mask.trailing_zeros() as usize)
            }
        }

        /// Bit k set when `set[k] == id`.
        #[inline(always)]
        fn mask_n<const N: usize>(set: &[u32; N], id: u32) -> u32 {
            let mut m = 0u32;
            for (k, &t) in set.iter().enumerate() {
                m |= ((t == id) as u32) << k;
            }
            m
        }
    }

    #[cfg(test)]
    mod tests {
        type Find = fn(&[u32], u32) -> Option<usize>;
        type PullDown = fn(&mut [u32], usize);
        type PushFront = fn(&mut [u32], usize, u32);

        fn agrees_with_reference(find: Find, pull_down: PullDown, push_front: PushFront) {
            let mut rng = crate::rng::Rng::new(9);
            for len in [1usize, 3, 8, 15, 16, 17, 24, 32, 40] {
                for _ in 0..200 {
                    let v: Vec<u32> = (0..len).map(|_| rng.below(20) as u32).collect();
                    let id = rng.below(20) as u32;
                    assert_eq!(find(&v, id), v.iter().position(|&t| t == id));
                    for i in 0..len {
                        let mut a = v.clone();
                        let mut b = v.clone();
                        pull_down(&mut a, i);
                        b.copy_within(i + 1..len, i);
                        b[len - 1] = u32::MAX;
                        assert_eq!(a, b, "pull_down len {len} i {i}");
                    }
                    for upto in 0..len {
                        let mut a = v.clone();
                        let mut b = v.clone();
                        push_front(&mut a, upto, 77);
                        b.copy_within(0..upto, 1);
                        b[0] = 77;
                        assert_eq!(a, b, "len {len} upto {upto}");
                    }
                }
            }
        }

        #[test]
        fn portable_set_operations_agree_with_the_reference() {
            use super::scalar::{find, pull_down, push_front};
            agrees_with_reference(find, pull_down, push_front);
        }

        #[cfg(target_arch = "x86_64")]
        #[test]
        fn avx2_set_operations_agree_with_the_reference() {
            if !super::super::has_avx2() {
                return;
            }
            #[target_feature(enable = "avx2")]
            fn run() {
                use super::avx2::{find, pull_down, push_front};
                agrees_with_reference(find, pull_down, push_front);
            }
            // SAFETY: the CPU has AVX2.
            unsafe { run() };
        }

        #[cfg(target_arch = "x86_64")]
        #[test]
        fn avx512_set_operations_agree_with_the_reference() {
            if !super::super::has_avx512() {
                return;
            }
            use super::avx512::{find, pull_down, push_front};
            agrees_with_reference(find, pull_down, push_front);
        }
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
}
