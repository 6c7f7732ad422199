//! The op against plain per-sample attention written out here (each sample's substituted
//! `Q, K, V` built explicitly, softmax rows and their hand-derived backward in f64): output and
//! every input gradient; finite-difference audits (tape and op level); dominating keys (the
//! direct path and the replaced key above the base maximum) in f64 and f32; the same bits for
//! one and two threads; empty calls; errors naming the field.

use super::*;
use crate::TapeNn;
use efa_tape::{audit_fused, AuditOptions};
use efa_testkit::{rand_array, tape::assert_audit};

pub(super) const NAMES: [&str; 6] = ["q", "k", "v", "q_t", "k_t", "v_t"];

/// One problem: sizes, lengths per group, each sample's group and target.
#[derive(Clone, Debug)]
pub(super) struct Case {
    pub g: usize,
    pub n: usize,
    pub heads: usize,
    pub kd: usize,
    pub lengths: Vec<usize>,
    pub group: Vec<usize>,
    pub target: Vec<usize>,
}

impl Case {
    pub(super) fn b(&self) -> usize {
        self.group.len()
    }

    pub(super) fn hk(&self) -> usize {
        self.heads * self.kd
    }

    /// `1/√K` (1 for heads of width 0).
    pub(super) fn scale(&self) -> f64 {
        1.0 / (self.kd.max(1) as f64).sqrt()
    }

    /// Seeded `q, k, v, q_t, k_t, v_t`.
    pub(super) fn inputs(&self, seed: u64) -> Vec<ArrayD<f64>> {
        let (base, rows) = ([self.g, self.n, self.hk()], [self.b(), self.hk()]);
        (0..6)
            .map(|i| {
                let shape: &[usize] = if i < 3 { &base } else { &rows };
                let lo = if i % 3 == 2 { -1.0 } else { -1.5 };
                rand_array(shape, seed + i as u64, lo, -lo)
            })
            .collect()
    }

    pub(super) fn args(&self, v: &[Var]) -> SharedContextAttention {
        SharedContextAttention {
            q: v[0],
            k: v[1],
            v: v[2],
            q_t: v[3],
            k_t: v[4],
            v_t: v[5],
            heads: self.heads,
            scale: self.scale(),
            group: self.group.clone(),
            target: self.target.clone(),
            lengths: self.lengths.clone(),
        }
    }

    pub(super) fn op<T: Real>(&self) -> SharedOp<T> {
        SharedOp(SharedKernel::new(SharedSettings {
            heads: self.heads,
            scale: self.scale(),
            group: self.group.clone(),
            target: self.target.clone(),
            lengths: self.lengths.clone(),
        }))
    }
}

/// Plain attention per sample in f64: the output and the gradients of `Σ w∘o` with respect
/// to `q, k, v, q_t, k_t, v_t`.
fn naive(c: &Case, x: &[ArrayD<f64>], w: &ArrayD<f64>) -> Vec<ArrayD<f64>> {
    naive_in::<f64>(c, x, w)
}

/// [`naive`] computed in `T` (the inputs rounded to `T`; results widened to f64): what a plain
/// per-sample implementation in that precision gives.
pub(super) fn naive_in<T: Real>(c: &Case, x: &[ArrayD<f64>], w: &ArrayD<f64>) -> Vec<ArrayD<f64>> {
    let (n, hk, kd, sc) = (c.n, c.hk(), c.kd, T::from_f64(c.scale()));
    let x: Vec<ArrayD<T>> = x.iter().map(|a| a.mapv(T::from_f64)).collect();
    let w = w.mapv(T::from_f64);
    let mut out: Vec<ArrayD<T>> = x.iter().map(|a| ArrayD::zeros(a.raw_dim())).collect();
    let mut o = ArrayD::<T>::zeros(ndarray::IxDyn(&[c.b(), n, hk]));
    for s in 0..c.b() {
        let (g, t, len) = (c.group[s], c.target[s], c.lengths[c.group[s]]);
        // The sample's own rows: the group's, with row t replaced.
        let rows = |base: usize| -> Vec<Vec<T>> {
            (0..n)
                .map(|i| {
                    (0..hk)
                        .map(|col| {
                            if i == t {
                                x[base + 3][[s, col]]
                            } else {
                                x[base][[g, i, col]]
                            }
                        })
                        .collect()
                })
                .collect()
        };
        let (qs, ks, vs) = (rows(0), rows(1), rows(2));
        let (mut dq, mut dk, mut dv) = (
            vec![vec![T::ZERO; hk]; n],
            vec![vec![T::ZERO; hk]; n],
            vec![vec![T::ZERO; hk]; n],
        );
        for h in 0..c.heads {
            let cols = h * kd..(h + 1) * kd;
            for i in 0..n {
                let sco: Vec<T> = (0..len)
                    .map(|j| {
                        // One rounding per term, as a GEMM kernel forms scores.
                        let dot = cols
                            .clone()
                            .fold(T::ZERO, |acc, a| qs[i][a].mul_add(ks[j][a], acc));
                        sc * dot
                    })
                    .collect();
                let m = sco.iter().fold(T::NEG_INFINITY, |a, &b| a.max(b));
                let ex: Vec<T> = sco.iter().map(|&x| (x - m).exp()).collect();
                let z: T = ex.iter().copied().sum();
                let p: Vec<T> = ex.iter().map(|&e| e / z).collect();
                for a in cols.clone() {
                    o[[s, i, a]] = (0..len).map(|j| p[j] * vs[j][a]).sum();
                }
                // Backward of the row: dP, D = Σ p dP, dS = p (dP − D).
                let wi: Vec<T> = cols.clone().map(|a| w[[s, i, a]]).collect();
                let dp: Vec<T> = (0..len)
                    .map(|j| cols.clone().zip(&wi).map(|(a, &wa)| wa * vs[j][a]).sum())
                    .collect();
                let d: T = (0..len).map(|j| p[j] * dp[j]).sum();
                for j in 0..len {
                    let ds = p[j] * (dp[j] - d);
                    for (a, &wa) in cols.clone().zip(&wi) {
                        dv[j][a] += p[j] * wa;
                        dq[i][a] += sc * ds * ks[j][a];
                        dk[j][a] += sc * ds * qs[i][a];
                    }
                }
            }
        }
        // Scatter: row t to the sample's replaced rows, the others to the group's.
        for (which, d) in [dq, dk, dv].into_iter().enumerate() {
            for (i, row) in d.into_iter().enumerate() {
                for (col, val) in row.into_iter().enumerate() {
                    if i == t {
                        out[which + 3][[s, col]] += val;
                    } else {
                        out[which][[g, i, col]] += val;
                    }
                }
            }
        }
    }
    let mut all = vec![o];
    all.extend(out);
    all.iter().map(|a| a.mapv(|x| x.to_f64())).collect()
}

/// The op on a tape in `T`: the output and the gradients of `Σ w∘o`, in f64.
pub(super) fn run<T: Real>(c: &Case, x: &[ArrayD<f64>], w: &ArrayD<f64>) -> Vec<ArrayD<f64>> {
    let mut t = Tape::<T>::new();
    let v: Vec<Var> = NAMES
        .iter()
        .zip(x)
        .map(|(name, a)| t.param(name, a.mapv(T::from_f64)).unwrap())
        .collect();
    let y = t.shared_context_attention(c.args(&v)).unwrap();
    let wv = t.constant(w.mapv(T::from_f64));
    let l = t.mul(y, wv).unwrap();
    let l = t.sum_all(l).unwrap();
    let g = t.backward(l).unwrap();
    let mut out = vec![t.value(y).mapv(|x| x.to_f64())];
    out.extend(v.iter().map(|&x| g.wrt(x).unwrap().mapv(|x| x.to_f64())));
    out
}

/// Every array of `got` within `rel` (output) or `rel_grad` (gradients) of `want`, relative to
/// the largest magnitude of each wanted array; all finite.
#[track_caller]
fn assert_close(got: &[ArrayD<f64>], want: &[ArrayD<f64>], rel: f64, rel_grad: f64, what: &str) {
    for (k, (a, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.shape(), w.shape(), "{what} #{k}");
        let scale = w.iter().fold(f64::MIN_POSITIVE, |m, x| m.max(x.abs()));
        let tol = if k == 0 { rel } else { rel_grad } * scale;
        for (idx, (x, y)) in a.iter().zip(w.iter()).enumerate() {
            assert!(
                x.is_finite(),
                "{what} #{k} (0 = output, then q, k, v, q_t, k_t, v_t) [{idx}]: {x}"
            );
            assert!(
                (x - y).abs() <= tol,
                "{what} #{k} (0 = output, then q, k, v, q_t, k_t, v_t) [{idx}]: {x} vs {y} (scale {scale})"
            );
        }
    }
}

fn cases() -> Vec<Case> {
    let c = |g, n, heads, kd, lengths: Vec<usize>, group: Vec<usize>, target: Vec<usize>| Case {
        g,
        n,
        heads,
        kd,
        lengths,
        group,
        target,
    };
    // The temperature shape: a full group of 44 (every target once) and a shorter one.
    let mut group = vec![1, 1, 0];
    let mut target = vec![0, 29, 43];
    for t in 0..43 {
        group.push(0);
        target.push(t);
        if t % 14 == 3 {
            group.push(1);
            target.push(7);
        }
    }
    vec![
        // Groups of lengths 6, 4 and 1; targets at 0 and len − 1; two samples sharing a
        // target; rows at and above len; a group whose single sample sees one key.
        c(
            3,
            6,
            2,
            3,
            vec![6, 4, 1],
            vec![0, 1, 0, 2, 0, 1, 0],
            vec![0, 3, 5, 0, 2, 0, 2],
        ),
        // One head of 16, a group with no samples.
        c(3, 5, 1, 16, vec![5, 3, 2], vec![1, 0, 0], vec![2, 4, 1]),
        // Two heads of 3, one group.
        c(1, 4, 2, 3, vec![4], vec![0, 0], vec![3, 1]),
        c(2, 44, 2, 16, vec![44, 30], group, target),
    ]
}

#[test]
fn forward_and_gradients_equal_plain_attention_per_sample() {
    for (i, case) in cases().iter().enumerate() {
        let seed = 10 * i as u64;
        let x = case.inputs(seed);
        let w = rand_array(&[case.b(), case.n, case.hk()], seed + 7, -1.0, 1.0);
        let want = naive(case, &x, &w);
        assert_close(
            &run::<f64>(case, &x, &w),
            &want,
            1e-13,
            1e-10,
            &format!("f64 case {i}"),
        );
        assert_close(
            &run::<f32>(case, &x, &w),
            &want,
            2e-5,
            2e-4,
            &format!("f32 case {i}"),
        );
    }
}

#[test]
fn the_op_passes_the_finite_difference_audit() {
    for (i, case) in cases()[..3].iter().enumerate() {
        let x = case.inputs(40 + i as u64);
        let params: Vec<(&str, ArrayD<f64>)> =
            NAMES.iter().copied().zip(x.iter().cloned()).collect();
        let w = rand_array(&[case.b(), case.n, case.hk()], 3, -1.0, 1.0);
        assert_audit(&params, |t, v| {
            let y = t.shared_context_attention(case.args(v))?;
            let c = t.constant(w.clone());
            let p = t.mul(y, c)?;
            t.sum_all(p)
        });
        let report = audit_fused(&case.op::<f64>(), &x, 5, &AuditOptions::default()).unwrap();
        assert!(report.passed(), "case {i}:\n{report}");
    }
}

/// Case 0 with key 2 of group 0 dominating head 0's scores by at least `gap` (the samples
/// with target 2 then leave out the maximum: direct rows), and two replaced keys whose scores
/// exceed their rows' base maximum by at least `gap` (the `s' > m` branch).
fn dominated(gap: f64) -> (Case, Vec<ArrayD<f64>>) {
    let case = cases()[0].clone();
    let mut x = case.inputs(77);
    let big = 2.0 * (gap + 6.0) / case.scale();
    for g in 0..case.g {
        for i in 0..case.n {
            x[0][[g, i, 0]] = 0.5 + 0.5 * x[0][[g, i, 0]].abs();
        }
    }
    x[1][[0, 2, 0]] = big;
    x[1][[0, 2, 1]] = 0.0;
    x[1][[0, 2, 2]] = 0.0;
    // Sample 2 (group 0, target 5) and sample 1 (group 1, target 3).
    for s in [2, 1] {
        x[4][[s, 0]] = 2.0 * big + 4.0 * (gap + 6.0) / case.scale();
        x[4][[s, 1]] = 0.0;
        x[4][[s, 2]] = 0.0;
    }
    (case, x)
}

#[test]
fn dominating_keys_take_the_direct_path_and_match_plain_attention() {
    for (gap, f32_too) in [(200.0, false), (800.0, false), (100.0, true)] {
        let (case, x) = dominated(gap);
        let w = rand_array(&[case.b(), case.n, case.hk()], 9, -1.0, 1.0);
        let want = naive(&case, &x, &w);
        let what = format!("gap {gap}");
        assert_close(&run::<f64>(&case, &x, &w), &want, 1e-13, 1e-10, &what);
        if f32_too {
            assert_close(
                &run::<f32>(&case, &x, &w),
                &want,
                1e-5,
                1e-4,
                &format!("f32 {what}"),
            );
        }
        // Direct rows: each sample's own query row, head 0 of the samples whose target is the
        // dominating key, and every other row of the group with one visible key.
        let mut op = case.op::<f64>();
        let refs: Vec<&ArrayD<f64>> = x.iter().collect();
        op.forward(&refs).unwrap();
        let (n, heads) = (case.n, case.heads);
        for s in 0..case.b() {
            let (g, t) = (case.group[s], case.target[s]);
            for i in 0..n {
                for h in 0..heads {
                    let want = i == t || (g == 0 && t == 2 && h == 0) || case.lengths[g] == 1;
                    let got = op.0.computed_directly(s, i, h).unwrap();
                    assert_eq!(got, want, "gap {gap}: sample {s}, row {i}, head {h}");
                }
            }
        }
    }
}

#[test]
fn results_are_the_same_bits_for_one_and_two_threads() {
    let case = &cases()[3];
    let x = case.inputs(5);
    let w = rand_array(&[case.b(), case.n, case.hk()], 6, -1.0, 1.0);
    let bits = |threads: usize, f32: bool| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                if f32 {
                    run::<f32>(case, &x, &w)
                } else {
                    run::<f64>(case, &x, &w)
                }
            })
            .iter()
            .flat_map(|a| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            .collect::<Vec<u64>>()
    };
    assert_eq!(bits(1, true), bits(2, true), "f32");
    assert_eq!(bits(1, false), bits(2, false), "f64");
}

#[test]
fn empty_calls_and_a_missing_cotangent_give_empty_or_zero_results() {
    for (g, lengths) in [(2, vec![3, 0]), (0, vec![])] {
        let case = Case {
            g,
            n: 3,
            heads: 2,
            kd: 2,
            lengths,
            group: vec![],
            target: vec![],
        };
        let x = case.inputs(1);
        let w = ArrayD::zeros(ndarray::IxDyn(&[0, 3, 4]));
        let got = run::<f64>(&case, &x, &w);
        assert_eq!(got[0].shape(), &[0, 3, 4]);
        assert!(got[1..].iter().all(|d| d.iter().all(|&x| x == 0.0)));
    }
    let case = &cases()[0];
    let x = case.inputs(2);
    let refs: Vec<&ArrayD<f64>> = x.iter().collect();
    let mut op = case.op::<f64>();
    let o = op.forward(&refs).unwrap();
    let d = op.backward(&refs, &[&o[0]], &[None], &[true; 6]).unwrap();
    for (d, x) in d.iter().zip(&x) {
        let d = d.as_ref().unwrap();
        assert_eq!(d.shape(), x.shape());
        assert!(d.iter().all(|&v| v == 0.0));
    }
}

/// Heads of width 0 (`H·K = 0`): an output of width 0 and empty gradients, through the
/// leave-one-out pairs as well as the direct rows.
#[test]
fn zero_width_heads_give_empty_results() {
    let mut case = cases()[0].clone();
    case.kd = 0;
    let x = case.inputs(4);
    let w = ArrayD::zeros(ndarray::IxDyn(&[case.b(), case.n, 0]));
    for got in [run::<f64>(&case, &x, &w), run::<f32>(&case, &x, &w)] {
        assert_eq!(got[0].shape(), &[case.b(), case.n, 0]);
        for (d, x) in got[1..].iter().zip(&x) {
            assert_eq!(d.shape(), x.shape());
        }
    }
}

#[test]
fn flops_count_the_work_performed() {
    let case = &cases()[3];
    let x = case.inputs(3);
    let refs: Vec<&ArrayD<f64>> = x.iter().collect();
    let mut op = case.op::<f64>();
    op.forward(&refs).unwrap();
    let (fwd, bwd) = (op.flops(&refs, false), op.flops(&refs, true));
    // Plain attention per sample: 2·(2·len·K) per row and head.
    let plain: u64 = case
        .group
        .iter()
        .map(|&g| (case.n * case.heads * 4 * case.lengths[g] * case.kd) as u64)
        .sum();
    assert!(fwd > 0 && bwd > fwd, "{fwd} {bwd}");
    assert!(fwd * 4 < plain, "{fwd} vs plain {plain}");
    assert!(op.saved_bytes() > 0);
}

#[test]
fn settings_and_shapes_that_do_not_fit_are_errors_naming_the_field() {
    let case = Case {
        g: 2,
        n: 5,
        heads: 2,
        kd: 3,
        lengths: vec![5, 4],
        group: vec![0, 1, 1],
        target: vec![4, 3, 0],
    };
    let fail = |x: &[ArrayD<f64>], f: &dyn Fn(&mut SharedContextAttention)| {
        let mut t = Tape::<f64>::new();
        let v: Vec<Var> = NAMES
            .iter()
            .zip(x)
            .map(|(name, a)| t.param(name, a.clone()).unwrap())
            .collect();
        let mut a = case.args(&v);
        f(&mut a);
        t.shared_context_attention(a).unwrap_err().to_string()
    };
    let x = case.inputs(1);
    let e = fail(&x, &|a| a.group = vec![0, 2, 1]);
    assert!(e.starts_with("fused:shared_context_attention:"), "{e}");
    assert!(e.contains("group[1] = 2 is not below G = 2"), "{e}");
    let e = fail(&x, &|a| a.target = vec![4, 3, 4]);
    assert!(
        e.contains("target[2] = 4 is not below lengths[1] = 4"),
        "{e}"
    );
    let e = fail(&x, &|a| a.lengths = vec![5, 6]);
    assert!(e.contains("lengths[1] = 6 exceeds N = 5"), "{e}");
    let e = fail(&x, &|a| a.lengths = vec![5]);
    assert!(e.contains("lengths has 1 entries for G = 2"), "{e}");
    let e = fail(&x, &|a| a.group = vec![0, 1]);
    assert!(e.contains("group has 2 entries for B = 3"), "{e}");
    let e = fail(&x, &|a| a.target = vec![0; 4]);
    assert!(e.contains("target has 4 entries for B = 3"), "{e}");
    let e = fail(&x, &|a| a.heads = 0);
    assert!(e.contains("divisible by heads = 0"), "{e}");
    let e = fail(&x, &|a| a.heads = 4);
    assert!(
        e.contains("H·K = 6") && e.contains("divisible by heads = 4"),
        "{e}"
    );
    let e = fail(&x, &|a| a.scale = f64::NAN);
    assert!(e.contains("scale NaN must be finite"), "{e}");
    let with = |i: usize, shape: &[usize]| {
        let mut y = x.clone();
        y[i] = rand_array(shape, 2, -1.0, 1.0);
        fail(&y, &|_| {})
    };
    let e = with(1, &[2, 6, 6]);
    assert!(e.contains("k must be [2, 5, 6], got [2, 6, 6]"), "{e}");
    let e = with(2, &[2, 5, 4]);
    assert!(e.contains("v must be [2, 5, 6], got [2, 5, 4]"), "{e}");
    let e = with(3, &[3, 6, 1]);
    assert!(e.contains("q_t must be [B, H·K], got [3, 6, 1]"), "{e}");
    let e = with(3, &[3, 7]);
    assert!(e.contains("q_t must be [3, 6], got [3, 7]"), "{e}");
    let e = with(4, &[2, 6]);
    assert!(e.contains("k_t must be [3, 6], got [2, 6]"), "{e}");
    let e = with(5, &[3, 5]);
    assert!(e.contains("v_t must be [3, 6], got [3, 5]"), "{e}");
    let e = with(0, &[2, 5]);
    assert!(e.contains("q must be [G, N, H·K], got [2, 5]"), "{e}");
}

/// One group of 3 rows, one head of width 2, and two samples with these targets.
fn two_samples_of_three_rows(target: [usize; 2]) -> Case {
    Case {
        g: 1,
        n: 3,
        heads: 1,
        kd: 2,
        lengths: vec![3],
        group: vec![0, 0],
        target: target.to_vec(),
    }
}

/// A NaN in a base key or value row that no sample sees (each sample replaces it) reaches
/// nothing, as in plain attention: the output and every gradient stay finite, and that row's
/// gradients are zero. (The backward used to multiply such a key's NaN exponential by zero.)
#[test]
fn a_nan_in_a_base_row_no_sample_sees_reaches_nothing() {
    // Two samples that both target row 1.
    let c = two_samples_of_three_rows([1, 1]);
    let w = rand_array(&[c.b(), c.n, c.hk()], 9, -1.0, 1.0);
    for which in [1, 2] {
        let mut x = c.inputs(5);
        x[which][[0, 1, 0]] = f64::NAN;
        let got = run::<f64>(&c, &x, &w);
        let mut clean = x.clone();
        clean[which][[0, 1, 0]] = 0.0;
        let want = naive(&c, &clean, &w);
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            for (p, q) in a.iter().zip(b.iter()) {
                assert!(p.is_finite(), "input {which}: #{k} has {p}");
                assert!((p - q).abs() <= 1e-12 * (1.0 + q.abs()), "#{k}: {p} vs {q}");
            }
        }
        assert_eq!(got[2][[0, 1, 0]], 0.0);
        assert_eq!(got[3][[0, 1, 1]], 0.0);
    }
}

/// A replaced key whose score is +∞ makes its rows NaN, as plain attention's `exp(∞ − ∞)`
/// does; the rows that do not see it stay finite.
#[test]
fn an_infinite_replaced_key_score_gives_nan_rows_as_plain_attention() {
    let c = two_samples_of_three_rows([0, 2]);
    let mut x = c.inputs(3);
    // Sample 0's replaced key: +∞ in one component, so every query with a positive component
    // there scores +∞ (the base queries are drawn in (−1.5, 1.5); force them positive).
    x[4][[0, 0]] = f64::INFINITY;
    x[0].mapv_inplace(|q| q.abs() + 0.1);
    x[3].mapv_inplace(|q| q.abs() + 0.1);
    let w = rand_array(&[c.b(), c.n, c.hk()], 4, -1.0, 1.0);
    let got = run::<f64>(&c, &x, &w);
    let o = &got[0];
    for i in 0..3 {
        assert!(o[[0, i, 0]].is_nan(), "sample 0 row {i}: {}", o[[0, i, 0]]);
        assert!(
            o[[1, i, 0]].is_finite(),
            "sample 1 row {i}: {}",
            o[[1, i, 0]]
        );
    }
}
