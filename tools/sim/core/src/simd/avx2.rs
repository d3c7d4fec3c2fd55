//! The set operations with AVX2.
//!
//! Tags: 8-lane compares and a movemask. Ranks (one byte per way): the 8 or 16 ranks of
//! a set in one SSE register, 32 in one AVX2 register; each update is a compare against
//! the rank, an add of the compare mask and one store. Other widths: the portable code.

use std::arch::x86_64::*;

/// Index of `id` in `tags`.
#[inline(always)]
pub fn find(tags: &[u32], id: u32) -> Option<usize> {
    let n = tags.len();
    if n != 8 && n != 16 && n != 32 {
        return super::scalar::find(tags, id);
    }
    // SAFETY: n / 8 whole 8-lane groups lie inside `tags`.
    let m = unsafe {
        let needle = _mm256_set1_epi32(id as i32);
        let p = tags.as_ptr() as *const __m256i;
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

/// The ranks as one register (lanes past `ranks` zero), for 8, 16 or 32 ways.
///
/// # Safety
///
/// `ranks` has 8, 16 or 32 bytes; AVX2 is enabled in the caller.
#[inline(always)]
unsafe fn load(ranks: &[u8]) -> __m256i {
    let p = ranks.as_ptr();
    // SAFETY: each branch reads exactly the `ranks.len()` bytes.
    unsafe {
        match ranks.len() {
            8 => _mm256_zextsi128_si256(_mm_loadl_epi64(p as *const __m128i)),
            16 => _mm256_zextsi128_si256(_mm_loadu_si128(p as *const __m128i)),
            _ => _mm256_loadu_si256(p as *const __m256i),
        }
    }
}

/// Store the first `ranks.len()` lanes of `x` into `ranks`. Safety: as [`load`].
#[inline(always)]
unsafe fn store(ranks: &mut [u8], x: __m256i) {
    let p = ranks.as_mut_ptr();
    // SAFETY: each branch writes exactly the `ranks.len()` bytes.
    unsafe {
        match ranks.len() {
            8 => _mm_storel_epi64(p as *mut __m128i, _mm256_castsi256_si128(x)),
            16 => _mm_storeu_si128(p as *mut __m128i, _mm256_castsi256_si128(x)),
            _ => _mm256_storeu_si256(p as *mut __m256i, x),
        }
    }
}

/// Whether the ranks fit one register: 8, 16 or 32 ways (ranks below 32, so the signed
/// byte compares order them).
#[inline(always)]
fn fits(ranks: &[u8]) -> bool {
    matches!(ranks.len(), 8 | 16 | 32)
}

/// The way of rank `r` becomes rank 0; the ranks below `r` grow by one.
#[inline(always)]
pub fn promote(ranks: &mut [u8], r: u8) {
    if !fits(ranks) {
        return super::scalar::promote(ranks, r);
    }
    // SAFETY: 8, 16 or 32 ranks; AVX2 is enabled in the caller (this module's contract).
    unsafe {
        let x = load(ranks);
        let rv = _mm256_set1_epi8(r as i8);
        let below = _mm256_cmpgt_epi8(rv, x);
        let hit = _mm256_cmpeq_epi8(x, rv);
        store(ranks, _mm256_andnot_si256(hit, _mm256_sub_epi8(x, below)));
    }
}

/// The way of the last rank becomes rank 0, every other rank grows by one; returns that way.
#[inline(always)]
pub fn recycle(ranks: &mut [u8]) -> usize {
    if !fits(ranks) {
        return super::scalar::recycle(ranks);
    }
    let last = ranks.len() as i8 - 1;
    // SAFETY: as in `promote`.
    unsafe {
        let x = load(ranks);
        let lru = _mm256_cmpeq_epi8(x, _mm256_set1_epi8(last));
        let aged = _mm256_add_epi8(x, _mm256_set1_epi8(1));
        store(ranks, _mm256_andnot_si256(lru, aged));
        (_mm256_movemask_epi8(lru) as u32).trailing_zeros() as usize
    }
}

/// The way of rank `r` takes the last rank; the ranks above `r` shrink by one.
#[inline(always)]
pub fn demote(ranks: &mut [u8], r: u8) {
    if !fits(ranks) {
        return super::scalar::demote(ranks, r);
    }
    let last = ranks.len() as i8 - 1;
    // SAFETY: as in `promote`.
    unsafe {
        let x = load(ranks);
        let rv = _mm256_set1_epi8(r as i8);
        let above = _mm256_cmpgt_epi8(x, rv);
        let hit = _mm256_cmpeq_epi8(x, rv);
        let moved = _mm256_add_epi8(x, above);
        store(ranks, _mm256_blendv_epi8(moved, _mm256_set1_epi8(last), hit));
    }
}
