//! Per-job scratch of the lane-batched path, sized for the problem and reused across the jobs
//! of a thread.

use super::body::Dims;
use super::{Group, GROUP};
use crate::problem::Problem;
use efa_num::Real;

/// Lane-major scratch of one task, sized for the problem: the packed inputs `qt` (Q), `kt`
/// (K), `vt` (V) and `dot` (dO, backward); `s` the scores, then `exp(s − m)` (forward) or `P`
/// (backward); `acc` the output (`P·V` times `1/l`); `m`, `l` the running max and sum per row
/// (forward) or `lse` and `D` (backward; `dlo` the rest of `D` in f64, see `d_rows`);
/// `ds` = dP, then dS; `g` the dQ, dK, dV accumulators;
/// `cnt` the keys each row sees and `first` the first row seeing each key.
pub(super) struct Scratch<T> {
    pub cnt: Vec<usize>,
    pub first: Vec<usize>,
    pub qt: Vec<T>,
    pub kt: Vec<T>,
    pub vt: Vec<T>,
    pub s: Vec<T>,
    pub acc: Vec<T>,
    pub m: Vec<T>,
    pub l: Vec<T>,
    pub dot: Vec<T>,
    pub dlo: Vec<T>,
    pub ds: Vec<T>,
    pub g: [Vec<T>; 3],
}

impl<T: Real> Scratch<T> {
    fn new(p: &Problem<T>, backward: bool) -> Self {
        let z = |n: usize| vec![T::ZERO; n * GROUP];
        let (nq, nk, d, dv) = (p.nq, p.nk, p.d, p.dv);
        let b = |n: usize| if backward { z(n) } else { Vec::new() };
        Scratch {
            cnt: vec![0; nq],
            first: vec![0; nk],
            qt: z(nq * d),
            kt: z(nk * d),
            vt: z(nk * dv),
            s: z(nq * nk),
            acc: z(if backward { 0 } else { nq * dv }),
            m: z(nq),
            l: z(nq),
            dot: b(nq * dv),
            dlo: b(nq),
            ds: b(nq * nk),
            g: [b(nq * d), b(nk * d), b(nk * dv)],
        }
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

/// The shape a [`Scratch`] was sized for: queries, keys, head widths, backward or not.
type ScratchKey = (usize, usize, usize, usize, bool);

/// Most finished scratches a thread keeps for reuse.
const SPARE_MAX: usize = 4;

thread_local! {
    /// Scratch of this thread's finished jobs (with the shape it was sized for), reused by its
    /// next job of the same shape: a fresh one is about half a mebibyte zeroed per rayon job,
    /// a few percent of a call at two threads. Every element a body reads is written first in
    /// the same job, so what a previous job left there is never read.
    static SPARE: std::cell::RefCell<Vec<(ScratchKey, Box<dyn std::any::Any>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A job's scratch, taken from this thread's spares or made, and given back when dropped.
pub(super) struct Reused<T: Real> {
    key: ScratchKey,
    sc: Option<Box<Scratch<T>>>,
}

impl<T: Real> Reused<T> {
    pub fn get(p: &Problem<T>, backward: bool) -> Self {
        let key = (p.nq, p.nk, p.d, p.dv, backward);
        let spare = SPARE.with(|s| {
            let mut s = s.borrow_mut();
            let at = s
                .iter()
                .position(|(k, b)| *k == key && b.is::<Scratch<T>>())?;
            s.swap_remove(at).1.downcast::<Scratch<T>>().ok()
        });
        let sc = spare.unwrap_or_else(|| Box::new(Scratch::new(p, backward)));
        Reused { key, sc: Some(sc) }
    }
}

impl<T: Real> Drop for Reused<T> {
    fn drop(&mut self) {
        if let Some(sc) = self.sc.take() {
            // `try_with`: nothing is kept while the thread's locals are being destroyed.
            let _ = SPARE.try_with(|s| {
                let mut s = s.borrow_mut();
                if s.len() >= SPARE_MAX {
                    s.remove(0);
                }
                s.push((self.key, sc));
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
