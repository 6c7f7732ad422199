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
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 1 << 30);
        mallopt(M_TOP_PAD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}
