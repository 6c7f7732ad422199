//! Allocator tuning for training loops.
//!
//! A training step allocates and frees the same few hundred kilobyte-sized tensors thousands of
//! times. With glibc's defaults, freeing them trims the heap top (`brk`) and the next step
//! faults the pages back in, zeroed by the kernel: measured at about a quarter of an EFA
//! training step. Raising the trim and mmap thresholds keeps those pages mapped.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt only adjusts allocator parameters; it is called before any other thread
    // exists, and failure (return 0) leaves the defaults in place.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}
