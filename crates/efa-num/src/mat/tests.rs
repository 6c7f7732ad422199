//! The strided views against direct indexing.

use super::*;

#[test]
fn views_address_their_elements() {
    let a: Vec<i32> = (0..12).collect();
    let v = MatRef::new(&a, 3, 2, 4, 1);
    assert_eq!(v.get(2, 1), 9);
    assert_eq!(v.t().get(1, 2), 9);
    assert_eq!(v.block(1, 1, 2, 1).get(1, 0), 9);
    // Column-major: (i, j) at i + 3·j.
    let c = MatRef::new(&a, 3, 4, 1, 3);
    assert_eq!(c.get(2, 3), 11);
    // Empty views fit any slice, with any strides.
    let e = MatRef::new(&a[..0], 0, 5, 100, -7);
    assert_eq!((e.rows(), e.cols()), (0, 5));
    // A negative stride along a dimension of one index addresses nothing else.
    assert_eq!(MatRef::new(&a, 1, 3, -5, 2).get(0, 2), 4);
}

#[test]
#[should_panic(
    expected = "MatRef::new: a 3 × 4 view at strides (4, 1) addresses offsets 0..=11, outside the slice of 10 elements"
)]
fn a_view_past_its_slice_panics() {
    let a = [0f32; 10];
    let _ = MatRef::new(&a, 3, 4, 4, 1);
}

#[test]
#[should_panic(expected = "outside the slice")]
fn a_negative_stride_before_the_slice_panics() {
    let a = [0f32; 10];
    let _ = MatRef::new(&a, 2, 2, -2, 1);
}

#[test]
#[should_panic(expected = "outside the slice")]
fn huge_strides_are_outside_not_overflows() {
    let a = [0u8; 4];
    let _ = MatRef::new(&a, 3, 3, isize::MAX, isize::MAX);
}

#[test]
fn mutable_views_reject_elements_addressed_twice() {
    let mut a = [0f64; 16];
    assert!(!overlaps(4, 4, 4, 1));
    assert!(!overlaps(4, 4, 1, 4));
    assert!(!overlaps(4, 3, -4, 1));
    assert!(!overlaps(1, 5, 0, 1));
    assert!(!overlaps(5, 1, 3, 0));
    assert!(!overlaps(3, 0, 0, 1));
    assert!(!overlaps(0, 3, 1, 0));
    assert!(overlaps(2, 5, 4, 1));
    assert!(overlaps(3, 1, 0, 1));
    assert!(overlaps(3, 3, 0, 0));
    assert!(overlaps(3, usize::MAX, isize::MAX, 4));
    let r = std::panic::catch_unwind(move || {
        let _ = MatMut::new(&mut a, 2, 4, 3, 1);
    });
    let msg = r
        .expect_err("overlapping rows")
        .downcast::<String>()
        .unwrap();
    assert!(
        msg.contains("2 × 4 view at strides (3, 1) addresses an element twice"),
        "{msg}"
    );
}

#[test]
fn mutable_views_write_through() {
    let mut a = [0u8; 6];
    let mut m = MatMut::row_major(&mut a, 2, 3, 3);
    m.rb_mut().t().set(2, 1, 5);
    assert_eq!(m.get(1, 2), 5);
    let mut b = m.block(1, 0, 1, 2);
    b.set(0, 1, 3);
    assert_eq!(a, [0, 0, 0, 0, 3, 5]);
}
