//! The set operations (find a tag, move a way to the front, remove a way), in one
//! implementation per instruction set, and which of them the running CPU can use.
//!
//! The hot paths are generic over [`Isa`] and compiled once per implementation;
//! [`crate::machine::Machine`] picks one at run time (`is_x86_feature_detected!`), so the
//! build needs no `target-cpu`. Every implementation gives the same results.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

/// The set operations of one instruction set, on the ways of one set (ordered most- to
/// least-recently used).
pub(crate) trait Isa {
    /// Index of `id` in `set`.
    fn find(set: &[u32], id: u32) -> Option<usize>;
    /// Move `set[0..upto]` to `set[1..=upto]` and put `id` in `set[0]`.
    fn push_front(set: &mut [u32], upto: usize, id: u32);
    /// Move `set[i+1..]` to `set[i..len-1]` and empty the last way.
    fn pull_down(set: &mut [u32], i: usize);
}

/// Implement [`Isa`] for `$isa` with the functions of module `$module`.
macro_rules! isa {
    ($(#[$attr:meta])* $isa:ident, $module:ident) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $isa;

        $(#[$attr])*
        impl Isa for $isa {
            #[inline(always)]
            fn find(set: &[u32], id: u32) -> Option<usize> {
                $module::find(set, id)
            }
            #[inline(always)]
            fn push_front(set: &mut [u32], upto: usize, id: u32) {
                $module::push_front(set, upto, id)
            }
            #[inline(always)]
            fn pull_down(set: &mut [u32], i: usize) {
                $module::pull_down(set, i)
            }
        }
    };
}

isa!(
    /// Portable code (any CPU).
    Scalar,
    scalar
);
isa!(
    /// AVX-512 (F and VL). Only valid inside functions compiled with
    /// `#[target_feature(enable = "avx512f,avx512vl")]` on a CPU that has them.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    avx512
);
isa!(
    /// AVX2. Only valid inside functions compiled with `#[target_feature(enable = "avx2")]`
    /// on a CPU that has it.
    #[cfg(target_arch = "x86_64")]
    Avx2,
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
        std::arch::is_x86_feature_detected!("avx512f")
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
        if !super::has_avx2() {
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
        if !super::has_avx512() {
            return;
        }
        use super::avx512::{find, pull_down, push_front};
        agrees_with_reference(find, pull_down, push_front);
    }
}
