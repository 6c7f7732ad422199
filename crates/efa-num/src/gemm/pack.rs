//! Packing of `A` and `B` into the panel layouts the register tile reads, and the per-thread
//! 64-byte aligned buffers that hold them.
//!
//! - `A` (`mc × kc`) becomes ⌈mc/MR⌉ panels of `kc × MR`: panel `q`, step `p` holds
//!   `A[q·MR + i, p]` for `i < MR` at `out[(q·kc + p)·MR + i]`, zero for rows past `mc`.
//! - `B` (`kc × nc`) becomes ⌈nc/NR⌉ panels of `kc × NR`: panel `q`, step `p` holds
//!   `B[p, q·NR + j]` at `out[(q·kc + p)·NR + j]`, zero for columns past `nc`.
//!
//! The zero padding lets edge tiles run the full-width tile without reading past the caller's
//! matrices; only the stored part of an edge tile is written back.

use crate::Real;
use std::cell::RefCell;

/// One cache line: the allocation unit, so every packed panel starts 64-byte aligned and a
/// 512-bit load of a packed row never straddles two lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A growable, 64-byte aligned scratch buffer; a thread's own ones (`.1`) take [`ROOM_BYTES`]
/// when they first grow large.
#[derive(Default)]
pub(super) struct Buf(Vec<Line>, bool);

/// Room a thread's buffer takes when it first grows large: the largest packed block of the
/// blocked products (an `MC × KC` block of `A`; a `KC × NC` block of `B` is smaller), so that
/// it does not grow again when a later product is larger than the ones before it (which two
/// worker threads meet in an order that changes from run to run). Address space until
/// written: only the elements a product packs are touched. A one-off buffer (see
/// [`with_bufs`]) takes only what its product needs.
const ROOM_BYTES: usize = super::driver::MC * super::driver::KC_BYTES;

impl Buf {
    /// A pointer to at least `len` elements of `E` (contents unspecified; grown as needed).
    pub(super) fn get<E: Real>(&mut self, len: usize) -> *mut E {
        let lines = (len * std::mem::size_of::<E>()).div_ceil(64);
        if self.0.len() < lines {
            // Room as soon as the buffer is large anyway (a small one stays small: many
            // threads only ever pack small blocks).
            if self.1 && self.0.capacity() < lines && lines * 64 >= crate::pool::LARGE {
                let room = lines.max(ROOM_BYTES / 64);
                self.0.reserve_exact(room - self.0.len());
            }
            self.0.resize(lines, Line([0; 64]));
        }
        self.0.as_mut_ptr().cast()
    }
}

thread_local! {
    /// This thread's packing buffers for `A` and `B`, kept between calls so that repeated
    /// products do not allocate (or fault in fresh pages) each time.
    static BUFS: RefCell<(Buf, Buf)> =
        const { RefCell::new((Buf(Vec::new(), true), Buf(Vec::new(), true))) };
}

/// Runs `f` with this thread's two packing buffers (fresh ones if they are in use, which
/// the driver never does, or if thread-local storage is being torn down).
pub(super) fn with_bufs<R>(f: impl FnOnce(&mut Buf, &mut Buf) -> R) -> R {
    let mut f = Some(f);
    let done = BUFS.try_with(|cell| {
        cell.try_borrow_mut().ok().map(|mut g| {
            let (a, b) = &mut *g;
            (f.take().expect("called once"))(a, b)
        })
    });
    match done {
        Ok(Some(r)) => r,
        _ => (f.take().expect("not called yet"))(&mut Buf::default(), &mut Buf::default()),
    }
}

/// Packs the `mc × kc` block `A[i, p] = a[i·rsa + p·csa]` into `MR`-row panels (layout in the
/// module docs).
///
/// # Safety
/// `a` valid at every `i·rsa + p·csa` (`i < mc`, `p < kc`); `out` valid for
/// `⌈mc/MR⌉·MR·kc` elements and not overlapping `a`.
#[inline(always)]
pub(super) unsafe fn pack_a<E: Real, const MR: usize>(
    mc: usize,
    kc: usize,
    a: *const E,
    rsa: isize,
    csa: isize,
    out: *mut E,
) {
    let mut q = 0;
    while q * MR < mc {
        let rows = MR.min(mc - q * MR);
        // SAFETY: rows `q·MR + i` with `i < rows` are inside the block; the panel occupies
        // `out[q·kc·MR .. (q + 1)·kc·MR]`, inside the stated length.
        unsafe {
            let panel = out.add(q * kc * MR);
            let aq = a.offset((q * MR) as isize * rsa);
            if csa == 1 {
                // Rows are contiguous: read each row in order, write with stride MR.
                for i in 0..rows {
                    let src = aq.offset(i as isize * rsa);
                    for p in 0..kc {
                        *panel.add(p * MR + i) = *src.add(p);
                    }
                }
            } else {
                for p in 0..kc {
                    let src = aq.offset(p as isize * csa);
                    for i in 0..rows {
                        *panel.add(p * MR + i) = *src.offset(i as isize * rsa);
                    }
                }
            }
            if rows < MR {
                for p in 0..kc {
                    for i in rows..MR {
                        *panel.add(p * MR + i) = E::ZERO;
                    }
                }
            }
        }
        q += 1;
    }
}

/// Packs the `kc × nc` block `B[p, j] = b[p·rsb + j·csb]` into `NR`-column panels (layout in
/// the module docs).
///
/// # Safety
/// `b` valid at every `p·rsb + j·csb` (`p < kc`, `j < nc`); `out` valid for
/// `⌈nc/NR⌉·NR·kc` elements and not overlapping `b`.
#[inline(always)]
pub(super) unsafe fn pack_b<E: Real>(
    nr: usize,
    kc: usize,
    nc: usize,
    b: *const E,
    rsb: isize,
    csb: isize,
    out: *mut E,
) {
    let mut q = 0;
    while q * nr < nc {
        let cols = nr.min(nc - q * nr);
        // SAFETY: columns `q·NR + j` with `j < cols` are inside the block; the panel occupies
        // `out[q·kc·NR .. (q + 1)·kc·NR]`, inside the stated length.
        unsafe {
            let panel = out.add(q * kc * nr);
            let bq = b.offset((q * nr) as isize * csb);
            if csb == 1 {
                for p in 0..kc {
                    let (src, dst) = (bq.offset(p as isize * rsb), panel.add(p * nr));
                    if cols == nr {
                        // A constant length once inlined: a few vector moves, not a call.
                        std::ptr::copy_nonoverlapping(src, dst, nr);
                    } else {
                        std::ptr::copy_nonoverlapping(src, dst, cols);
                        for j in cols..nr {
                            *dst.add(j) = E::ZERO;
                        }
                    }
                }
            } else {
                // Columns are contiguous (a transposed B) or scattered: read column-wise.
                for j in 0..cols {
                    let src = bq.offset(j as isize * csb);
                    for p in 0..kc {
                        *panel.add(p * nr + j) = *src.offset(p as isize * rsb);
                    }
                }
                for p in 0..kc {
                    for j in cols..nr {
                        *panel.add(p * nr + j) = E::ZERO;
                    }
                }
            }
        }
        q += 1;
    }
}
