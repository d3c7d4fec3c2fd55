//! The set operations in plain Rust, for any CPU.
//!
//! For 8, 16 and 32 ways the tag compare has a fixed trip count and no early exit, so the
//! compiler turns it into SSE2 compares and a mask; the rank updates are branch-free
//! selects over the ranks, which it vectorises the same way.

/// Index of `id` in `tags`.
#[inline(always)]
pub fn find(tags: &[u32], id: u32) -> Option<usize> {
    let mask = match tags.len() {
        8 => mask_n::<8>(tags.try_into().expect("8 ways"), id),
        16 => mask_n::<16>(tags.try_into().expect("16 ways"), id),
        32 => mask_n::<32>(tags.try_into().expect("32 ways"), id),
        _ => return tags.iter().position(|&t| t == id),
    };
    if mask == 0 {
        None
    } else {
        Some(mask.trailing_zeros() as usize)
    }
}

/// Bit k set when `tags[k] == id`.
#[inline(always)]
fn mask_n<const N: usize>(tags: &[u32; N], id: u32) -> u32 {
    let mut m = 0u32;
    for (k, &t) in tags.iter().enumerate() {
        m |= ((t == id) as u32) << k;
    }
    m
}

/// The way of rank `r` becomes rank 0; the ranks below `r` grow by one.
#[inline(always)]
pub fn promote(ranks: &mut [u8], r: u8) {
    for x in ranks.iter_mut() {
        *x = if *x == r { 0 } else { *x + (*x < r) as u8 };
    }
}

/// The way of the last rank becomes rank 0, every other rank grows by one; returns that way.
#[inline(always)]
pub fn recycle(ranks: &mut [u8]) -> usize {
    let last = (ranks.len() - 1) as u8;
    let mut way = 0;
    for (k, x) in ranks.iter_mut().enumerate() {
        if *x == last {
            way = k;
        }
        *x = if *x == last { 0 } else { *x + 1 };
    }
    way
}

/// The way of rank `r` takes the last rank; the ranks above `r` shrink by one.
#[inline(always)]
pub fn demote(ranks: &mut [u8], r: u8) {
    let last = (ranks.len() - 1) as u8;
    for x in ranks.iter_mut() {
        *x = if *x == r { last } else { *x - (*x > r) as u8 };
    }
}
