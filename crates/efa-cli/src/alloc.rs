//! Allocator tuning for training loops.
//!
//! A training step allocates and frees the same few hundred kilobyte-sized tensors thousands of
//! times. With glibc's defaults, freeing them trims the heap top (`brk`) and the next step
//! faults the pages back in, zeroed by the kernel: measured at about a quarter of an EFA
//! training step. Raising the trim and mmap thresholds keeps those pages mapped.
//!
//! The threads of the pool allocate from their own arenas, whose heaps (64 MiB each) glibc
//! unmaps whole once everything in one is free, whatever the trim threshold. A step whose
//! buffers come and go in tens of megabytes (the lag-2 temperature model's saved state) can
//! empty a heap at every step and fault the next one in: 2.9 million page faults in two
//! epochs, 40% of the run's time, once that model stopped keeping its attention
//! probabilities. With a top pad as large as a heap, glibc's test before deleting an empty
//! heap always keeps it (it deletes only when the room it would keep exceeds the pad); the
//! pad's other effect is that heaps grow in steps of up to 64 MiB of address space, which is
//! not touched, so not resident, until used.
//!
//! A micro-batch's saved activations (tens of megabytes, in blocks of a few hundred kilobytes)
//! are read and written in full at every step, so translating their addresses costs a miss
//! per 4 KiB page. Where the kernel gives transparent huge pages only to memory that asks for
//! them (`/sys/kernel/mm/transparent_hugepage/enabled` set to `madvise`, as on the development
//! machines), [`Advised`] asks for them (`madvise(MADV_HUGEPAGE)`) when it hands out a block of
//! at least 128 KiB, by where glibc put the block (the flags of its chunk header):
//! - from a thread arena's heap (a 64 MiB mapping aligned to 64 MiB, glibc's own rule for
//!   finding a heap): from the block's 2 MiB page to the end of the heap, the room the blocks
//!   after it will come from, before they are touched; once per page;
//! - from `mmap`: the whole 2 MiB pages inside the block, each time (a new mapping);
//! - from the main heap: the whole 2 MiB pages inside the block, once per page.
//!
//! The pool threads that run training allocate from thread arenas. Paired at two threads, the
//! temperature epochs ran ×1.027–1.043 (L = 2), ×1.032 (L = 4, lag 1), ×1.005–1.030 (lag 2)
//! and ×1.004–1.005 (L = 4, within noise). The arithmetic is unchanged. Where the kernel has no transparent huge pages the
//! request fails and changes nothing; where it gives them to all memory, the advised ranges
//! differ only in that their page faults may compact memory for a huge page (`defrag` =
//! `madvise`), as with glibc's own `glibc.malloc.hugetlb=1` from the environment. A heap that
//! glibc deletes and maps again at the same address is not asked for again (with the top pad
//! above glibc keeps its heaps). Only on 64-bit Linux with glibc; elsewhere [`Advised`] is the
//! system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Blocks of at least this many bytes count as large ([`large_allocations`]).
pub const LARGE: usize = 64 << 10;

static LARGE_COUNT: AtomicU64 = AtomicU64::new(0);
static LARGE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Large blocks handed out since the start (a `realloc` that grows a block to a large size
/// counts as one), and their bytes: what `efa bench train` reports per micro-batch, the
/// measure of how much of a training step's memory the engine does not yet own.
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

/// The system allocator, asking for transparent huge pages on large blocks and the heap room
/// after them (see the module documentation).
pub struct Advised;

// SAFETY: every call is forwarded to the system allocator with the same layout; `count` only
// adds to two atomics; `thp::advise` neither allocates nor writes to any block, and leaves
// `errno` as it found it.
unsafe impl GlobalAlloc for Advised {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        count(layout.size());
        thp::advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        count(layout.size());
        thp::advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's pointer, layout and size.
        let q = unsafe { System.realloc(p, layout, size) };
        if size > layout.size() {
            count(size);
        }
        thp::advise(q, size);
        q
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
mod thp {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Size of a transparent huge page with 4 KiB base pages (x86-64).
    pub(super) const HUGE: usize = 2 << 20;

    /// Size and alignment of the heaps of glibc's thread arenas on 64-bit targets.
    pub(super) const HEAP: usize = 64 << 20;

    /// Smallest block that makes the allocator look at its huge pages.
    const ADVISE_MIN: usize = 128 << 10;

    /// Where glibc put a block.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Home {
        /// A mapping of its own (`mmap`).
        Mapped,
        /// The heap of a thread arena.
        ThreadHeap,
        /// The main arena's heap.
        MainHeap,
    }

    /// Where glibc put the block at `p`, from the size word of its chunk header (the word
    /// before the block): bit 1 for a block from `mmap`, bit 2 for a thread arena's.
    ///
    /// # Safety
    /// `p` is a block glibc's `malloc` family returned and not yet freed.
    pub(super) unsafe fn home(p: *const u8) -> Home {
        // SAFETY: glibc keeps a block's size word in the word before it (caller's contract).
        let size_word = unsafe { p.cast::<usize>().sub(1).read() };
        if size_word & 2 != 0 {
            Home::Mapped
        } else if size_word & 4 != 0 {
            Home::ThreadHeap
        } else {
            Home::MainHeap
        }
    }

    /// The range `[lo, hi)` to ask for after a block of `size` bytes at `at`, and whether it
    /// is asked for once (remembered in [`ASKED`]): see the module documentation.
    pub(super) fn span(home: Home, at: usize, size: usize) -> (usize, usize, bool) {
        match home {
            Home::ThreadHeap => (at / HUGE * HUGE, (at / HEAP + 1) * HEAP, true),
            Home::Mapped => (at.next_multiple_of(HUGE), (at + size) / HUGE * HUGE, false),
            Home::MainHeap => (at.next_multiple_of(HUGE), (at + size) / HUGE * HUGE, true),
        }
    }

    /// Huge pages already asked for, by page number (`address / HUGE + 1`; 0 is empty), in a
    /// direct-mapped table: blocks come back at the same addresses step after step, so a
    /// page is asked for once, and a page pushed out by another costs one more request.
    static ASKED: [AtomicUsize; 4096] = [const { AtomicUsize::new(0) }; 4096];

    fn slot(page: usize) -> &'static AtomicUsize {
        &ASKED[page % ASKED.len()]
    }

    /// Asks for huge pages after the system allocator returned `p` (null: it failed) for
    /// `size` bytes.
    pub(super) fn advise(p: *mut u8, size: usize) {
        use libc::{__errno_location, madvise, MADV_HUGEPAGE};
        if p.is_null() || size < ADVISE_MIN {
            return;
        }
        // SAFETY: `p` is the block the system allocator (glibc's malloc family) just returned.
        let home = unsafe { home(p) };
        let (lo, hi, once) = span(home, p as usize, size);
        if lo >= hi || (once && slot(lo / HUGE).load(Relaxed) == lo / HUGE + 1) {
            return;
        }
        // SAFETY: [lo, hi) lies inside the block's own mapping (the heap's 64 MiB window, or
        // the block), which glibc owns for this process; MADV_HUGEPAGE keeps every page's
        // contents and only sets how the kernel backs that mapping (it may split it in two).
        // A kernel without transparent huge pages fails the call and nothing changes. The
        // call's errno is put back, so the allocation does not change the caller's.
        let done = unsafe {
            let errno = __errno_location();
            let saved = *errno;
            let r = madvise(lo as *mut libc::c_void, hi - lo, MADV_HUGEPAGE);
            *errno = saved;
            r == 0
        };
        if once && done {
            for page in lo / HUGE..hi / HUGE {
                slot(page).store(page + 1, Relaxed);
            }
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
mod thp {
    pub(super) fn advise(_: *mut u8, _: usize) {}
}

#[cfg(all(
    test,
    target_os = "linux",
    target_env = "gnu",
    target_pointer_width = "64"
))]
mod tests {
    use super::thp::{home, span, Home, HEAP, HUGE};

    /// The `VmFlags` line of the mapping that holds `addr`, from `/proc/self/smaps` (`None`
    /// when nothing is mapped there).
    fn flags_at(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside && line.starts_with("VmFlags:") {
                return Some(line.to_string());
            }
        }
        None
    }

    /// Whether the mapping holding `addr` asked for huge pages (`None`: nothing mapped).
    fn asked(addr: usize) -> Option<bool> {
        flags_at(addr).map(|f| f.split_whitespace().any(|f| f == "hg"))
    }

    #[test]
    fn the_ranges_asked_for_stay_inside_the_blocks_heap_or_mapping() {
        const MIB: usize = 1 << 20;
        let heap = 0x7f00_0000_0000usize; // 64 MiB-aligned
        assert_eq!(heap % HEAP, 0);
        // A thread arena's block: from its page to the end of its heap, once.
        let at = heap + 5 * MIB + 16;
        assert_eq!(
            span(Home::ThreadHeap, at, 300 << 10),
            (heap + 4 * MIB, heap + HEAP, true)
        );
        // The last page of a heap: that page alone.
        let at = heap + HEAP - MIB;
        assert_eq!(
            span(Home::ThreadHeap, at, 200 << 10),
            (heap + HEAP - HUGE, heap + HEAP, true)
        );
        // A block from mmap (16 bytes past its page-aligned header): its whole pages, each
        // time; the main heap's: its whole pages, once; a block within one page: nothing.
        let at = heap + 3 * MIB + 16;
        assert_eq!(
            span(Home::Mapped, at, 40 * MIB),
            (heap + 4 * MIB, heap + 42 * MIB, false)
        );
        assert_eq!(
            span(Home::MainHeap, at, 40 * MIB),
            (heap + 4 * MIB, heap + 42 * MIB, true)
        );
        let (lo, hi, _) = span(Home::MainHeap, at, 600 << 10);
        assert!(lo >= hi, "{lo:#x}..{hi:#x}");
    }

    /// The program's allocator (this crate's `#[global_allocator]`, also in its test harness)
    /// asks for huge pages on a large block and, in a thread arena, the heap after it; and on
    /// a block from `mmap` each time one is mapped, also again at the same address (a block
    /// larger than a heap, which a thread arena maps on its own). The
    /// kernel records the request as the mapping's `hg` flag (whatever the mode in
    /// `transparent_hugepage/enabled`).
    #[test]
    fn large_blocks_and_the_heap_after_them_ask_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            // A kernel without transparent huge pages: there is nothing to ask for.
            return;
        }
        // The binary's thresholds, so that a block of 8 MiB comes from a heap.
        super::tune();
        std::thread::spawn(|| {
            let block = vec![1u8; 8 << 20];
            let at = block.as_ptr() as usize;
            // SAFETY: a live block from the program's allocator (glibc's malloc).
            let kind = unsafe { home(block.as_ptr()) };
            assert_ne!(kind, Home::Mapped, "8 MiB block below the mmap threshold");
            let mid = at + block.len() / 2;
            assert_eq!(
                asked(mid),
                Some(true),
                "8 MiB block ({kind:?}): {:?}",
                flags_at(mid)
            );
            if kind == Home::ThreadHeap {
                let room = (at / HEAP + 1) * HEAP - HUGE / 2;
                assert_eq!(asked(room), Some(true), "heap room: {:?}", flags_at(room));
            }
            // Larger than a heap, so a thread arena serves it from `mmap`: twice, the second
            // mapping usually at the first one's address, and each asked for.
            for round in 0..2 {
                let big = vec![2u8; HEAP + (32 << 20)];
                // SAFETY: as above.
                let big_kind = unsafe { home(big.as_ptr()) };
                if kind == Home::ThreadHeap {
                    assert_eq!(big_kind, Home::Mapped, "96 MiB block, round {round}");
                }
                let mid = big.as_ptr() as usize + big.len() / 2;
                assert_eq!(
                    asked(mid),
                    Some(true),
                    "96 MiB block ({big_kind:?}), round {round}: {:?}",
                    flags_at(mid)
                );
                assert_eq!(big[big.len() - 1], 2);
            }
            assert_eq!(block[12345], 1);
        })
        .join()
        .expect("thread");
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
