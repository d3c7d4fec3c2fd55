//! The tag search with AVX-512 (F and VL); the rank updates are the AVX2 ones (`avx2`),
//! as a set's ranks fit one AVX2 register.
//!
//! Sets of 8, 16 and 32 ways are compared in one to four vector registers, giving a lane
//! mask. Other widths: the search goes 16 lanes at a time (a masked load for a partial
//! last group).

use std::arch::x86_64::*;

/// Mask of the first `n` lanes of a 16-lane group (all of them when `n >= 16`).
#[inline(always)]
fn lanes(n: usize) -> u16 {
    if n >= 16 {
        0xFFFF
    } else {
        ((1u32 << n) - 1) as u16
    }
}

/// Index of `id` in `tags`.
#[inline(always)]
pub fn find(tags: &[u32], id: u32) -> Option<usize> {
    let n = tags.len();
    // SAFETY: full loads only when 8 or 16 lanes lie inside `tags`; otherwise the
    // masked loads read only the `k` lanes inside it.
    unsafe {
        if n == 8 {
            let v = _mm256_loadu_si256(tags.as_ptr() as *const __m256i);
            let m = _mm256_cmpeq_epi32_mask(v, _mm256_set1_epi32(id as i32));
            return if m == 0 {
                None
            } else {
                Some(m.trailing_zeros() as usize)
            };
        }
        let needle = _mm512_set1_epi32(id as i32);
        if n == 16 {
            let v = _mm512_loadu_si512(tags.as_ptr() as *const __m512i);
            let m = _mm512_cmpeq_epi32_mask(v, needle);
            return if m == 0 {
                None
            } else {
                Some(m.trailing_zeros() as usize)
            };
        }
        if n == 32 {
            let p = tags.as_ptr() as *const __m256i;
            let nd = _mm256_set1_epi32(id as i32);
            let m = (_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p), nd) as u32)
                | ((_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p.add(1)), nd) as u32) << 8)
                | ((_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p.add(2)), nd) as u32) << 16)
                | ((_mm256_cmpeq_epi32_mask(_mm256_loadu_si256(p.add(3)), nd) as u32) << 24);
            return if m == 0 {
                None
            } else {
                Some(m.trailing_zeros() as usize)
            };
        }
        let mut off = 0;
        while off < n {
            let m = if n - off >= 16 {
                let v = _mm512_loadu_si512(tags.as_ptr().add(off) as *const __m512i);
                _mm512_cmpeq_epi32_mask(v, needle)
            } else {
                let k = lanes(n - off);
                let v = _mm512_maskz_loadu_epi32(k, tags.as_ptr().add(off) as *const i32);
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
