//! The set operations (find a tag; reorder the ways' LRU ranks), in one implementation per
//! instruction set, and which of them the running CPU can use.
//!
//! A set's recency order is one byte per way, its rank (0 = most recently used, ways - 1 =
//! least), a permutation of 0..ways; see [`crate::cache`]. The hot paths are generic over
//! [`Isa`] and compiled once per implementation; [`crate::machine::Machine`] picks one at
//! run time (`is_x86_feature_detected!`), so the build needs no `target-cpu`. Every
//! implementation gives the same results.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

/// The set operations of one instruction set: a search of one set's tags, and updates of
/// its ranks (a permutation of 0..len).
pub(crate) trait Isa {
    /// Index of `id` in `tags`.
    fn find(tags: &[u32], id: u32) -> Option<usize>;
    /// The way of rank `r` becomes rank 0 (most recently used); the ranks below `r` grow
    /// by one.
    fn promote(ranks: &mut [u8], r: u8);
    /// The way of the last rank (least recently used) becomes rank 0, every other rank
    /// grows by one; returns that way.
    fn recycle(ranks: &mut [u8]) -> usize;
    /// The way of rank `r` takes the last rank; the ranks above `r` shrink by one.
    fn demote(ranks: &mut [u8], r: u8);
}

/// Implement [`Isa`] for `$isa`: the tag search of module `$find`, the rank updates of
/// module `$ranks`.
macro_rules! isa {
    ($(#[$attr:meta])* $isa:ident, $find:ident, $ranks:ident) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $isa;

        $(#[$attr])*
        impl Isa for $isa {
            #[inline(always)]
            fn find(tags: &[u32], id: u32) -> Option<usize> {
                $find::find(tags, id)
            }
            #[inline(always)]
            fn promote(ranks: &mut [u8], r: u8) {
                $ranks::promote(ranks, r)
            }
            #[inline(always)]
            fn recycle(ranks: &mut [u8]) -> usize {
                $ranks::recycle(ranks)
            }
            #[inline(always)]
            fn demote(ranks: &mut [u8], r: u8) {
                $ranks::demote(ranks, r)
            }
        }
    };
}

isa!(
    /// Portable code (any CPU).
    Scalar,
    scalar,
    scalar
);
isa!(
    /// AVX-512 (F and VL) for the tag search, AVX2 for the ranks. Only valid inside
    /// functions compiled with `#[target_feature(enable = "avx2,avx512f,avx512vl")]` on a
    /// CPU that has them.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    avx512,
    avx2
);
isa!(
    /// AVX2. Only valid inside functions compiled with `#[target_feature(enable = "avx2")]`
    /// on a CPU that has it.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    avx2,
    avx2
);

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
        has_avx2()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    type Find = fn(&[u32], u32) -> Option<usize>;
    type Promote = fn(&mut [u8], u8);
    type Recycle = fn(&mut [u8]) -> usize;

    /// A random permutation of 0..len.
    fn ranks(rng: &mut crate::rng::Rng, len: usize) -> Vec<u8> {
        let mut v: Vec<u8> = (0..len as u8).collect();
        for i in (1..len).rev() {
            v.swap(i, rng.below(i as u64 + 1) as usize);
        }
        v
    }

    /// Each operation against its definition, on random tags and random rank permutations.
    fn agrees_with_reference(find: Find, promote: Promote, recycle: Recycle, demote: Promote) {
        let mut rng = crate::rng::Rng::new(9);
        for len in [1usize, 3, 8, 15, 16, 17, 24, 32, 40] {
            for _ in 0..200 {
                let v: Vec<u32> = (0..len).map(|_| rng.below(20) as u32).collect();
                let id = rng.below(20) as u32;
                assert_eq!(find(&v, id), v.iter().position(|&t| t == id));
                let before = ranks(&mut rng, len);
                let last = len as u8 - 1;
                for r in 0..len as u8 {
                    let mut a = before.clone();
                    promote(&mut a, r);
                    let b: Vec<u8> = before
                        .iter()
                        .map(|&x| if x == r { 0 } else if x < r { x + 1 } else { x })
                        .collect();
                    assert_eq!(a, b, "promote len {len} r {r}");
                    let mut a = before.clone();
                    demote(&mut a, r);
                    let b: Vec<u8> = before
                        .iter()
                        .map(|&x| if x == r { last } else if x > r { x - 1 } else { x })
                        .collect();
                    assert_eq!(a, b, "demote len {len} r {r}");
                }
                let mut a = before.clone();
                let way = recycle(&mut a);
                assert_eq!(before[way], last, "recycle len {len}");
                let mut b = before.clone();
                super::scalar::promote(&mut b, last);
                assert_eq!(a, b, "recycle len {len}");
            }
        }
    }

    #[test]
    fn portable_set_operations_agree_with_the_reference() {
        use super::scalar::{demote, find, promote, recycle};
        agrees_with_reference(find, promote, recycle, demote);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_set_operations_agree_with_the_reference() {
        if !super::has_avx2() {
            return;
        }
        #[target_feature(enable = "avx2")]
        fn run() {
            use super::avx2::{demote, find, promote, recycle};
            agrees_with_reference(find, promote, recycle, demote);
        }
        // SAFETY: the CPU has AVX2.
        unsafe { run() };
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_set_operations_agree_with_the_reference() {
        if !super::has_avx512() {
            return;
        }
        #[target_feature(enable = "avx2,avx512f,avx512vl")]
        fn run() {
            use super::avx2::{demote, promote, recycle};
            use super::avx512::find;
            agrees_with_reference(find, promote, recycle, demote);
        }
        // SAFETY: the CPU has AVX2 and AVX-512 F and VL.
        unsafe { run() };
    }
}
