//! Per-position samples for the categorical item experiments (ML exp-1 §3.3, Instacart §5).
//!
//! Tokens: 0 = padding, 1..=n_items items, `n_items + 1` = MASK. Every position of every
//! basket is the target once; samples are enumerated basket by basket, positions `0..len`.

use crate::DataError;

/// One EFA sample (both directions; the direction lives in the attention mask).
#[derive(Clone, Debug, PartialEq)]
pub struct ItemEfaSample {
    /// The basket with position `masked_idx` replaced by MASK, post-padded with 0 to `max_len`.
    pub tokens: Vec<usize>,
    /// Target position.
    pub masked_idx: usize,
    /// Number of non-pad tokens (basket length).
    pub length: usize,
    /// Target class = item id − 1 (0-based).
    pub target: usize,
}

/// One FM sample.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemFmSample {
    /// Context tokens, 0-padded: bidir = the basket without the target (width `max_len − 1`);
    /// unidir = `basket[..idx]` followed by MASK (width `max_len`).
    pub context: Vec<usize>,
    /// Target class = item id − 1.
    pub target: usize,
}

fn check(basket: &[usize], n_items: usize, max_len: usize, which: usize) -> Result<(), DataError> {
    if basket.len() > max_len {
        return Err(DataError::invalid(format!(
            "basket {which}: length {} exceeds max_len {max_len}",
            basket.len()
        )));
    }
    if let Some(&bad) = basket.iter().find(|&&t| t == 0 || t > n_items) {
        return Err(DataError::invalid(format!(
            "basket {which}: item id {bad} outside 1..={n_items}"
        )));
    }
    Ok(())
}

/// EFA samples of all `baskets` (context = basket with the target replaced by `n_items + 1`).
pub fn item_efa_samples(
    baskets: &[Vec<usize>],
    n_items: usize,
    max_len: usize,
) -> Result<Vec<ItemEfaSample>, DataError> {
    let mask = n_items + 1;
    let mut out = Vec::new();
    for (bi, b) in baskets.iter().enumerate() {
        check(b, n_items, max_len, bi)?;
        for idx in 0..b.len() {
            let mut tokens = vec![0; max_len];
            tokens[..b.len()].copy_from_slice(b);
            tokens[idx] = mask;
            out.push(ItemEfaSample {
                tokens,
                masked_idx: idx,
                length: b.len(),
                target: b[idx] - 1,
            });
        }
    }
    Ok(out)
}

/// Bidirectional FM samples: context = the other items in order, padded to `max_len − 1`.
pub fn item_fm_bi_samples(
    baskets: &[Vec<usize>],
    n_items: usize,
    max_len: usize,
) -> Result<Vec<ItemFmSample>, DataError> {
    let mut out = Vec::new();
    for (bi, b) in baskets.iter().enumerate() {
        check(b, n_items, max_len, bi)?;
        for idx in 0..b.len() {
            let mut context: Vec<usize> = b
                .iter()
                .enumerate()
                .filter(|&(p, _)| p != idx)
                .map(|(_, &t)| t)
                .collect();
            context.resize(max_len.saturating_sub(1), 0);
            out.push(ItemFmSample {
                context,
                target: b[idx] - 1,
            });
        }
    }
    Ok(out)
}

/// Unidirectional FM samples: context = `basket[..idx]` then MASK, padded to `max_len`.
pub fn item_fm_uni_samples(
    baskets: &[Vec<usize>],
    n_items: usize,
    max_len: usize,
) -> Result<Vec<ItemFmSample>, DataError> {
    let mut out = Vec::new();
    for (bi, b) in baskets.iter().enumerate() {
        check(b, n_items, max_len, bi)?;
        for idx in 0..b.len() {
            let mut context = b[..idx].to_vec();
            context.push(n_items + 1);
            context.resize(max_len, 0);
            out.push(ItemFmSample {
                context,
                target: b[idx] - 1,
            });
        }
    }
    Ok(out)
}
