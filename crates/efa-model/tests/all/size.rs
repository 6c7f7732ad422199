//! The one size check of a model configuration (`ModelConfig::validate`, through
//! `size::count_params`): every size field within 2²⁸, at most 1024 blocks, and the declared
//! parameters counted with overflow-checked arithmetic against 2²⁸ values. Each refusal names
//! the field or the tensor, and nothing is allocated in proportion to a claimed size.

use efa_model::efa::ContinuousInputs;
use efa_model::size::{count_params, MAX_LAYERS, MAX_PARAM_VALUES};
use efa_model::ValueTable;
use efa_model::{EfaConfig, FmConfig, ModelConfig, ModelError, Norm, Positions, Visibility};

/// The small EFA of the `efa train` fixtures: 6 items × 8, values 10 × 4, positions 5, one
/// block of 2 heads × 4, head [8], one output.
fn base() -> EfaConfig {
    EfaConfig {
        items: 6,
        item_dim: 8,
        zero_padding: false,
        values: Some(ValueTable { rows: 10, dim: 4 }),
        positions: Some(Positions {
            max_len: 5,
            only_valid: false,
        }),
        layers: 1,
        heads: 2,
        key_dim: 4,
        ffn: None,
        norm: Norm::None,
        ln_eps: 1e-3,
        head_hidden: vec![8],
        out_dim: 1,
        out_bias: false,
        direction: Visibility::Padding,
        continuous: None,
    }
}

/// The refusal of `c` as `(field, reason)` (it must be a configuration error).
fn refused(c: EfaConfig) -> (String, String) {
    match ModelConfig::Efa(c).validate() {
        Err(ModelError::Config { field, reason }) => (field, reason),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn the_limit_and_the_counts_of_the_layout() {
    assert_eq!(MAX_PARAM_VALUES, 268_435_456);
    assert_eq!(MAX_LAYERS, 1024);
    // An f64 copy of the largest model has a byte size the allocator can represent.
    assert!(MAX_PARAM_VALUES
        .checked_mul(8)
        .is_some_and(|b| b <= isize::MAX as u64));
    let mut models = vec![
        ModelConfig::Efa(base()),
        ModelConfig::Efa(EfaConfig {
            layers: 3,
            ffn: Some(5),
            norm: Norm::Post,
            ..base()
        }),
        ModelConfig::Fm(FmConfig::Rating { items: 7, dim: 3 }),
        ModelConfig::Fm(FmConfig::Item {
            tokens: 9,
            dim: 4,
            classes: 6,
        }),
    ];
    // A temperature-style EFA: continuous values and sites, a lag embedding, post-norm FFN.
    models.push(ModelConfig::Efa(EfaConfig {
        items: 1,
        item_dim: 32,
        values: None,
        positions: None,
        layers: 2,
        heads: 2,
        key_dim: 16,
        ffn: Some(64),
        norm: Norm::Post,
        head_hidden: vec![128, 16],
        continuous: Some(ContinuousInputs {
            hidden: 128,
            dim: 32,
            sites: vec![vec![1.0, 2.0]],
            lag_rows: Some(2),
            fuse: 64,
            item_embedding: false,
        }),
        ..base()
    }));
    for m in &models {
        // The count against the shapes the initialiser actually builds.
        let built: usize = m.init::<f32>(0).iter().map(|(_, v)| v.len()).sum();
        let count = m.validate().unwrap();
        assert_eq!(count, count_params(m).unwrap());
        assert_eq!(count.elements, built as u64, "{m:?}");
        assert_eq!(count.tensors, m.layout().entries.len());
        assert_eq!(
            count.by_field.iter().map(|(_, n)| n).sum::<u64>(),
            built as u64
        );
    }
    // The base model by hand: item_emb 6·8, value_emb 10·4, pos_emb 5·12, attention
    // 3·(12·8 + 8) + 8·12 + 12, head0 12·8 + 8, out 8·1 = 48 + 40 + 60 + 420 + 104 + 8.
    assert_eq!(
        models[0].validate().unwrap().elements,
        48 + 40 + 60 + 420 + 104 + 8
    );
    // The item table is attributed to the fields it comes from.
    let count = models[0].validate().unwrap();
    assert_eq!(
        count.by_field[0],
        ("`items` = 6 × `item_dim` = 8".to_string(), 48)
    );
}

#[test]
fn a_field_beyond_the_limit_is_refused_naming_its_path() {
    let beyond = |field: &str, x: u64| {
        (
            field.to_string(),
            format!(
                "{x} is beyond the limit of 268435456 (the most parameter values a model may \
                 have)"
            ),
        )
    };
    // Values whose products overflow 64 bits are refused before any product is formed.
    let huge = 4_611_686_018_427_387_904usize; // 2⁶²
    let cases: Vec<(EfaConfig, (String, String))> = vec![
        (
            EfaConfig {
                items: 1_000_000_000_000,
                ..base()
            },
            beyond("efa.items", 1_000_000_000_000),
        ),
        (
            EfaConfig {
                items: huge,
                ..base()
            },
            beyond("efa.items", huge as u64),
        ),
        (
            EfaConfig {
                heads: 1 << 32,
                ..base()
            },
            beyond("efa.heads", 1 << 32),
        ),
        (
            EfaConfig {
                key_dim: usize::MAX,
                ..base()
            },
            beyond("efa.key_dim", u64::MAX),
        ),
        (
            EfaConfig {
                item_dim: usize::MAX,
                ..base()
            },
            beyond("efa.item_dim", u64::MAX),
        ),
        (
            EfaConfig {
                positions: Some(Positions {
                    max_len: 100_000_000_000,
                    only_valid: false,
                }),
                ..base()
            },
            beyond("efa.positions.max_len", 100_000_000_000),
        ),
        (
            EfaConfig {
                values: Some(ValueTable {
                    rows: 100_000_000_000,
                    dim: 4,
                }),
                ..base()
            },
            beyond("efa.values.rows", 100_000_000_000),
        ),
        (
            EfaConfig {
                head_hidden: vec![8, 1 << 32],
                ..base()
            },
            beyond("efa.head_hidden[1]", 1 << 32),
        ),
        (
            EfaConfig {
                ffn: Some(100_000_000_000),
                ..base()
            },
            beyond("efa.ffn", 100_000_000_000),
        ),
        (
            EfaConfig {
                layers: 100_000_000,
                ..base()
            },
            (
                "efa.layers".into(),
                "100000000 blocks; at most 1024 are supported".into(),
            ),
        ),
    ];
    for (c, want) in cases {
        assert_eq!(refused(c), want);
    }
    let e = ModelConfig::Fm(FmConfig::Rating {
        items: 100_000_000_000,
        dim: 50,
    })
    .validate()
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "model configuration field `fm.items`: 100000000000 is beyond the limit of \
         268435456 (the most parameter values a model may have)"
    );
}

#[test]
fn a_product_beyond_the_limit_is_refused_naming_the_tensor_and_its_field() {
    // 2²⁷ rows of width 2²⁷: each field is within the limit, the table has 2⁵⁴ values.
    let e = ModelConfig::Efa(EfaConfig {
        items: 1 << 27,
        item_dim: 1 << 27,
        ..base()
    })
    .validate()
    .unwrap_err();
    assert!(matches!(e, ModelError::Size(_)), "{e}");
    assert_eq!(
        e.to_string(),
        "model configuration: field `items` = 134217728 × `item_dim` = 134217728: parameter \
         `item_emb` of shape [134217728, 134217728] exceeds the limit of 268435456 elements"
    );
    // Tables within the limit one by one, together beyond it: the running total stops at the
    // tensor that passes it.
    // item_emb 30,000,000·8 = 240,000,000 values, then value_emb 10,000,000·4 = 40,000,000.
    let e = ModelConfig::Efa(EfaConfig {
        items: 30_000_000,
        values: Some(ValueTable {
            rows: 10_000_000,
            dim: 4,
        }),
        ..base()
    })
    .validate()
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "model configuration: field `values.rows` = 10000000 × `values.dim` = 4: the total \
         parameter count exceeds the limit of 268435456 elements"
    );
    // Many blocks of a small model: within the layer bound, each block small; accepted and
    // counted without building anything.
    let c = ModelConfig::Efa(EfaConfig {
        layers: 1024,
        ..base()
    });
    assert_eq!(
        c.validate().unwrap().elements,
        48 + 40 + 60 + 1024 * 420 + 104 + 8
    );
    // Just under the limit in one table is accepted (validate allocates nothing).
    let n = ModelConfig::Efa(EfaConfig {
        items: 16_777_215,
        ..base()
    })
    .validate()
    .unwrap()
    .elements;
    assert!(n > 16_777_215 * 8 && n <= MAX_PARAM_VALUES, "{n}");
}

#[test]
fn impossible_shapes_are_refused_naming_the_field() {
    let cases: Vec<(EfaConfig, &str)> = vec![
        (EfaConfig { items: 0, ..base() }, "efa.items"),
        (
            EfaConfig {
                ln_eps: f64::INFINITY,
                ..base()
            },
            "efa.ln_eps",
        ),
        (
            EfaConfig {
                head_hidden: vec![8, 0],
                ..base()
            },
            "efa.head_hidden/ffn",
        ),
        (
            EfaConfig {
                values: None,
                continuous: Some(ContinuousInputs {
                    hidden: 4,
                    dim: 2,
                    sites: vec![vec![1.0], vec![f64::NAN]],
                    lag_rows: None,
                    fuse: 3,
                    item_embedding: false,
                }),
                ..base()
            },
            "efa.continuous.sites",
        ),
    ];
    for (c, field) in cases {
        assert_eq!(refused(c).0, field);
    }
}
