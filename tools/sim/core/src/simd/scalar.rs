//! The set operations in plain Rust, for any CPU.
//!
//! For 8, 16 and 32 ways the tag compare has a fixed trip count and no early exit, so the
//! compiler turns it into SSE2 compares and a mask (measured: a select-based shift was
//! slower than `copy_within` here).

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
