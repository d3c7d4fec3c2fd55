//! The set operations with AVX2.
//!
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
