//! The block op against the same block composed from the tape's own ops (`linear`,
//! `attention_heads`, `add`, `layer_norm`, `relu`, `gather_positions`): output and every
//! input gradient, in every mode (projected or given q, k, v; all rows or one query row per
//! sample; key padding), over several chunks; finite-difference audits (tape and op level);
//! the same bits for any thread count; errors naming the tensor.

use super::*;
use crate::TapeNn;
use efa_block::block::BlockSource as Source;

fn tail_at(src: Source) -> usize {
    src.tail_input()
}
use efa_attn::{Attention, Mask};
use efa_tape::{audit_fused, AuditOptions};
use efa_testkit::{rand_array, tape::assert_audit};

/// Modes: projection, given `q, k, v` or given attention output, every row or one query row
/// per sample.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mode {
    pub(super) src: Source,
    pub(super) targets: bool,
}

const fn m(src: Source, targets: bool) -> Mode {
    Mode { src, targets }
}

pub(super) const MODES: [Mode; 6] = [
    m(Source::Project, false),
    m(Source::Project, true),
    m(Source::Given, false),
    m(Source::Given, true),
    m(Source::Attended, false),
    m(Source::Attended, true),
];

/// One problem: sizes, key lengths and query rows.
#[derive(Clone, Debug)]
pub(super) struct Case {
    pub(super) b: usize,
    pub(super) n: usize,
    pub(super) d: usize,
    pub(super) heads: usize,
    pub(super) kd: usize,
    pub(super) f: usize,
    pub(super) lengths: Option<Vec<usize>>,
}

impl Case {
    /// The op for `mode` (ε 10⁻³, Keras's scale), run directly; `keep_cols_p` keeps the
    /// column path's probabilities instead of forming them again.
    fn op<T: Real>(&self, mode: Mode, keep_cols_p: bool) -> BlockOp<T> {
        BlockOp(PostNormKernel::new(BlockSettings {
            heads: self.heads,
            scale: 1.0 / (self.kd as f64).sqrt(),
            eps: 1e-3,
            source: mode.src,
            key_lengths: self.lengths.clone(),
            queries: mode.targets.then(|| self.queries()),
            keep_cols_p,
        }))
    }

    fn queries(&self) -> Vec<usize> {
        (0..self.b).map(|s| (3 * s + 1) % self.n).collect()
    }

    /// Inputs in the op's order for `mode`, seeded; gains near 1.
    pub(super) fn inputs(&self, mode: Mode, seed: u64) -> Vec<(String, ArrayD<f64>)> {
        let (b, n, d, hk, f) = (self.b, self.n, self.d, self.heads * self.kd, self.f);
        let nq = if mode.targets { 1 } else { n };
        let mut k = seed;
        let mut r = |name: &str, shape: &[usize], lo: f64, hi: f64| {
            k += 1;
            (name.to_string(), rand_array(shape, k, lo, hi))
        };
        let mut v = vec![r("x", &[b, n, d], -1.5, 1.5)];
        match mode.src {
            Source::Given => {
                v.push(r("q", &[b, nq, hk], -1.5, 1.5));
                v.push(r("k", &[b, n, hk], -1.5, 1.5));
                v.push(r("v", &[b, n, hk], -1.0, 1.0));
            }
            Source::Attended => v.push(r("a", &[b, nq, hk], -1.0, 1.0)),
            Source::Project => {
                for name in ["q", "k", "v"] {
                    v.push(r(&format!("w{name}"), &[d, hk], -0.8, 0.8));
                    v.push(r(&format!("b{name}"), &[hk], -0.3, 0.3));
                }
            }
        }
        v.push(r("wo", &[hk, d], -0.6, 0.6));
        v.push(r("bo", &[d], -0.3, 0.3));
        v.push(r("g1", &[d], 0.7, 1.3));
        v.push(r("be1", &[d], -0.3, 0.3));
        v.push(r("w1", &[d, f], -0.6, 0.6));
        v.push(r("b1", &[f], -0.3, 0.3));
        v.push(r("w2", &[f, d], -0.6, 0.6));
        v.push(r("b2", &[d], -0.3, 0.3));
        v.push(r("g2", &[d], 0.7, 1.3));
        v.push(r("be2", &[d], -0.3, 0.3));
        v
    }

    fn args(&self, mode: Mode, v: &[Var]) -> PostNormBlock {
        let t = tail_at(mode.src);
        PostNormBlock {
            x: v[0],
            qkv: match mode.src {
                Source::Given => BlockQkv::Given {
                    q: v[1],
                    k: v[2],
                    v: v[3],
                },
                Source::Attended => BlockQkv::Attended { a: v[1] },
                Source::Project => BlockQkv::Project {
                    wq: v[1],
                    bq: v[2],
                    wk: v[3],
                    bk: v[4],
                    wv: v[5],
                    bv: v[6],
                },
            },
            tail: BlockTail {
                wo: v[t],
                bo: v[t + 1],
                ln1_gain: v[t + 2],
                ln1_bias: v[t + 3],
                w1: v[t + 4],
                b1: v[t + 5],
                w2: v[t + 6],
                b2: v[t + 7],
                ln2_gain: v[t + 8],
                ln2_bias: v[t + 9],
            },
            heads: self.heads,
            scale: 1.0 / (self.kd as f64).sqrt(),
            eps: 1e-3,
            key_lengths: self.lengths.clone(),
            queries: mode.targets.then(|| self.queries()),
        }
    }

    /// The same block from the tape's own ops.
    fn composed<T: Real>(&self, mode: Mode, t: &mut Tape<T>, v: &[Var]) -> Result<Var, TapeError> {
        let (b, d) = (self.b, self.d);
        let tl = tail_at(mode.src);
        let x = v[0];
        let xq = if mode.targets {
            let rows = t.gather_positions(x, &self.queries())?;
            t.reshape(rows, &[b, 1, d])?
        } else {
            x
        };
        let (q, k, vv) = match mode.src {
            Source::Given => (v[1], v[2], v[3]),
            Source::Attended => (v[1], v[1], v[1]),
            Source::Project => (
                t.linear(xq, v[1], Some(v[2]))?,
                t.linear(x, v[3], Some(v[4]))?,
                t.linear(x, v[5], Some(v[6]))?,
            ),
        };
        let o = if mode.src == Source::Attended {
            v[1]
        } else {
            let lengths = self.lengths.clone().unwrap_or(vec![self.n; b]);
            let args = Attention::new(q, k, vv)
                .mask(Mask::none().key_lengths(lengths))
                .scale(1.0 / (self.kd as f64).sqrt());
            t.attention_heads(args, self.heads)?.o
        };
        let a = t.linear(o, v[tl], Some(v[tl + 1]))?;
        let r = t.add(xq, a)?;
        let eps = T::from_f64(1e-3);
        let z = t.layer_norm(r, v[tl + 2], v[tl + 3], eps)?;
        let h = t.linear(z, v[tl + 4], Some(v[tl + 5]))?;
        let h = t.relu(h)?;
        let u = t.linear(h, v[tl + 6], Some(v[tl + 7]))?;
        let u = t.add(z, u)?;
        t.layer_norm(u, v[tl + 8], v[tl + 9], eps)
    }
}

/// Output and every input's gradient of `Σ c∘y` for seeded `c`.
pub(super) fn run<T: Real>(case: &Case, mode: Mode, fused: bool, seed: u64) -> Vec<ArrayD<f64>> {
    run_on::<T>(case, mode, fused, case.inputs(mode, seed), seed)
}

/// [`run`] on given inputs.
pub(super) fn run_on<T: Real>(
    case: &Case,
    mode: Mode,
    fused: bool,
    inputs: Vec<(String, ArrayD<f64>)>,
    seed: u64,
) -> Vec<ArrayD<f64>> {
    let mut t = Tape::<T>::new();
    let v: Vec<Var> = inputs
        .iter()
        .map(|(name, x)| t.param(name, x.mapv(T::from_f64)).unwrap())
        .collect();
    let y = if fused {
        t.post_norm_block(case.args(mode, &v)).unwrap()
    } else {
        case.composed(mode, &mut t, &v).unwrap()
    };
    let c = rand_array(t.value(y).shape(), seed + 100, -1.0, 1.0);
    let c = t.constant(c.mapv(T::from_f64));
    let l = t.mul(y, c).unwrap();
    let l = t.sum_all(l).unwrap();
    let g = t.backward(l).unwrap();
    let mut out = vec![t.value(y).mapv(|x| x.to_f64())];
    out.extend(v.iter().map(|&x| g.wrt(x).unwrap().mapv(|x| x.to_f64())));
    out
}

/// The output of the block (fused or composed) with `inputs[which]` element 0 set to NaN.
fn output_with_nan(case: &Case, mode: Mode, fused: bool, which: usize) -> ArrayD<f64> {
    let mut inputs = case.inputs(mode, 7);
    inputs[which].1.as_slice_mut().unwrap()[0] = f64::NAN;
    let mut t = Tape::<f64>::new();
    let v: Vec<Var> = inputs
        .iter()
        .map(|(name, x)| t.param(name, x.clone()).unwrap())
        .collect();
    let y = if fused {
        t.post_norm_block(case.args(mode, &v)).unwrap()
    } else {
        case.composed(mode, &mut t, &v).unwrap()
    };
    t.value(y).clone()
}

/// A NaN in any input reaches the fused block's output exactly where it reaches the
/// composition of tape ops (each of which propagates NaN, tested in tests/all/nan.rs); it is
/// never absorbed (by a ReLU, a max or a masked-out score) where the definition keeps it.
#[test]
fn a_nan_in_any_input_reaches_the_output_as_in_the_composition() {
    let case = &cases()[1];
    for mode in MODES {
        for which in 0..case.inputs(mode, 7).len() {
            let fused = output_with_nan(case, mode, true, which);
            let composed = output_with_nan(case, mode, false, which);
            let pattern = |a: &ArrayD<f64>| a.iter().map(|x| x.is_nan()).collect::<Vec<_>>();
            assert_eq!(
                pattern(&fused),
                pattern(&composed),
                "{mode:?}: NaN in input #{which}"
            );
        }
    }
}

pub(super) fn cases() -> Vec<Case> {
    let c = |b, n, d, heads, kd, f, lengths: Option<Vec<usize>>| Case {
        b,
        n,
        d,
        heads,
        kd,
        f,
        lengths,
    };
    vec![
        c(3, 5, 6, 2, 3, 7, None),
        c(4, 6, 5, 1, 4, 3, Some(vec![6, 2, 0, 5])),
        // Several chunks (per chunk: ⌊256/100⌋ = 2 samples; 5 samples → 2, 2, 1).
        c(5, 100, 4, 2, 2, 5, Some(vec![100, 7, 100, 1, 64])),
        // The temperature widths at 44 positions (one chunk of 5 samples, then 1).
        c(6, 44, 32, 2, 16, 64, None),
        // Whole padded head widths (16) with key padding, including a sample with no keys:
        // the attention's in-place operand and output path and its zeroed rows.
        c(4, 20, 32, 2, 16, 24, Some(vec![20, 3, 0, 17])),
    ]
}

#[test]
fn the_block_equals_its_composition_from_tape_ops_in_every_mode() {
    for (i, case) in cases().iter().enumerate() {
        for mode in MODES {
            let seed = 10 * i as u64;
            let want = run::<f64>(case, mode, false, seed);
            let got = run::<f64>(case, mode, true, seed);
            let got32 = run::<f32>(case, mode, true, seed);
            for (k, ((a, w), a32)) in got.iter().zip(&want).zip(&got32).enumerate() {
                assert_eq!(a.shape(), w.shape(), "{case:?} {mode:?} #{k}");
                let scale = w.iter().fold(1.0f64, |m, x| m.max(x.abs()));
                for ((x, y), z) in a.iter().zip(w.iter()).zip(a32.iter()) {
                    assert!(
                        (x - y).abs() <= 1e-12 * scale,
                        "{case:?} {mode:?} #{k} (0 = output, then inputs): {x} vs {y}"
                    );
                    assert!(
                        (z - y).abs() <= 2e-4 * scale,
                        "f32 {case:?} {mode:?} #{k}: {z} vs {y}"
                    );
                }
            }
        }
    }
}

/// Both attention paths: 4 positions (the row-major path, `P` kept) and 10 (from 9 queries on,
/// the column path, whose backward forms `P` again from the kept maxima and scales).
#[test]
fn the_block_passes_the_finite_difference_audit_in_every_mode() {
    for n in [4, 10] {
        let case = Case {
            b: 2,
            n,
            d: 5,
            heads: 2,
            kd: 2,
            f: 3,
            lengths: Some(vec![n, n - 1]),
        };
        audit_case(&case);
    }
}

fn audit_case(case: &Case) {
    let n = case.n;
    for (i, mode) in MODES.into_iter().enumerate() {
        let inputs = case.inputs(mode, 50 + i as u64);
        let params: Vec<(&str, ArrayD<f64>)> = inputs
            .iter()
            .map(|(n, x)| (n.as_str(), x.clone()))
            .collect();
        let c = rand_array(&[2, if mode.targets { 1 } else { n }, 5], 7, -1.0, 1.0);
        assert_audit(&params, |t, v| {
            let y = t.post_norm_block(case.args(mode, v))?;
            let c = t.constant(c.clone());
            let p = t.mul(y, c)?;
            t.sum_all(p)
        });
        // The op on its own (seeded cotangent), as `audit_fused` checks every fused op.
        let op = case.op::<f64>(mode, false);
        let values: Vec<ArrayD<f64>> = inputs.into_iter().map(|(_, x)| x).collect();
        let report = audit_fused(&op, &values, 3, &AuditOptions::default()).unwrap();
        assert!(report.passed(), "{mode:?} N = {n}:\n{report}");
    }
}

/// The op's output and input gradients for a seeded cotangent, run directly, with the column
/// path's probabilities formed again in the backward or kept (`keep_cols_p`).
fn op_run<T: Real>(case: &Case, mode: Mode, keep_cols_p: bool) -> Vec<u64> {
    let values: Vec<ArrayD<T>> = case
        .inputs(mode, 11)
        .into_iter()
        .map(|(_, x)| x.mapv(T::from_f64))
        .collect();
    let inputs: Vec<&ArrayD<T>> = values.iter().collect();
    let mut op = case.op::<T>(mode, keep_cols_p);
    let y = op.forward(&inputs).unwrap().remove(0);
    let dy = rand_array(y.shape(), 12, -1.0, 1.0).mapv(T::from_f64);
    let needs = vec![true; inputs.len()];
    let grads = op.backward(&inputs, &[&y], &[Some(&dy)], &needs).unwrap();
    std::iter::once(y)
        .chain(grads.into_iter().map(|g| g.unwrap()))
        .flat_map(|a| a.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>())
        .collect()
}

/// Forming the column path's probabilities again in the backward (from the kept maxima and
/// scales) gives the bits of keeping them: output and every input gradient, f32 and f64, every
/// mode (the one-query modes keep theirs either way), over several chunks, key padding and a
/// sample without keys.
#[test]
fn probabilities_formed_again_give_the_bits_of_kept_ones() {
    for case in &cases()[2..] {
        for mode in MODES {
            assert_eq!(
                op_run::<f32>(case, mode, false),
                op_run::<f32>(case, mode, true),
                "f32 {mode:?} {case:?}"
            );
            assert_eq!(
                op_run::<f64>(case, mode, false),
                op_run::<f64>(case, mode, true),
                "f64 {mode:?} {case:?}"
            );
        }
    }
}

#[test]
fn results_are_the_same_bits_for_one_and_two_threads() {
    // Several chunks; the temperature widths also split the reduction of the partial
    // parameter gradients (W₁, W₂: more than one `SUM_PIECE` each).
    for (case, mode) in [&cases()[2], &cases()[3]]
        .into_iter()
        .flat_map(|c| MODES.iter().map(move |m| (c, *m)))
    {
        let bits = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| run::<f32>(case, mode, true, 4))
                .iter()
                .flat_map(|a| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                .collect::<Vec<u64>>()
        };
        assert_eq!(bits(1), bits(2), "{mode:?}");
    }
}

#[test]
fn shapes_that_do_not_fit_are_errors_naming_the_tensor() {
    let case = &cases()[0];
    let mode = MODES[0];
    let mut inputs = case.inputs(mode, 1);
    let fail = |inputs: &[(String, ArrayD<f64>)], f: &dyn Fn(&mut PostNormBlock)| {
        let mut t = Tape::<f64>::new();
        let v: Vec<Var> = inputs
            .iter()
            .map(|(n, x)| t.param(n, x.clone()).unwrap())
            .collect();
        let mut args = case.args(mode, &v);
        f(&mut args);
        t.post_norm_block(args).unwrap_err().to_string()
    };
    let e = fail(&inputs, &|a| a.key_lengths = Some(vec![5, 6, 1]));
    assert!(e.contains("key_lengths[1] = 6 exceeds N = 5"), "{e}");
    let e = fail(&inputs, &|a| a.queries = Some(vec![0, 5, 1]));
    assert!(e.contains("queries[1] = 5 is not below N = 5"), "{e}");
    let e = fail(&inputs, &|a| a.heads = 4);
    assert!(e.contains("divisible by heads = 4"), "{e}");
    inputs[11].1 = rand_array(&[6, 3], 1, -1.0, 1.0);
    let e = fail(&inputs, &|_| {});
    assert!(e.starts_with("fused:post_norm_block:"), "{e}");
    // w1 sets F = 3, so the bias of 7 no longer fits.
    assert!(e.contains("b1 must be [3], got [7]"), "{e}");
    // A given attention output of the wrong width.
    let mode = MODES[4];
    let mut inputs = case.inputs(mode, 1);
    inputs[1].1 = rand_array(&[3, 5, 5], 1, -1.0, 1.0);
    let mut t = Tape::<f64>::new();
    let v: Vec<Var> = inputs
        .iter()
        .map(|(n, x)| t.param(n, x.clone()).unwrap())
        .collect();
    let e = t
        .post_norm_block(case.args(mode, &v))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a must be [3, 5, 6], got [3, 5, 5]"), "{e}");
}
