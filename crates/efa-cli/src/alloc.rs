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
//! machines), [`Advised`] asks for them when it hands out a block of at least 128 KiB: on the
//! heap from that block's 2 MiB page to the end of its 64 MiB-aligned window (a thread arena's
//! heap is that window; the main heap grows into it), where the blocks after it will come
//! from, before they are touched; or on a block from `mmap` itself. Each 2 MiB page is asked
//! for once. Paired at two threads, the temperature epochs ran ×1.043 (L = 2), ×1.030 (L = 4,
//! lag 2) and ×1.004 (L = 4). The arithmetic is unchanged; where the kernel has no transparent
//! huge pages, or gives them to all memory, the request changes nothing. Like glibc's own
//! `glibc.malloc.hugetlb=1`, which does the same from the environment, it lets page faults in
//! those ranges compact memory for a huge page (`defrag` = `madvise`).

/// Blocks from this size up come straight from `mmap` ([`tune`]), fresh and zero.
const MMAP_THRESHOLD: usize = 32 << 20;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_TOP_PAD: i32 = -2;
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt only adjusts allocator parameters; it is called before any other thread
    // exists, and failure (return 0) leaves the defaults in place.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD as i32);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        mallopt(M_TOP_PAD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}

/// Size of a transparent huge page with 4 KiB base pages (x86-64).
const HUGE: usize = 2 << 20;

/// Size and alignment of the heaps of glibc's per-thread arenas on 64-bit targets.
const HEAP: usize = 64 << 20;

/// Smallest block that makes the allocator look at its huge pages.
const ADVISE_MIN: usize = 128 << 10;

/// Huge pages already asked for, by page number (`address / HUGE + 1`; 0 is empty), in a
/// direct-mapped table: blocks come back at the same addresses step after step, so a page is
/// asked for once, and a page pushed out by another only costs one more request.
#[cfg(target_os = "linux")]
static ASKED: [std::sync::atomic::AtomicUsize; 4096] =
    [const { std::sync::atomic::AtomicUsize::new(0) }; 4096];

/// The system allocator, asking for transparent huge pages on large blocks and the heap
/// room after them (see the module documentation).
pub struct Advised;

/// After a block of `size` bytes at `p`: asks for huge pages from the huge page holding `p`
/// to the end of its 64 MiB-aligned window (where a heap's next blocks will come from; a
/// thread arena's heap is that window), or on the whole huge pages inside `p`'s own mapping
/// for a block from `mmap`. Nothing when that page was asked for already.
#[cfg(target_os = "linux")]
fn advise(p: *mut u8, size: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    let at = p as usize;
    let (lo, hi) = if size >= MMAP_THRESHOLD {
        (at.next_multiple_of(HUGE), (at + size) / HUGE * HUGE)
    } else {
        (at / HUGE * HUGE, (at / HEAP + 1) * HEAP)
    };
    if lo >= hi {
        return;
    }
    let slot = |page: usize| &ASKED[page % ASKED.len()];
    if slot(lo / HUGE).load(Relaxed) == lo / HUGE + 1 {
        return;
    }
    // SAFETY: MADV_HUGEPAGE only changes how the kernel backs anonymous pages of the range
    // (contents are kept); addresses not mapped are skipped (the call then returns an error,
    // as does a kernel without transparent huge pages, and nothing else changes).
    unsafe { madvise(lo as *mut std::ffi::c_void, hi - lo, MADV_HUGEPAGE) };
    for page in lo / HUGE..hi / HUGE {
        slot(page).store(page + 1, Relaxed);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_: *mut u8, _: usize) {}

// SAFETY: every call is forwarded to the system allocator with the same layout; `advise`
// neither allocates nor touches the contents of any block.
unsafe impl std::alloc::GlobalAlloc for Advised {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() && layout.size() >= ADVISE_MIN {
            advise(p, layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !p.is_null() && layout.size() >= ADVISE_MIN {
            advise(p, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { std::alloc::System.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's pointer, layout and size.
        let q = unsafe { std::alloc::System.realloc(p, layout, size) };
        if !q.is_null() && size >= ADVISE_MIN {
            advise(q, size);
        }
        q
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
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

    /// The program's allocator (this crate's `#[global_allocator]`, also in its test harness)
    /// asks for huge pages on a large heap block, on the heap room after it, and on a block
    /// from `mmap`; the kernel records the request as the mapping's `hg` flag.
    #[test]
    fn large_blocks_and_the_heap_after_them_ask_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            // A kernel without transparent huge pages: there is nothing to ask for.
            return;
        }
        // A thread of its own allocates from an arena heap (a 64 MiB-aligned window) when
        // one is free, or else from a heap another thread used.
        std::thread::spawn(|| {
            let heap_block = vec![1u8; 8 << 20];
            let mid = heap_block.as_ptr() as usize + heap_block.len() / 2;
            assert_eq!(asked(mid), Some(true), "8 MiB block: {:?}", flags_at(mid));
            // The room after it, where that heap is mapped (a thread arena's whole window;
            // the main heap's end may come first).
            let end = heap_block.as_ptr() as usize + heap_block.len();
            let room = (end / super::HEAP + 1) * super::HEAP - super::HUGE / 2;
            assert_ne!(asked(room), Some(false), "heap room: {:?}", flags_at(room));
            let mapped = vec![2u8; super::MMAP_THRESHOLD + (16 << 20)];
            let mid = mapped.as_ptr() as usize + mapped.len() / 2;
            assert_eq!(asked(mid), Some(true), "48 MiB block: {:?}", flags_at(mid));
            assert_eq!((heap_block[12345], mapped[54321]), (1, 2));
        })
        .join()
        .expect("thread");
    }
}
