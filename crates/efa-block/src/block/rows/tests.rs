//! The column path and the dispatching entry points against the row-major path
//! ([`super::by_rows`], the code as it was before the column path) bit for bit: `P`, `O`, `dQ`,
//! `dK`, `dV` (every element of the buffers, untouched ones included) over query and key
//! counts around the vector widths, key padding, 1–3 heads, head widths that are whole padded
//! rows (16, 32) and ones that are not (8, 33), f32 and f64, every supported instruction set.

use super::*;

fn data<T: Real>(n: usize, seed: u64, amp: f64) -> Vec<T> {
    efa_check::unit_values(seed)
        .take(n)
        .map(|u| T::from_f64((u * 2.0 - 1.0) * amp))
        .collect()
}

/// Inputs of one problem: `q` (`nq` rows), `k`, `v` (`nk` rows) and `dO` at row strides a
/// little wider than the heads' columns (`k` and `v` interleaved in one buffer, as the block's
/// projections are).
struct Problem<T> {
    s: RowsShape,
    q: Vec<T>,
    kv: Vec<T>,
    d_o: Vec<T>,
    ldq: usize,
    ldkv: usize,
}

impl<T: Real> Problem<T> {
    fn new(s: RowsShape, seed: u64) -> Self {
        let (hdk, hdv) = (s.heads * s.dk, s.heads * s.dv);
        let (ldq, ldkv) = (hdk + 3, hdk + hdv + 5);
        Problem {
            s,
            q: data(s.nq * ldq, seed, 2.0),
            kv: data(s.nk * ldkv, seed + 1, 2.0),
            d_o: data(s.nq * ldq.max(hdv), seed + 2, 1.0),
            ldq,
            ldkv,
        }
    }
    fn q(&self) -> Rows<'_, T> {
        Rows {
            data: &self.q,
            ld: self.ldq,
        }
    }
    fn k(&self) -> Rows<'_, T> {
        Rows {
            data: &self.kv,
            ld: self.ldkv,
        }
    }
    fn v(&self) -> Rows<'_, T> {
        Rows {
            data: &self.kv[self.s.heads * self.s.dk..],
            ld: self.ldkv,
        }
    }
    fn qkv(&self) -> Qkv<'_, T> {
        Qkv {
            q: self.q(),
            k: self.k(),
            v: self.v(),
        }
    }

    fn d_o(&self) -> Rows<'_, T> {
        Rows {
            data: &self.d_o,
            ld: self.ldq.max(self.s.heads * self.s.dv),
        }
    }
}

/// Outputs of one forward and backward.
struct Out<T> {
    p: Vec<T>,
    o: Vec<T>,
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
}

/// Which kernels [`run`] calls.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// The row-major path (the reference).
    Rows,
    /// The column path, whatever the query count.
    Cols,
    /// The public entry points (the path chosen by `RowsShape::p_transposed`).
    Auto,
}

fn run<T: Real>(isa: Isa, pr: &Problem<T>, path: Path) -> Out<T> {
    run_with(isa, pr, path, &mut RowsScratch::new())
}

/// [`run`] on the caller's scratch.
fn run_with<T: Real>(
    isa: Isa,
    pr: &Problem<T>,
    path: Path,
    scratch: &mut RowsScratch<T>,
) -> Out<T> {
    let s = &pr.s;
    let (hdk, hdv) = (s.heads * s.dk, s.heads * s.dv);
    let (ldo, ldg) = (hdv + 2, hdk.max(hdv) + 1);
    let nan = T::from_f64(f64::NAN);
    let mut o = vec![nan; s.nq * ldo];
    let plen = match path {
        Path::Rows => by_rows::p_len(s),
        Path::Cols => cols_p_len(s),
        Path::Auto => s.p_len(),
    };
    let mut pu = vec![MaybeUninit::new(nan); plen + 5];
    let om = RowsMut {
        data: &mut o,
        ld: ldo,
    };
    let x = pr.qkv();
    let qk = (x.q, x.k);
    match path {
        Path::Rows => by_rows::forward_uninit(isa, s, qk, Some((x.v, om)), &mut pu, scratch),
        Path::Cols => forward_cols(isa, s, qk, Some((x.v, om)), &mut pu, Kept::No, scratch),
        Path::Auto => forward_uninit(isa, s, x, &mut pu, om, scratch),
    }
    .unwrap();
    // SAFETY: every element was initialised (NaN, then perhaps the kernel's value).
    let p: Vec<T> = pu.iter().map(|x| unsafe { x.assume_init() }).collect();
    let mut dq = vec![nan; s.nq * ldg];
    let mut dk = vec![nan; s.nk * ldg];
    let mut dv = vec![nan; s.nk * ldg];
    let grads = QkvGrads {
        dq: RowsMut {
            data: &mut dq,
            ld: ldg,
        },
        dk: RowsMut {
            data: &mut dk,
            ld: ldg,
        },
        dv: RowsMut {
            data: &mut dv,
            ld: ldg,
        },
    };
    let g = pr.d_o();
    match path {
        Path::Rows => by_rows::backward(isa, s, x, &p, g, grads, scratch),
        Path::Cols => backward_cols(isa, s, x, &p, g, grads, scratch),
        Path::Auto => backward(isa, s, x, &p, g, grads, scratch),
    }
    .unwrap();
    Out { p, o, dq, dk, dv }
}

/// The probabilities alone ([`probs_uninit`], or a path's forward without values), in a
/// buffer of NaN as [`run`]'s (`plen + 5` elements).
fn probs_only<T: Real>(isa: Isa, pr: &Problem<T>, path: Path) -> Vec<T> {
    let s = &pr.s;
    let nan = T::from_f64(f64::NAN);
    let plen = match path {
        Path::Rows => by_rows::p_len(s),
        Path::Cols => cols_p_len(s),
        Path::Auto => s.p_len(),
    };
    let mut pu = vec![MaybeUninit::new(nan); plen + 5];
    let mut scratch = RowsScratch::new();
    let (q, k) = (pr.q(), pr.k());
    match path {
        Path::Rows => by_rows::forward_uninit(isa, s, (q, k), None, &mut pu, &mut scratch),
        Path::Cols => forward_cols(isa, s, (q, k), None, &mut pu, Kept::No, &mut scratch),
        Path::Auto => probs_uninit(isa, s, q, k, None, &mut pu, &mut scratch),
    }
    .unwrap();
    // SAFETY: every element was initialised (NaN, then perhaps the kernel's value).
    pu.iter().map(|x| unsafe { x.assume_init() }).collect()
}

/// [`forward_uninit_kept`] into NaN-filled buffers as [`run`]'s: `P`, `O` and what it kept
/// (checked through [`probs_again`]: wrong or missing maxima and scales give another `P`).
fn forward_kept<T: Real>(isa: Isa, pr: &Problem<T>) -> (Vec<T>, Vec<T>, Vec<T>) {
    let s = &pr.s;
    let nan = T::from_f64(f64::NAN);
    let ldo = s.heads * s.dv + 2;
    let mut o = vec![nan; s.nq * ldo];
    let mut pu = vec![MaybeUninit::new(nan); s.p_len() + 5];
    let mut kept = vec![nan; s.kept_len()];
    let mut scratch = RowsScratch::new();
    let om = RowsMut {
        data: &mut o,
        ld: ldo,
    };
    forward_uninit_kept(isa, s, pr.qkv(), &mut pu, &mut kept, om, &mut scratch).unwrap();
    // SAFETY: every element was initialised (NaN, then perhaps the kernel's value).
    let p = pu.iter().map(|x| unsafe { x.assume_init() }).collect();
    (p, o, kept)
}

/// [`probs_uninit`] from what [`forward_kept`] kept, into a NaN-filled buffer, with scratch
/// left behind by the forward and backward of a larger problem (as the block op's backward
/// reuses it from sample to sample): nothing a call reads may come from an earlier call.
fn probs_again<T: Real>(isa: Isa, pr: &Problem<T>, kept: &[T]) -> Vec<T> {
    let s = &pr.s;
    let mut pu = vec![MaybeUninit::new(T::from_f64(f64::NAN)); s.p_len() + 5];
    let big = RowsShape {
        nq: s.nq + 19,
        nk: s.nk + 23,
        keys: s.nk + 23,
        ..*s
    };
    let mut scratch = RowsScratch::new();
    let out = run_with(isa, &Problem::<T>::new(big, 99), Path::Auto, &mut scratch);
    assert!(
        out.dq.iter().any(|x| !x.is_nan()),
        "the larger backward ran"
    );
    probs_uninit(isa, s, pr.q(), pr.k(), Some(kept), &mut pu, &mut scratch).unwrap();
    // SAFETY: every element was initialised (NaN, then perhaps the kernel's value).
    pu.iter().map(|x| unsafe { x.assume_init() }).collect()
}

fn same<T: Real>(what: &str, got: &[T], want: &[T], ctx: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_f64().to_bits() == w.to_f64().to_bits(),
            "{what} differs at {i}: {} vs {} ({ctx})",
            g.to_f64(),
            w.to_f64()
        );
    }
}

fn shapes() -> Vec<RowsShape> {
    let mut v = Vec::new();
    let sizes = [1, 2, 5, 8, 13, 16, 17, 31, 33, 44, 47, 48, 50, 64, 97, 132];
    for (i, &nq) in sizes.iter().enumerate() {
        for (j, &nk) in sizes.iter().enumerate() {
            // Every pair for the temperature model's head; a spread of pairs for the others.
            let (heads, dk) = match (i + 2 * j) % 7 {
                0 => (2, 16),
                1 => (1, 32),
                2 => (3, 8),
                3 => (2, 33),
                4 => (1, 16),
                5 => (3, 16),
                _ => (2, 16),
            };
            for keys in [nk, nk - nk / 3, 0] {
                v.push(RowsShape {
                    nq,
                    nk,
                    keys,
                    heads,
                    dk,
                    dv: dk,
                    scale: 1.0 / (dk as f64).sqrt(),
                });
            }
        }
    }
    v
}

fn compare<T: Real>() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
        if !isa.is_supported() {
            continue;
        }
        for (n, s) in shapes().into_iter().enumerate() {
            let pr = Problem::<T>::new(s, 7 + n as u64);
            let want = run(isa, &pr, Path::Rows);
            let ctx = format!("probabilities alone, Rows {isa:?} {} {s:?}", T::NAME);
            same("P", &probs_only(isa, &pr, Path::Rows), &want.p, &ctx);
            for path in [Path::Cols, Path::Auto] {
                let got = run(isa, &pr, path);
                let ctx = format!("{path:?} {isa:?} {} {s:?}", T::NAME);
                // The probabilities alone: the forward's buffer, bit for bit (padding and
                // the untouched tail included), also formed from what the forward kept.
                same("P alone", &probs_only(isa, &pr, path), &got.p, &ctx);
                if path == Path::Auto {
                    let (p, o, kept) = forward_kept(isa, &pr);
                    same("P (kept)", &p, &got.p, &ctx);
                    same("O (kept)", &o, &got.o, &ctx);
                    same("P again", &probs_again(isa, &pr, &kept), &got.p, &ctx);
                }
                same("O", &got.o, &want.o, &ctx);
                same("dQ", &got.dq, &want.dq, &ctx);
                same("dK", &got.dk, &want.dk, &ctx);
                same("dV", &got.dv, &want.dv, &ctx);
                // P: the column path keeps it transposed (nk rows of padded(nq) per head), the
                // row-major path as nq rows of padded(nk); every query and key compared, the
                // padding must be zero, nothing written past the buffer.
                let (transposed, len) = match path {
                    Path::Cols => (true, cols_p_len(&s)),
                    _ => (s.p_transposed(), s.p_len()),
                };
                let (gs, ws) = (
                    if transposed {
                        cols_p_stride(&s)
                    } else {
                        by_rows::p_stride(&s)
                    },
                    by_rows::p_stride(&s),
                );
                let mut seen = vec![false; len];
                for h in 0..s.heads {
                    for i in 0..s.nq {
                        for j in 0..s.nk {
                            let at = if transposed {
                                (h * s.nk + j) * gs + i
                            } else {
                                (h * s.nq + i) * gs + j
                            };
                            if path == Path::Auto {
                                assert_eq!(at, s.p_index(h, i, j));
                            }
                            seen[at] = true;
                            let (g, w) = (got.p[at], want.p[(h * s.nq + i) * ws + j]);
                            assert!(
                                g.to_f64().to_bits() == w.to_f64().to_bits(),
                                "P differs at head {h} query {i} key {j}: {} vs {} ({ctx})",
                                g.to_f64(),
                                w.to_f64()
                            );
                        }
                    }
                }
                for (at, x) in got.p.iter().enumerate() {
                    if at >= len {
                        assert!(x.is_nan(), "wrote past p_len ({ctx})");
                    } else if !seen[at] {
                        assert!(*x == T::ZERO, "P padding at {at} is {} ({ctx})", x.to_f64());
                    }
                }
            }
        }
    }
}

#[test]
fn the_same_bits_as_the_reference_f32() {
    compare::<f32>();
}

#[test]
fn the_same_bits_as_the_reference_f64() {
    compare::<f64>();
}
