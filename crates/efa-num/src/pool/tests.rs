//! The engine cache's size classes, reuse, and provisioning bound.

use super::*;

#[test]
fn classes_have_four_significant_bits_and_cover_the_request() {
    for bytes in [
        1usize,
        16,
        17,
        100,
        4095,
        LARGE,
        LARGE + 1,
        300_001,
        1 << 30,
    ] {
        let c = class_bytes(bytes);
        assert!(c >= bytes && c - bytes <= bytes / 8, "{bytes} → {c}");
        assert!(
            c >> c.trailing_zeros() < 16,
            "{c}: more than four significant bits"
        );
        assert_eq!(class_bytes(c), c, "a class is its own class");
    }
    assert_eq!(class_bytes(LARGE + 1) % 4096, 0);
}

/// Bytes the cache holds free in the bin of `layout`.
fn held_in(layout: Layout) -> usize {
    let c = cache();
    c.bins
        .iter()
        .filter(|b| b.layout == layout)
        .map(|b| b.free.len() * layout.size())
        .sum()
}

/// A caller that frees what it takes as ordinary vectors (a kernel's output dropped by
/// its user) never gives a block back: the cache must not keep provisioning that class.
/// It once did, a spare block per take, until it held `MAX_HELD` bytes (a mebibyte-sized
/// output taken and dropped 400 times grew the process by a gigabyte, every take then
/// faulting its pages in).
#[test]
fn blocks_never_given_back_do_not_grow_the_cache() {
    // A size no other test of this crate uses (its own class and bin).
    let n = 300_000; // 1.2 MB of f32
    let layout = Layout::array::<f32>(class_bytes(n * 4) / 4).unwrap();
    std::thread::spawn(move || {
        for _ in 0..200 {
            let mut v = take::<f32>(n);
            v.resize(n, 1.0);
            drop(std::hint::black_box(v));
        }
        let threads = rayon::current_num_threads();
        let held = held_in(layout);
        assert!(
            held <= threads * layout.size(),
            "{} blocks of {} bytes held after 200 takes never given back ({threads} threads)",
            held / layout.size(),
            layout.size()
        );
    })
    .join()
    .unwrap();
}

#[test]
fn a_large_buffer_given_back_is_taken_again() {
    // Sizes no other test of this crate uses, so a parallel test cannot take the block.
    std::thread::spawn(|| {
        let n = 40_000; // 160 KB of f32
        let mut a = take::<f32>(n);
        a.resize(n, 1.5);
        let at = a.as_ptr() as usize;
        let cap = a.capacity();
        give(a);
        // Another type of the same size and alignment, a nearby size of the same class.
        let b = take::<u32>(n - 10);
        assert_eq!(b.as_ptr() as usize, at, "the cached block comes back");
        assert_eq!((b.len(), b.capacity()), (0, cap));
        give(b);
        // A different alignment does not share it.
        let c = take::<f64>(n / 2);
        assert_ne!(c.as_ptr() as usize, at);
        // Small buffers are not cached.
        let s = take::<f32>(100);
        assert_eq!(s.capacity(), 100);
        give(s);
        let z = filled::<f32>(n, 0.0);
        assert_eq!(z.as_ptr() as usize, at);
        assert!(z.iter().all(|&x| x == 0.0), "zeroed over the old contents");
        let u = uninit::<f32>(n);
        assert_eq!(u.len(), n);
        give(z);
    })
    .join()
    .unwrap();
}

/// A class whose blocks mostly come back but one in four is dropped by the caller (a library
/// user calling a kernel beside training): the cache holds a bounded number of its blocks.
#[test]
fn blocks_sometimes_not_given_back_do_not_grow_the_cache() {
    let n = 310_000; // its own class (1.25 MB of f32)
    let layout = Layout::array::<f32>(class_bytes(n * 4) / 4).unwrap();
    std::thread::spawn(move || {
        for i in 0..400 {
            let mut a = take::<f32>(n);
            a.resize(n, 1.0);
            let mut b = take::<f32>(n);
            b.resize(n, 2.0);
            give(a);
            if i % 4 == 0 {
                drop(std::hint::black_box(b));
            } else {
                give(b);
            }
        }
        let threads = rayon::current_num_threads();
        let held = held_in(layout);
        assert!(
            held <= 4 * threads * layout.size(),
            "{} blocks of {} bytes held after 100 of 800 takes were not given back",
            held / layout.size(),
            layout.size()
        );
    })
    .join()
    .unwrap();
}

/// A request whose class has no free block takes a free block of the smallest larger class
/// up to twice its size (a micro-batch trimmed to a width not seen before), with that class's
/// capacity, and the block goes back to its own class; nothing larger than twice is lent.
#[test]
fn a_larger_free_block_is_lent_up_to_twice_the_size() {
    std::thread::spawn(|| {
        // Sizes no other test of this crate uses (classes of 3.9, 2.6 and 1.0 MB of f32).
        let big = 640 * 1024 * 3 / 2;
        let mut a = take::<f32>(big);
        a.resize(big, 1.0);
        let (at, cap) = (a.as_ptr() as usize, a.capacity());
        give(a);
        let small = 640 * 1024;
        let b = take::<f32>(small);
        assert_eq!(
            b.as_ptr() as usize,
            at,
            "the larger class's free block is lent"
        );
        assert_eq!(b.capacity(), cap, "with its own capacity");
        give(b);
        let c = take::<f32>(big);
        assert_eq!(c.as_ptr() as usize, at, "it went back to its own class");
        // Less than half the size: not lent.
        let tiny = 640 * 1024 * 3 / 8;
        give(c);
        let d = take::<f32>(tiny);
        assert_ne!(
            d.as_ptr() as usize,
            at,
            "a block over twice the size is not lent"
        );
        assert_eq!(d.capacity() * 4, class_bytes(tiny * 4));
        let e = take::<f32>(big);
        assert_eq!(e.as_ptr() as usize, at);
        give(d);
        give(e);
    })
    .join()
    .unwrap();
}
