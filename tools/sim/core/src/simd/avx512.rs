//! The set operations with AVX-512 (F and VL).
//!
//! Sets of 8, 16 and 32 ways are held in one or two vector registers (256 bits for 8
//! ways, else 512): compares give a lane mask, shifts are lane alignments blended under a
//! mask. (32 ways as four 256-bit groups took about 15% longer per access on
//! `opteron-16`, whose victim L3 is 32-way.) Other widths: the search
//! goes 16 lanes at a time (a masked load for a partial last group); the shifts do so
//! for multiples of 16 and copy otherwise.

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
            let p = set.as_ptr() as *const __m512i;
            let m = (_mm512_cmpeq_epi32_mask(_mm512_loadu_si512(p), needle) as u32)
                | ((_mm512_cmpeq_epi32_mask(_mm512_loadu_si512(p.add(1)), needle) as u32) << 16);
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
