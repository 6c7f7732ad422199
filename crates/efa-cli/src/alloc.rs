//! The binary's allocator: the system allocator, counting large blocks.
//!
//! A training step's large buffers (tape values and gradients, the fused kernels' saved state
//! and scratch, the micro-batches' inputs) come from the engine's own cache
//! (`efa_num::pool`), reused from step to step, so after the first epoch a step asks the
//! system allocator for nothing large. The count here is what shows it: `efa bench train`
//! reports the large allocations per micro-batch of its timed epochs.
//!
//! [`tune`] raises glibc's trim and mmap thresholds (through the `libc` crate) so that what
//! the engine does free (evaluation's buffers, the first epoch's surplus) does not trim the
//! heap and fault back in. It reads no allocator internals and changes no arithmetic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Blocks of at least this many bytes count as large ([`large_allocations`]).
pub const LARGE: usize = 64 << 10;

static LARGE_COUNT: AtomicU64 = AtomicU64::new(0);
static LARGE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Large blocks handed out since the start (a `realloc` that grows a block to a large size
/// counts as one), and their bytes: what `efa bench train` reports per micro-batch, the
/// measure of how much of a training step's memory the engine does not own.
pub fn large_allocations() -> (u64, u64) {
    (LARGE_COUNT.load(Relaxed), LARGE_BYTES.load(Relaxed))
}

/// Counts a block of `size` bytes if it is large.
#[inline]
fn count(size: usize) {
    if size >= LARGE {
        LARGE_COUNT.fetch_add(1, Relaxed);
        LARGE_BYTES.fetch_add(size as u64, Relaxed);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    use libc::{mallopt, M_MMAP_THRESHOLD, M_TOP_PAD, M_TRIM_THRESHOLD};
    // SAFETY: mallopt only adjusts allocator parameters; it is called before any other thread
    // exists, and failure (return 0) leaves the defaults in place.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        mallopt(M_TOP_PAD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}

/// The system allocator, counting large blocks.
pub struct Counted;

// SAFETY: every call is forwarded to the system allocator with the same arguments; `count`
// only adds to two atomics.
unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        if size > layout.size() {
            count(size);
        }
        // SAFETY: forwarded with the caller's pointer, layout and size.
        unsafe { System.realloc(p, layout, size) }
    }
}

#[cfg(test)]
mod count_tests {
    use super::{large_allocations, LARGE};

    /// The binary's allocator (this crate's `#[global_allocator]`, also in its unit tests)
    /// counts a large block and a growth to a large size, with their bytes. Other tests may
    /// allocate at the same time, so the counts are lower bounds.
    #[test]
    fn large_blocks_are_counted() {
        let (n0, b0) = large_allocations();
        let big = vec![0u8; 3 * LARGE];
        let (n1, b1) = large_allocations();
        assert!(
            n1 > n0 && b1 - b0 >= 3 * LARGE as u64,
            "{n0} {b0} → {n1} {b1}"
        );
        let mut grown = vec![1u8; 16];
        grown.resize(2 * LARGE, 2);
        let (n2, b2) = large_allocations();
        assert!(
            n2 > n1 && b2 - b1 >= 2 * LARGE as u64,
            "{n1} {b1} → {n2} {b2}"
        );
        assert_eq!(big.len() + grown.len(), 5 * LARGE);
    }
}
