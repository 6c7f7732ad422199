//! numpy-compatible randomness: MT19937 exactly as numpy's legacy `RandomState`.
//!
//! The paper's notebooks drew every random number from `np.random.seed(42)` /
//! `RandomState(42)` (legacy API) or from scikit-learn / pandas helpers built on it. Reproducing
//! their splits and synthetic data bit for bit needs the same generator, the same integer
//! seeding, the same 53-bit double, the same masked-rejection bounded integers, the same
//! Fisher–Yates loop and the same polar Box–Muller with its cached second value.

/// Number of 32-bit words in the MT19937 state.
pub const MT_N: usize = 624;
const MT_M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// The complete state of a [`NumpyRng`], for checkpoints.
///
/// Equivalent to numpy's `RandomState.get_state()` tuple
/// `('MT19937', key, pos, has_gauss, cached_gaussian)`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NumpyRngState {
    /// The 624 state words (`key`).
    pub key: Vec<u32>,
    /// Position of the next word to temper, 0..=624 (624 means "twist before next draw").
    pub pos: usize,
    /// The cached second Gaussian of the polar method, if any (`has_gauss`, `cached_gaussian`).
    pub cached_gauss: Option<f64>,
}

/// MT19937 with numpy's legacy `RandomState` semantics.
///
/// ```
/// use efa_data::NumpyRng;
/// let mut rng = NumpyRng::seed(42);
/// assert_eq!(&rng.permutation(902)[..3], &[70, 235, 430]);
/// ```
#[derive(Clone, Debug)]
pub struct NumpyRng {
    mt: [u32; MT_N],
    pos: usize,
    gauss: Option<f64>,
}

impl NumpyRng {
    /// `np.random.seed(s)` / `RandomState(s)` for an integer seed: `init_genrand(s)`,
    /// `mt[0] = s`, `mt[i] = 1812433253·(mt[i−1] ⊕ (mt[i−1] ≫ 30)) + i (mod 2³²)`; no cached Gaussian.
    pub fn seed(s: u32) -> Self {
        let mut mt = [0u32; MT_N];
        mt[0] = s;
        for i in 1..MT_N {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        NumpyRng {
            mt,
            pos: MT_N,
            gauss: None,
        }
    }

    fn twist(&mut self) {
        let mt = &mut self.mt;
        for i in 0..MT_N {
            let y = (mt[i] & UPPER_MASK) | (mt[(i + 1) % MT_N] & LOWER_MASK);
            let mag = if y & 1 == 1 { MATRIX_A } else { 0 };
            mt[i] = mt[(i + MT_M) % MT_N] ^ (y >> 1) ^ mag;
        }
        self.pos = 0;
    }

    /// Next tempered 32-bit output (`genrand_int32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.pos >= MT_N {
            self.twist();
        }
        let mut y = self.mt[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// Legacy uniform double on [0, 1): `a = u32 ≫ 5`, `b = u32 ≫ 6`, `(a·2²⁶ + b) / 2⁵³`.
    pub fn random_f64(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }

    /// Uniform integer in `0..=max` by masked rejection (numpy's legacy `random_interval`):
    /// `mask` = `max` with all lower bits set; draw `v = u32 & mask` until `v ≤ max`.
    /// Values above 2³²−1 draw two words per try (high word first), as numpy does.
    pub fn bounded(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mut mask = max;
        mask |= mask >> 1;
        mask |= mask >> 2;
        mask |= mask >> 4;
        mask |= mask >> 8;
        mask |= mask >> 16;
        mask |= mask >> 32;
        if max <= u32::MAX as u64 {
            loop {
                let v = (self.next_u32() as u64) & mask;
                if v <= max {
                    return v;
                }
            }
        } else {
            loop {
                let hi = self.next_u32() as u64;
                let lo = self.next_u32() as u64;
                let v = ((hi << 32) | lo) & mask;
                if v <= max {
                    return v;
                }
            }
        }
    }

    /// Legacy in-place Fisher–Yates shuffle: for `i = n−1` down to 1, `j = bounded(i)`, swap `i`, `j`.
    pub fn shuffle<X>(&mut self, xs: &mut [X]) {
        let n = xs.len();
        for i in (1..n).rev() {
            let j = self.bounded(i as u64) as usize;
            xs.swap(i, j);
        }
    }

    /// Legacy `permutation(n)`: [`NumpyRng::shuffle`] applied to `[0, 1, …, n−1]`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        self.shuffle(&mut p);
        p
    }

    /// Legacy standard Gaussian (polar Box–Muller). If a value is cached, return it and clear
    /// the cache. Otherwise repeat `x1 = 2u−1, x2 = 2u−1, r² = x1² + x2²` until `0 < r² < 1`;
    /// `f = √(−2 ln r² / r²)`; cache `f·x1`; return `f·x2`. The cache survives other calls
    /// (e.g. [`NumpyRng::permutation`]) and is cleared only by re-seeding.
    pub fn standard_normal(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        loop {
            let x1 = 2.0 * self.random_f64() - 1.0;
            let x2 = 2.0 * self.random_f64() - 1.0;
            let r2 = x1 * x1 + x2 * x2;
            if r2 < 1.0 && r2 != 0.0 {
                let f = (-2.0 * r2.ln() / r2).sqrt();
                self.gauss = Some(f * x1);
                return f * x2;
            }
        }
    }

    /// Legacy `normal(loc, scale) = loc + scale·g` with `g` from [`NumpyRng::standard_normal`].
    pub fn normal(&mut self, loc: f64, scale: f64) -> f64 {
        loc + scale * self.standard_normal()
    }

    /// The full generator state (for checkpoints).
    pub fn state(&self) -> NumpyRngState {
        NumpyRngState {
            key: self.mt.to_vec(),
            pos: self.pos,
            cached_gauss: self.gauss,
        }
    }

    /// Restores a state saved by [`NumpyRng::state`]. Fails if `key` does not hold 624 words
    /// or `pos > 624`.
    pub fn from_state(state: &NumpyRngState) -> Result<Self, crate::DataError> {
        if state.key.len() != MT_N {
            return Err(crate::DataError::invalid(format!(
                "NumpyRngState.key has {} words, expected {MT_N}",
                state.key.len()
            )));
        }
        if state.pos > MT_N {
            return Err(crate::DataError::invalid(format!(
                "NumpyRngState.pos = {} exceeds {MT_N}",
                state.pos
            )));
        }
        let mut mt = [0u32; MT_N];
        mt.copy_from_slice(&state.key);
        Ok(NumpyRng {
            mt,
            pos: state.pos,
            gauss: state.cached_gauss,
        })
    }
}

/// scikit-learn's `train_test_split(range(n), test_size, random_state=seed)` with a fractional
/// `test_size` (and `shuffle=True`): `p = RandomState(seed).permutation(n)`,
/// `n_test = ⌈test_size·n⌉`, `n_train = n − n_test`; returns `(train, test)` =
/// `(p[n_test..], p[..n_test])`, both in permuted order.
///
/// Fails when `test_size` is not in (0, 1) or when either side would be empty.
pub fn train_test_split_frac(
    n: usize,
    test_size: f64,
    seed: u32,
) -> Result<(Vec<usize>, Vec<usize>), crate::DataError> {
    if !(test_size > 0.0 && test_size < 1.0) {
        return Err(crate::DataError::invalid(format!(
            "train_test_split: test_size = {test_size} is not in (0, 1)"
        )));
    }
    let n_test = (test_size * n as f64).ceil() as usize;
    if n_test == 0 || n_test >= n {
        return Err(crate::DataError::invalid(format!(
            "train_test_split: n = {n} with test_size = {test_size} leaves an empty side"
        )));
    }
    let p = NumpyRng::seed(seed).permutation(n);
    Ok((p[n_test..].to_vec(), p[..n_test].to_vec()))
}

/// [`train_test_split_frac`] with the paper's `test_size = 0.25`.
pub fn train_test_split(n: usize, seed: u32) -> Result<(Vec<usize>, Vec<usize>), crate::DataError> {
    train_test_split_frac(n, 0.25, seed)
}

/// The row pandas' `groupby(...).sample(n=1, random_state=seed)` keeps from a group of `n`
/// rows (in original order): the first element of `RandomState(seed).permutation(n)`.
///
/// For `seed = 42` and `n = 2..=8` this is `1 0 1 1 0 0 1` (docs/paper.md §3.1).
pub fn pandas_sample_one(n: usize, seed: u32) -> usize {
    if n <= 1 {
        return 0;
    }
    NumpyRng::seed(seed).permutation(n)[0]
}
