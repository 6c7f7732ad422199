//! Exact sums of a few f64 terms: a nonoverlapping floating-point expansion on the stack
//! (components in increasing magnitude, each added with TwoSum, so the represented sum is
//! exact), rounded at the end to a double-double plus a third word. Used where the
//! elementary functions need more than double-double precision for a step: the argument
//! reduction of exp, the remainder of the logarithm's series, the product `y·ln x` of powf,
//! the compensated powers of powi, and the fused `mul_add`.

use super::{fast_two_sum, two_prod, two_sum, Dd};

/// Components an expansion can hold (each added term adds at most one).
const CAP: usize = 40;

/// `Σ cᵢ` held exactly as a nonoverlapping expansion `c₀ + c₁ + … ` (|c₀| < |c₁| < …).
#[derive(Clone, Copy)]
pub(crate) struct Expansion {
    c: [f64; CAP],
    n: usize,
}

impl Expansion {
    /// The empty sum (0).
    pub(crate) fn new() -> Expansion {
        Expansion {
            c: [0.0; CAP],
            n: 0,
        }
    }

    /// Adds `x` exactly (Grow-Expansion: `q ← x`, then `(q, hᵢ) = TwoSum(q, cᵢ)` up the
    /// components, keeping the nonzero `hᵢ` and finally `q`). Finite terms only.
    pub(crate) fn add(&mut self, x: f64) {
        if x == 0.0 {
            return;
        }
        let mut q = x;
        let mut m = 0;
        for i in 0..self.n {
            let (s, h) = two_sum(q, self.c[i]);
            q = s;
            if h != 0.0 {
                self.c[m] = h;
                m += 1;
            }
        }
        assert!(m < CAP, "efa-num: Expansion capacity exceeded");
        if q != 0.0 {
            self.c[m] = q;
            m += 1;
        }
        self.n = m;
    }

    /// Adds both words of a double-double.
    pub(crate) fn add_dd(&mut self, x: Dd) {
        self.add(x.lo);
        self.add(x.hi);
    }

    /// Adds `a·b` exactly (both words of TwoProd).
    pub(crate) fn add_prod(&mut self, a: f64, b: f64) {
        let (p, e) = two_prod(a, b);
        self.add(e);
        self.add(p);
    }

    /// Adds `a·b` for two double-doubles: `aₕbₕ`, `aₕbₗ`, `aₗbₕ` exactly and `fl(aₗbₗ)`
    /// (error ≤ u·|aₗbₗ| ≤ u³·|ab|).
    pub(crate) fn add_dd_prod(&mut self, a: Dd, b: Dd) {
        self.add(a.lo * b.lo);
        self.add_prod(a.lo, b.hi);
        self.add_prod(a.hi, b.lo);
        self.add_prod(a.hi, b.hi);
    }

    /// The sum rounded by adding the components from the smallest up (within an ulp of the
    /// exact sum for a nonoverlapping expansion).
    pub(crate) fn approx(&self) -> f64 {
        self.c[..self.n].iter().fold(0.0, |s, &c| s + c)
    }

    /// The sum as `(d, t)`: a normalised double-double `d` and a third word `t` with
    /// `d + t` equal to the sum up to the rounding of `t` (|t| ≲ 2u²·|d|).
    pub(crate) fn to_dd_ext(mut self) -> (Dd, f64) {
        let x1 = self.approx();
        self.add(-x1);
        let x2 = self.approx();
        self.add(-x2);
        let x3 = self.approx();
        let (h, l) = fast_two_sum(x1, x2);
        (Dd::raw(h, l), x3)
    }

    /// The sum rounded to a double-double (error about u²/2 of the sum, plus u³).
    pub(crate) fn to_dd(self) -> Dd {
        let (d, t) = self.to_dd_ext();
        d.add_f64(t)
    }
}
