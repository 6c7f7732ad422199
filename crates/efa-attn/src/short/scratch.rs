//! Per-job scratch of the lane-batched path, sized for the problem and reused across the jobs
//! of a thread.

use super::body::Dims;
use super::{Group, GROUP};
use crate::problem::Problem;
use efa_num::pool::Buf;
use efa_num::Real;

/// Lane-major scratch of one task, sized for the problem: the packed inputs `qt` (Q), `kt`
/// (K), `vt` (V) and `dot` (dO, backward); `s` the scores, then `exp(s − m)` (forward) or `P`
/// (backward); `acc` the output (`P·V` times `1/l`); `m`, `l` the running max and sum per row
/// (forward) or `lse` and `D` (backward; `dlo` the rest of `D` in f64, see `d_rows`);
/// `ds` = dP, then dS; `g` the dQ, dK, dV accumulators;
/// `cnt` the keys each row sees and `first` the first row seeing each key.
///
/// The buffers come from the engine's cache ([`efa_num::pool`]) and go back to it when the
/// scratch drops; [`Scratch::fit`] re-sizes a scratch made for one problem to another (a
/// micro-batch trimmed to another width), so a thread's scratch serves every shape.
pub(super) struct Scratch<T> {
    pub cnt: Buf<usize>,
    pub first: Buf<usize>,
    pub qt: Buf<T>,
    pub kt: Buf<T>,
    pub vt: Buf<T>,
    pub s: Buf<T>,
    pub acc: Buf<T>,
    pub m: Buf<T>,
    pub l: Buf<T>,
    pub dot: Buf<T>,
    pub dlo: Buf<T>,
    pub ds: Buf<T>,
    pub g: [Buf<T>; 3],
}

/// `b` with exactly `n` elements: shortened, or lengthened with zeros; a buffer too small is
/// replaced by one from the cache (`n` zeros; the old one goes back to the cache).
fn set_len<U: Clone>(b: &mut Buf<U>, n: usize, zero: U) {
    if b.capacity() < n {
        *b = Buf::from_vec(efa_num::pool::filled(n, zero));
    } else {
        b.resize(n, zero);
    }
}

impl<T: Real> Scratch<T> {
    fn new() -> Self {
        Scratch {
            cnt: Buf::new(),
            first: Buf::new(),
            qt: Buf::new(),
            kt: Buf::new(),
            vt: Buf::new(),
            s: Buf::new(),
            acc: Buf::new(),
            m: Buf::new(),
            l: Buf::new(),
            dot: Buf::new(),
            dlo: Buf::new(),
            ds: Buf::new(),
            g: [Buf::new(), Buf::new(), Buf::new()],
        }
    }

    /// Every buffer at the length `p` needs (lanes-wide rows; the backward's buffers empty in
    /// the forward). What a previous problem left in them is never read: every element a body
    /// reads is written first in the same group.
    fn fit(&mut self, p: &Problem<T>, backward: bool) {
        let (nq, nk, d, dv) = (p.nq, p.nk, p.d, p.dv);
        let b = |n: usize| if backward { n * GROUP } else { 0 };
        set_len(&mut self.cnt, nq, 0);
        set_len(&mut self.first, nk, 0);
        for (buf, n) in [
            (&mut self.qt, nq * d * GROUP),
            (&mut self.kt, nk * d * GROUP),
            (&mut self.vt, nk * dv * GROUP),
            (&mut self.s, nq * nk * GROUP),
            (&mut self.acc, if backward { 0 } else { nq * dv * GROUP }),
            (&mut self.m, nq * GROUP),
            (&mut self.l, nq * GROUP),
            (&mut self.dot, b(nq * dv)),
            (&mut self.dlo, b(nq)),
            (&mut self.ds, b(nq * nk)),
        ] {
            set_len(buf, n, T::ZERO);
        }
        let [gq, gk, gv] = &mut self.g;
        set_len(gq, b(nq * d), T::ZERO);
        set_len(gk, b(nk * d), T::ZERO);
        set_len(gv, b(nk * dv), T::ZERO);
    }

    /// The group's visible key counts per row and first rows per key (the same for every head
    /// of the group), as [`Dims`] for the bodies.
    pub fn dims(&mut self, p: &Problem<T>, g: Group, bh: usize) -> Dims {
        p.rules.counts(bh / p.heads, 0, 0, p.nk, &mut self.cnt);
        debug_assert!(self.cnt.is_sorted() && self.cnt[p.nq - 1] == g.c);
        let mut i = 0;
        for (j, f) in self.first[..g.c].iter_mut().enumerate() {
            while self.cnt[i] <= j {
                i += 1;
            }
            *f = i;
        }
        Dims {
            nq: p.nq,
            c: g.c,
            d: p.d,
            dv: p.dv,
            cnt: self.cnt.as_ptr(),
            first: self.first.as_ptr(),
        }
    }
}

/// Most finished scratches a thread keeps for reuse.
const SPARE_MAX: usize = 4;

thread_local! {
    /// Scratch of this thread's finished jobs, reused (re-sized) by its next jobs: a fresh
    /// one is about half a mebibyte zeroed per rayon job, a few percent of a call at two
    /// threads.
    static SPARE: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A job's scratch, taken from this thread's spares or made, and given back when dropped.
pub(super) struct Reused<T: Real> {
    sc: Option<Box<Scratch<T>>>,
}

impl<T: Real> Reused<T> {
    pub fn get(p: &Problem<T>, backward: bool) -> Self {
        let spare = SPARE.with(|s| {
            let mut s = s.borrow_mut();
            let at = s.iter().rposition(|b| b.is::<Scratch<T>>())?;
            s.swap_remove(at).downcast::<Scratch<T>>().ok()
        });
        let mut sc = spare.unwrap_or_else(|| Box::new(Scratch::new()));
        sc.fit(p, backward);
        Reused { sc: Some(sc) }
    }
}

impl<T: Real> Drop for Reused<T> {
    fn drop(&mut self) {
        if let Some(sc) = self.sc.take() {
            // `try_with`: nothing is kept while the thread's locals are being destroyed (the
            // scratch's buffers then go back to the cache as it drops).
            let _ = SPARE.try_with(|s| {
                let mut s = s.borrow_mut();
                if s.len() >= SPARE_MAX {
                    s.remove(0);
                }
                s.push(sc);
            });
        }
    }
}

impl<T: Real> std::ops::Deref for Reused<T> {
    type Target = Scratch<T>;
    fn deref(&self) -> &Scratch<T> {
        self.sc.as_ref().expect("present until dropped")
    }
}

impl<T: Real> std::ops::DerefMut for Reused<T> {
    fn deref_mut(&mut self) -> &mut Scratch<T> {
        self.sc.as_mut().expect("present until dropped")
    }
}
