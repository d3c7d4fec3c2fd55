//! One CPU's caches and the hierarchy's rules as the hot path sees them: read from the
//! machine's tables at run time ([`Tables`], any hierarchy), or fixed at compile time for
//! a three-level shape ([`Fixed`] of [`Amd`] or [`Nine`]).
//!
//! The hot path (`Machine::access_w`) is written once, over [`View`]. With a fixed shape
//! the compiler knows the levels, associativities and rules: the walks over the levels
//! are written out, the tests of the rules fold away, and each set is found from a tag
//! pointer and a set mask taken once per access; what remains is that shape's own
//! sequence of set operations, as fast as a copy written for it by hand.

use std::marker::PhantomData;
use std::ops::ControlFlow;

use super::{At, Down, Machine, VictimAction, LAST_DROP};

/// How the hot path reaches one CPU's caches and the rules of the hierarchy.
///
/// The levels are visited through [`View::walk`] and [`View::each_fill_level`] rather
/// than by loops in the hot path: on a fixed shape they call their closure once per level
/// with the level a compile-time constant, so every set has a known number of ways
/// whether or not the compiler would have unrolled a loop.
pub(super) trait View: Copy {
    /// The view of `cpu`'s caches.
    fn of(m: &mut Machine, cpu: usize) -> Self;
    /// The CPU's group (last-level instance).
    fn group(&self) -> usize;
    /// Number of levels.
    fn levels(&self, m: &Machine) -> usize;
    /// Level `i` is exclusive or a victim cache: a hit there takes the line out.
    fn victim_filled(&self, m: &Machine, i: usize) -> bool;
    /// What becomes of a line evicted from level `j`.
    fn victim_action(&self, m: &Machine, j: usize) -> VictimAction;
    /// The ways of the set of `phys` in the CPU's level `i`.
    ///
    /// # Safety
    ///
    /// `m` is the machine this view was made of, `i` one of its levels; the set returned
    /// is the only reference to those tags while it is used.
    unsafe fn set<'a>(&self, m: &mut Machine, i: usize, phys: u64) -> &'a mut [u32];
    /// Call `f` on the levels from `first` down, in order, until it breaks; returns what
    /// it broke with.
    fn walk<B>(
        &self,
        m: &mut Machine,
        first: usize,
        f: impl FnMut(&mut Machine, usize) -> ControlFlow<B>,
    ) -> Option<B>;
    /// Call `f` on each level filled on a miss below it (L1 always, then every level that
    /// is not victim-filled), the last level first: `Machine::fill_levels`.
    fn each_fill_level(&self, m: &mut Machine, f: impl FnMut(&mut Machine, usize));
}

/// Any hierarchy: every rule read from the machine's tables.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tables {
    /// The CPU's row in `Machine::hier`.
    h: usize,
    group: usize,
}

impl View for Tables {
    #[inline(always)]
    fn of(m: &mut Machine, cpu: usize) -> Self {
        Tables {
            h: cpu * m.n_levels,
            group: *m.group_of.at(cpu) as usize,
        }
    }
    #[inline(always)]
    fn group(&self) -> usize {
        self.group
    }
    #[inline(always)]
    fn levels(&self, m: &Machine) -> usize {
        m.n_levels
    }
    #[inline(always)]
    fn victim_filled(&self, m: &Machine, i: usize) -> bool {
        *m.victim_filled.at(i)
    }
    #[inline(always)]
    fn victim_action(&self, m: &Machine, j: usize) -> VictimAction {
        *m.victim_action.at(j)
    }
    #[inline(always)]
    unsafe fn set<'a>(&self, m: &mut Machine, i: usize, phys: u64) -> &'a mut [u32] {
        let c = *m.hier.at(self.h + i) as usize;
        let set = m.caches.at_mut(c).set_mut(phys);
        // SAFETY: the tag arrays never reallocate, and the caller uses the set alone.
        unsafe { std::slice::from_raw_parts_mut(set.as_mut_ptr(), set.len()) }
    }
    #[inline(always)]
    fn walk<B>(
        &self,
        m: &mut Machine,
        first: usize,
        mut f: impl FnMut(&mut Machine, usize) -> ControlFlow<B>,
    ) -> Option<B> {
        for i in first..m.n_levels {
            if let ControlFlow::Break(b) = f(m, i) {
                return Some(b);
            }
        }
        None
    }
    #[inline(always)]
    fn each_fill_level(&self, m: &mut Machine, mut f: impl FnMut(&mut Machine, usize)) {
        for k in 0..m.fill_levels.len() {
            let j = *m.fill_levels.at(k);
            f(m, j);
        }
    }
}

/// A three-level shape whose rules are known at compile time. Both shapes have 8, 16 and
/// 32 ways and power-of-two sets ([`FixedShape::fits`]).
pub(super) trait FixedShape: Copy {
    /// Ways of L1, L2 and L3.
    const WAYS: [usize; 3] = [8, 16, 32];
    /// [`View::victim_filled`] of each level (which also gives the levels filled on a
    /// miss, [`View::each_fill_level`]).
    const VICTIM_FILLED: [bool; 3];
    /// [`View::victim_action`] of each level.
    const VICTIM_ACTION: [VictimAction; 3];

    /// Whether machine `m` has this shape: its tables equal the constants, and every
    /// cache has power-of-two sets. (A victim moves into the level below of the same CPU,
    /// as `MachineConfig::validate` makes the levels a tree.)
    fn fits(m: &Machine) -> bool {
        m.n_levels == 3
            && (0..3).all(|i| m.cfg.levels[i].ways as usize == Self::WAYS[i])
            && (0..m.cfg.n_cpus()).all(|cpu| {
                (0..3).all(|i| {
                    let c = m.hier[cpu * 3 + i] as usize;
                    m.caches[c].pow2_mask() == Some(m.cfg.levels[i].sets as u64 - 1)
                })
            })
            && m.victim_filled == Self::VICTIM_FILLED
            && m.victim_action == Self::VICTIM_ACTION
    }
}

/// L1 (filled on misses) -> private exclusive L2 (one under each L1) -> shared victim L3
/// that drops its victims: the opteron-16 model.
#[derive(Debug, Clone, Copy)]
pub(super) struct Amd;

impl FixedShape for Amd {
    const VICTIM_FILLED: [bool; 3] = [false, true, true];
    const VICTIM_ACTION: [VictimAction; 3] = [
        VictimAction {
            back_invalidate: false,
            down: Down::Sole,
        },
        VictimAction {
            back_invalidate: false,
            down: Down::Shared,
        },
        LAST_DROP,
    ];
}

/// Three non-inclusive levels, all filled on misses, none back-invalidating or passing
/// victims down (pycachesim's semantics).
#[derive(Debug, Clone, Copy)]
pub(super) struct Nine;

impl FixedShape for Nine {
    const VICTIM_FILLED: [bool; 3] = [false; 3];
    const VICTIM_ACTION: [VictimAction; 3] = [LAST_DROP; 3];
}

/// One CPU's caches on a fixed shape `S`: the tag arrays and set masks of its L1, L2 and
/// L3 instances, and its group. Used while the machine is borrowed; the tag arrays never
/// reallocate.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fixed<S> {
    tags: [*mut u32; 3],
    mask: [u64; 3],
    group: usize,
    shape: PhantomData<S>,
}

impl<S: FixedShape> View for Fixed<S> {
    #[inline(always)]
    fn of(m: &mut Machine, cpu: usize) -> Self {
        let h = cpu * 3;
        let mut tags = [std::ptr::null_mut(); 3];
        for (i, t) in tags.iter_mut().enumerate() {
            let c = *m.hier.at(h + i) as usize;
            *t = m.caches.at_mut(c).tags_ptr();
        }
        Fixed {
            tags,
            mask: m.mask3,
            group: *m.group_of.at(cpu) as usize,
            shape: PhantomData,
        }
    }
    #[inline(always)]
    fn group(&self) -> usize {
        self.group
    }
    #[inline(always)]
    fn levels(&self, _: &Machine) -> usize {
        3
    }
    #[inline(always)]
    fn victim_filled(&self, _: &Machine, i: usize) -> bool {
        *S::VICTIM_FILLED.at(i)
    }
    #[inline(always)]
    fn victim_action(&self, _: &Machine, j: usize) -> VictimAction {
        *S::VICTIM_ACTION.at(j)
    }
    #[inline(always)]
    unsafe fn set<'a>(&self, _: &mut Machine, i: usize, phys: u64) -> &'a mut [u32] {
        let w = *S::WAYS.at(i);
        let set = (phys & *self.mask.at(i)) as usize;
        // SAFETY: `tags` and `mask` come from this machine's level-i cache of power-of-two
        // sets and `w` ways (`fits`), so the set's `w` tags lie inside its array.
        unsafe { std::slice::from_raw_parts_mut(self.tags.at(i).add(set * w), w) }
    }
    #[inline(always)]
    fn walk<B>(
        &self,
        m: &mut Machine,
        first: usize,
        mut f: impl FnMut(&mut Machine, usize) -> ControlFlow<B>,
    ) -> Option<B> {
        // written out: each call has its level as a constant
        debug_assert!(first < 3);
        if first == 0 {
            if let ControlFlow::Break(b) = f(m, 0) {
                return Some(b);
            }
        }
        if first <= 1 {
            if let ControlFlow::Break(b) = f(m, 1) {
                return Some(b);
            }
        }
        if let ControlFlow::Break(b) = f(m, 2) {
            return Some(b);
        }
        None
    }
    #[inline(always)]
    fn each_fill_level(&self, m: &mut Machine, mut f: impl FnMut(&mut Machine, usize)) {
        // written out as `walk`; L1 always, then the levels that are not victim-filled
        if !S::VICTIM_FILLED[2] {
            f(m, 2);
        }
        if !S::VICTIM_FILLED[1] {
            f(m, 1);
        }
        f(m, 0);
    }
}
