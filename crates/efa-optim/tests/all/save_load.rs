//! State save/load: N steps == N/2 steps, save, load, N/2 steps, bit for bit.

use efa_optim::*;

fn cfg() -> AdamConfig {
    AdamConfig {
        schedule: Schedule::WarmupCosine {
            lr: 0.05,
            warmup: 3,
            total: 12,
            min_lr: 0.001,
        },
        weight_decay: WeightDecay::Decoupled(0.01),
        clip_norm: Some(2.0),
        ..Default::default()
    }
}

/// Gradient of Σ_i c_i·(w_i − i)² / 2 + 0.1·sin(w_i), different per element.
fn grads<T: efa_num::Real>(w: &[T]) -> Vec<T> {
    w.iter()
        .enumerate()
        .map(|(i, &x)| {
            let x = x.to_f64();
            T::from_f64((1.0 + i as f64) * (x - i as f64) + 0.1 * x.cos())
        })
        .collect()
}

fn train<T: efa_num::Real>(adam: &mut Adam<T>, a: &mut [T], b: &mut [T], steps: usize) {
    for _ in 0..steps {
        let (ga, gb) = (grads(a), grads(b));
        adam.step(&mut [
            Param::with_shape("a", &[2, 3], a, Some(&ga)),
            Param::new("b", b, Some(&gb)),
        ])
        .unwrap();
    }
}

fn roundtrip<T: efa_num::Real>() {
    let a0: Vec<T> = (0..6).map(|i| T::from_f64(0.3 * i as f64 - 1.0)).collect();
    let b0: Vec<T> = vec![T::from_f64(2.5), T::from_f64(-0.7)];
    let (mut a1, mut b1) = (a0.clone(), b0.clone());
    let mut full = Adam::<T>::new(cfg()).unwrap();
    train(&mut full, &mut a1, &mut b1, 10);

    let (mut a2, mut b2) = (a0, b0);
    let mut half = Adam::<T>::new(cfg()).unwrap();
    train(&mut half, &mut a2, &mut b2, 5);
    let bytes = half.save();
    drop(half);
    let mut resumed = Adam::<T>::load(&bytes).unwrap();
    assert_eq!(resumed.steps(), 5);
    assert_eq!(resumed.save(), bytes);
    train(&mut resumed, &mut a2, &mut b2, 5);

    let bits = |v: &[T]| v.iter().map(|x| x.to_bits_u64()).collect::<Vec<_>>();
    assert_eq!(bits(&a1), bits(&a2));
    assert_eq!(bits(&b1), bits(&b2));
    assert_eq!(full.save(), resumed.save());
}

#[test]
fn resume_is_bit_exact_f32_and_f64() {
    roundtrip::<f32>();
    roundtrip::<f64>();
}

#[test]
fn corrupt_state_is_an_error_naming_offset_and_field() {
    let mut adam = Adam::<f64>::new(cfg()).unwrap();
    let (mut a, mut b) = (vec![0.0; 6], vec![0.0; 2]);
    train(&mut adam, &mut a, &mut b, 2);
    let bytes = adam.save();
    let e = Adam::<f64>::load(&bytes[..bytes.len() - 3]).unwrap_err();
    assert!(
        matches!(e, OptimError::Decode { ref field, .. } if field == "b.len"),
        "{e}"
    );
    let e = Adam::<f32>::load(&bytes).unwrap_err();
    assert!(e.to_string().contains("dtype"), "{e}");
    let mut bad = bytes.clone();
    bad[0] = b'X';
    assert!(Adam::<f64>::load(&bad)
        .unwrap_err()
        .to_string()
        .contains("magic"));
    let mut extra = bytes.clone();
    extra.push(0);
    assert!(Adam::<f64>::load(&extra)
        .unwrap_err()
        .to_string()
        .contains("trailing"));
    let mut badtag = bytes;
    badtag[8 + 1 + 8 + 24] = 7; // placement tag
    let e = Adam::<f64>::load(&badtag).unwrap_err();
    assert!(
        matches!(e, OptimError::Decode { offset: 42, ref field, .. } if field == "placement"),
        "{e}"
    );
}
