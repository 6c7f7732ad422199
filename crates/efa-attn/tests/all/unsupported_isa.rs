//! The public safe kernels of `efa_attn::micro` given an instruction set the CPU lacks: they
//! run the scalar path (the same bits as `Isa::Scalar`), never an unsupported instruction.
//! (Before they checked it, such a call was undefined behaviour; on a CPU without AVX-512 it
//! stopped the test binary with an illegal instruction.)

use efa_attn::micro::{
    ds_row, gemm_checked, gemm_checked_bias_into, gemm_checked_from, gemm_checked_into, padded,
    scale_rows,
};
use efa_num::simd::Isa;
use std::mem::MaybeUninit;

fn values(n: usize, k: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + k) * 0.618_034).fract() - 0.5)
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// A buffer for the `_into` kernels: every element initialised (NaN), so that reading back
/// the padding columns they need not write is defined.
fn unwritten(n: usize) -> Vec<MaybeUninit<f32>> {
    vec![MaybeUninit::new(f32::NAN); n]
}

/// The first `n` columns of each row of width `ld` (the kernels' padding columns are not
/// part of the result).
fn cols(x: Vec<MaybeUninit<f32>>, ld: usize, n: usize) -> Vec<f32> {
    // SAFETY: every element was initialised by `unwritten` or written by the kernel.
    let x: Vec<f32> = x.into_iter().map(|v| unsafe { v.assume_init() }).collect();
    x.chunks(ld).flat_map(|row| row[..n].to_vec()).collect()
}

/// Every kernel with `isa` and with the scalar path, as bits.
fn run(isa: Isa) -> Vec<Vec<u32>> {
    let (m, n, k) = (5, 7, 6);
    let np = padded(n);
    let (a, b, bias) = (values(m * k, 0.1), values(k * np, 0.7), values(np, 1.3));
    let mut out = Vec::new();
    let mut c = values(m * np, 2.1);
    gemm_checked(
        isa,
        (m, n, k),
        (&a, (k, 1)),
        (&b, np),
        (&mut c, np),
        true,
        0.5,
    );
    out.push(bits(
        &c.chunks(np)
            .flat_map(|r| r[..n].to_vec())
            .collect::<Vec<_>>(),
    ));
    let mut c = unwritten(m * np);
    gemm_checked_into(isa, (m, n, k), (&a, (k, 1)), (&b, np), (&mut c, np), 2.0);
    out.push(bits(&cols(c, np, n)));
    let mut c = unwritten(m * np);
    gemm_checked_bias_into(isa, (m, n, k), (&a, (k, 1)), (&b, np), &bias, (&mut c, np));
    out.push(bits(&cols(c, np, n)));
    let start = values(m * np, 3.3);
    let mut c = vec![0.0; m * np];
    gemm_checked_from(
        isa,
        (m, n, k),
        (&a, (k, 1)),
        (&b, np),
        ((&start, np), &bias),
        (&mut c, np),
    );
    out.push(bits(&c));
    let (src, mut dst) = (values(m * n, 6.6), unwritten(m * n));
    scale_rows(isa, m, n, &src, n, 0.25, &mut dst);
    out.push(bits(&cols(dst, n, n)));
    let (p, mut dp) = (values(37, 4.4), values(37, 5.5));
    ds_row(isa, &p, &mut dp, 0.125);
    out.push(bits(&dp));
    out
}

#[test]
fn an_unsupported_instruction_set_runs_the_scalar_path() {
    let scalar = run(Isa::Scalar);
    let mut tried = 0;
    for isa in [Isa::Avx512, Isa::Avx2] {
        if isa.is_supported() {
            continue;
        }
        tried += 1;
        assert_eq!(run(isa), scalar, "{isa:?} on a CPU without it");
    }
    if tried == 0 {
        eprintln!("every instruction set is supported here: nothing unsupported to pass");
    }
}
