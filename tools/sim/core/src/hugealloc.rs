//! An allocator for the simulator's process: large arrays on transparent huge pages, kept
//! for the next run when freed.
//!
//! The simulator's state is a few large arrays (the slot directory, cache tags, page
//! maps: about 1 GB for a density point on `epyc-2s`) read at random, one dependent load
//! after another. Two costs come from where that memory lives, not from the simulation:
//!
//! * **TLB misses.** On 4 KiB pages nearly every such load also misses the host's TLB. An
//!   allocation of at least [`HUGE_MIN`] bytes (2 MiB: one `epyc-2s` L3's tags) is
//!   therefore mapped on its own, aligned to 2 MiB, and advised `MADV_HUGEPAGE` before
//!   anything touches it, so the kernel backs it with 2 MiB pages where transparent huge
//!   pages are `always` or `madvise` (`never` leaves 4 KiB pages; it works the same).
//! * **First touch.** A worker runs point after point, each building a machine of about
//!   the same size and dropping it. Every fresh mapping costs a page fault and a kernel
//!   clear per page on first touch (0.6-5 GB/s on the development VM, where the host
//!   below backs the memory again; a `memset` of mapped memory runs at about 26 GB/s). A
//!   freed large range is therefore kept in a small pool (at most [`POOL_BYTES`] in
//!   [`POOL_SLOTS`] ranges) and handed to the next large allocation it fits, best fit, the
//!   rest of it staying in the pool; a zeroed allocation from the pool is cleared with
//!   `memset`. The pool's memory stays resident between runs (at most [`POOL_BYTES`]).
//!
//! Measured on density points (docs/PERFORMANCE.md, "Under 10 minutes"): same outcome
//! hashes, less CPU. Smaller allocations go to the system allocator unchanged. Only where
//! memory lives changes, never what is in it: results are bit-identical. The core crate
//! does not install it; the binary that links the core chooses to (`#[global_allocator]`
//! in the `_native` extension).

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;
use std::sync::Mutex;

/// The huge page size these mappings are aligned to (x86-64 and arm64's 2 MiB).
const HUGE_PAGE: usize = 2 << 20;
/// Allocations of at least this many bytes get a huge-page mapping.
pub const HUGE_MIN: usize = HUGE_PAGE;
/// The most freed bytes the pool keeps for reuse.
pub const POOL_BYTES: usize = 3 << 30;
/// The most freed ranges it keeps (a fixed array: the allocator must not allocate).
pub const POOL_SLOTS: usize = 64;

/// Freed huge ranges, (start, length), both multiples of [`HUGE_PAGE`]; length 0 is free.
struct Pool {
    ranges: [(usize, usize); POOL_SLOTS],
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    ranges: [(0, 0); POOL_SLOTS],
    bytes: 0,
});

impl Pool {
    /// The start of `len` bytes cut from the smallest kept range that holds them.
    fn take(&mut self, len: usize) -> Option<usize> {
        let best = (0..POOL_SLOTS)
            .filter(|&i| self.ranges[i].1 >= len)
            .min_by_key(|&i| self.ranges[i].1)?;
        let (start, have) = self.ranges[best];
        self.ranges[best] = (start + len, have - len);
        self.bytes -= len;
        Some(start)
    }

    /// Keep `start..start + len`, or hand it back when the pool is full.
    fn keep(&mut self, start: usize, len: usize) -> bool {
        if self.bytes + len > POOL_BYTES {
            return false;
        }
        match (0..POOL_SLOTS).find(|&i| self.ranges[i].1 == 0) {
            Some(i) => {
                self.ranges[i] = (start, len);
                self.bytes += len;
                true
            }
            None => false,
        }
    }
}

/// The allocator (module docstring); the Python extension makes it its global allocator.
pub struct HugeAlloc;

fn is_huge(layout: Layout) -> bool {
    layout.size() >= HUGE_MIN && layout.align() <= HUGE_PAGE
}

fn mapped_len(size: usize) -> usize {
    size.div_ceil(HUGE_PAGE) * HUGE_PAGE
}

/// A zeroed mapping of `len` bytes (a multiple of 2 MiB) aligned to 2 MiB and advised
/// onto huge pages (null when the kernel refuses it).
unsafe fn map_huge(len: usize) -> *mut u8 {
    // over-map by one huge page, then trim both ends to the 2 MiB-aligned part
    let raw = libc::mmap(
        ptr::null_mut(),
        len + HUGE_PAGE,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if raw == libc::MAP_FAILED {
        return ptr::null_mut();
    }
    let start = raw as usize;
    let aligned = start.next_multiple_of(HUGE_PAGE);
    if aligned > start {
        libc::munmap(raw, aligned - start);
    }
    let (tail, end) = (aligned + len, start + len + HUGE_PAGE);
    if end > tail {
        libc::munmap(tail as *mut libc::c_void, end - tail);
    }
    // advice only: a kernel without THP keeps 4 KiB pages and the memory works the same
    libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    aligned as *mut u8
}

/// `size` bytes on huge pages, from the pool when a kept range fits (then cleared when
/// `zeroed`), else freshly mapped (zero already).
unsafe fn alloc_huge(size: usize, zeroed: bool) -> *mut u8 {
    let len = mapped_len(size);
    let kept = POOL.lock().ok().and_then(|mut pool| pool.take(len));
    match kept {
        Some(start) => {
            let p = start as *mut u8;
            if zeroed {
                ptr::write_bytes(p, 0, size);
            }
            p
        }
        None => map_huge(len),
    }
}

unsafe fn free_huge(p: *mut u8, size: usize) {
    let len = mapped_len(size);
    let kept = POOL.lock().map(|mut pool| pool.keep(p as usize, len)).unwrap_or(false);
    if !kept {
        libc::munmap(p as *mut libc::c_void, len);
    }
}

unsafe impl GlobalAlloc for HugeAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout) {
            alloc_huge(layout.size(), false)
        } else {
            System.alloc(layout)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout) {
            alloc_huge(layout.size(), true)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if is_huge(layout) {
            free_huge(p, layout.size());
        } else {
            System.dealloc(p, layout);
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        if !is_huge(layout) && !is_huge(new_layout) {
            return System.realloc(p, layout, new_size);
        }
        if is_huge(layout) && is_huge(new_layout) && mapped_len(new_size) == mapped_len(layout.size())
        {
            return p; // still fits the same range
        }
        let q = self.alloc(new_layout);
        if !q.is_null() {
            ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
            self.dealloc(p, layout);
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill_and_check(a: &HugeAlloc, layout: Layout, seed: u8) {
        unsafe {
            let p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE_PAGE, 0);
            assert!((0..layout.size()).step_by(4093).all(|i| *p.add(i) == 0), "not zeroed");
            ptr::write_bytes(p, seed, layout.size());
            a.dealloc(p, layout);
        }
    }

    #[test]
    fn huge_allocations_are_aligned_zeroed_and_survive_growth_and_shrink() {
        let a = HugeAlloc;
        unsafe {
            let layout = Layout::from_size_align(HUGE_MIN + 12_345, 64).unwrap();
            let p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE_PAGE, 0);
            assert!((0..layout.size()).step_by(4093).all(|i| *p.add(i) == 0));
            for i in (0..layout.size()).step_by(1000) {
                *p.add(i) = (i % 251) as u8;
            }
            // grow past the range, then shrink below the threshold: the bytes follow
            let big = a.realloc(p, layout, 3 * HUGE_MIN);
            assert!((0..layout.size()).step_by(1000).all(|i| *big.add(i) == (i % 251) as u8));
            let grown = Layout::from_size_align(3 * HUGE_MIN, 64).unwrap();
            let small = a.realloc(big, grown, 4096);
            assert!((0..4096).step_by(1000).all(|i| *small.add(i) == (i % 251) as u8));
            a.dealloc(small, Layout::from_size_align(4096, 64).unwrap());
        }
    }

    #[test]
    fn a_reused_range_is_zeroed_again_whatever_the_last_owner_wrote() {
        let a = HugeAlloc;
        // sizes that reuse, split and outgrow the ranges the pool keeps between them
        for (k, mb) in [5usize, 5, 3, 9, 2, 5, 17, 4, 4, 9].iter().enumerate() {
            let layout = Layout::from_size_align(mb << 20, 64).unwrap();
            fill_and_check(&a, layout, 0xA5 ^ k as u8);
        }
    }

    #[test]
    fn the_pool_keeps_at_most_its_bytes_and_slots() {
        let mut pool = Pool {
            ranges: [(0, 0); POOL_SLOTS],
            bytes: 0,
        };
        assert!(pool.keep(HUGE_PAGE, POOL_BYTES));
        assert!(!pool.keep(4 * POOL_BYTES, HUGE_PAGE), "over its bytes");
        assert_eq!(pool.take(HUGE_PAGE), Some(HUGE_PAGE));
        assert_eq!(pool.take(HUGE_PAGE), Some(2 * HUGE_PAGE), "the rest stays kept");
        assert_eq!(pool.bytes, POOL_BYTES - 2 * HUGE_PAGE);
        assert_eq!(pool.take(POOL_BYTES), None, "nothing that large is left");
        let mut small = Pool {
            ranges: [(0, 0); POOL_SLOTS],
            bytes: 0,
        };
        for i in 0..POOL_SLOTS {
            assert!(small.keep((i + 1) * 4 * HUGE_PAGE, HUGE_PAGE));
        }
        assert!(!small.keep(1 << 40, HUGE_PAGE), "over its slots");
        // best fit: the smallest range that holds the request
        small.ranges[3].1 = 3 * HUGE_PAGE;
        small.ranges[7].1 = 2 * HUGE_PAGE;
        assert_eq!(small.take(2 * HUGE_PAGE), Some(8 * 4 * HUGE_PAGE));
    }

    #[test]
    fn small_allocations_use_the_system_allocator_path() {
        assert!(!is_huge(Layout::from_size_align(HUGE_MIN - 1, 8).unwrap()));
        assert!(is_huge(Layout::from_size_align(HUGE_MIN, 8).unwrap()));
        // an alignment above a huge page is left to the system allocator
        assert!(!is_huge(Layout::from_size_align(HUGE_MIN, 2 * HUGE_PAGE).unwrap()));
    }
}
