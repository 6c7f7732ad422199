//! Op-level audits: `audit_fused` on one op, `fused_jacobian`, and the non-finite-start
//! warning. A planted bug (one element of one input's gradient off by 0.25) must be found by
//! op, input and element. (`Tape::audit_fused_nodes` on recorded tapes, which uses
//! `efa-nn`'s `linear` beside the planted op, is tested in `efa-nn`'s `tests/all/audit_fused.rs`.)

use efa_check::{Compared, FdOptions, Location, Mode, Tolerance};
use efa_tape::{audit_fused, fused_jacobian, AuditOptions};

use efa_testkit::tape::{planted_a as a0, planted_b as b0, Planted};

#[test]
fn planted_bug_is_found_by_op_input_and_element() {
    let opts = AuditOptions::default();
    let good = audit_fused(&Planted { planted: false }, &[a0(), b0()], 7, &opts).unwrap();
    assert!(good.passed(), "{good}");
    assert_eq!(good.params.len(), 2);
    assert_eq!(good.summary("planted input 0").unwrap().checked, 8);
    assert_eq!(good.summary("planted input 1").unwrap().checked, 4);
    let bad = audit_fused(&Planted { planted: true }, &[a0(), b0()], 7, &opts).unwrap();
    assert!(!bad.passed());
    assert_eq!(bad.failures.len(), 1, "{bad}");
    let f = &bad.failures[0];
    assert_eq!(f.param, "planted input 1");
    assert_eq!(f.location, Location::Element(vec![2]));
    // The only error is the planted offset: analytic − numeric = 0.25 (to FD accuracy).
    assert!((f.analytic - f.numeric - 0.25).abs() < 1e-6, "{f:?}");
    assert!(bad.summary("planted input 0").unwrap().pass);
    let text = bad.to_string();
    assert!(
        text.contains("planted input 1") && text.contains("[2]"),
        "{text}"
    );
    // Seeded random directions also catch it (the offset projects onto every direction).
    let dirs = AuditOptions {
        mode: Mode::Directions { n: 4, seed: 5 },
        ..AuditOptions::default()
    };
    let r = audit_fused(&Planted { planted: true }, &[a0(), b0()], 7, &dirs).unwrap();
    assert!(r.summary("planted input 0").unwrap().pass, "{r}");
    let s1 = r.summary("planted input 1").unwrap();
    assert!(!s1.pass && s1.checked == 4, "{r}");
    assert!(matches!(s1.compared, Compared::Directions { .. }));
}

#[test]
fn full_jacobian_matches_the_hand_jacobian_and_localises_the_bug() {
    let (a, b) = (a0(), b0());
    let blocks = fused_jacobian(
        &Planted { planted: false },
        &[a.clone(), b.clone()],
        &FdOptions::default(),
    )
    .unwrap();
    assert_eq!(blocks.len(), 4);
    // Hand Jacobians: ∂y0[r,j]/∂a[s,k] = δrs·δjk·b[j]; ∂y0[r,j]/∂b[k] = δjk·a[r,j];
    // ∂y1[j]/∂a[s,k] = δjk·2a[s,k]; ∂y1[j]/∂b = 0.
    let (rows, cols) = (2, 4);
    for blk in &blocks {
        let n_in = blk.in_shape.iter().product::<usize>();
        for (e, (&an, &nu)) in blk.analytic.iter().zip(&blk.numeric).enumerate() {
            let (r_out, k_in) = (e / n_in, e % n_in);
            let want = match (blk.output.as_str(), blk.input.as_str()) {
                ("planted output 0", "planted input 0") if r_out == k_in => b[k_in % cols],
                ("planted output 0", "planted input 1") if r_out % cols == k_in => {
                    a[[r_out / cols, k_in]]
                }
                ("planted output 1", "planted input 0") if k_in % cols == r_out => {
                    2.0 * a[[k_in / cols, r_out]]
                }
                _ => 0.0,
            };
            assert_eq!(an, want, "{} / {} entry {e}", blk.output, blk.input);
            assert!(
                (nu - want).abs() < 1e-8,
                "{} / {} entry {e}",
                blk.output,
                blk.input
            );
        }
        assert!(blk.compare(&Tolerance::default()).passed());
    }
    assert_eq!(blocks[0].out_shape, vec![rows, cols]);
    // The planted offset shows in column b[2] of both outputs' b-blocks, nowhere else.
    let bad = fused_jacobian(&Planted { planted: true }, &[a, b], &FdOptions::default()).unwrap();
    for blk in &bad {
        let r = blk.compare(&Tolerance::default());
        if blk.input == "planted input 1" {
            let n_out = blk.out_shape.iter().product::<usize>();
            assert_eq!(r.failures.len(), n_out, "{r}");
            assert!(r.failures.iter().all(|f| match &f.location {
                Location::Element(ix) => ix.last() == Some(&2),
                _ => false,
            }));
        } else {
            assert!(r.passed(), "{r}");
        }
    }
}

#[test]
fn nonfinite_inputs_warn_and_the_report_does_not_pass() {
    let mut a = a0();
    a[[1, 2]] = f64::NAN;
    let r = audit_fused(
        &Planted { planted: false },
        &[a, b0()],
        7,
        &AuditOptions::default(),
    )
    .unwrap();
    let w = r.nonfinite_base.as_deref().expect("warning");
    assert!(w.starts_with("planted input 0 is NaN at [1, 2]"), "{w}");
    assert!(w.contains("planted output 0 is NaN at [1, 2]"), "{w}");
    assert!(!r.passed());
    assert!(r.to_string().starts_with("WARNING"), "{r}");
}
