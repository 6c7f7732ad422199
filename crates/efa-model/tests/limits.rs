//! Sizes checked before anything is allocated (overflow-safe parameter counts, the memory
//! estimate against the available memory) and degenerate settings rejected when the
//! configuration is read, each error naming the field or flag.

use efa_model::limits::{
    check_memory_against, count_params, estimate, Job, MAX_ELEMENTS, MAX_LAYERS,
};
use efa_model::train::TrainConfig;
use efa_model::userdata::UserConfig;
use efa_model::{EfaConfig, FmConfig, ModelConfig};
use std::path::Path;

const BASE: &str = "direction = \"bi\"\n[family]\nkind = \"poisson\"\n[model.efa]\nitems = 6\nitem_dim = 8\nlayers = 1\nheads = 2\nkey_dim = 4\nhead_hidden = [8]\nout_dim = 1\nvalues = { rows = 10, dim = 4 }\npositions = { max_len = 5 }\n[train]\nlr = 0.01\nbatch_size = 16\nmax_epochs = 6\npatience = 3\nseed = 7\neval_batch = 64\n";

/// The error of reading `text` as a configuration (it must fail).
fn config_error(text: &str) -> String {
    match UserConfig::from_toml(text, Path::new("c.toml")) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn efa(text: &str) -> EfaConfig {
    match UserConfig::from_toml(text, Path::new("c.toml"))
        .unwrap()
        .model
    {
        ModelConfig::Efa(c) => c,
        ModelConfig::Fm(_) => unreachable!(),
    }
}

#[test]
fn the_base_configuration_is_accepted() {
    let c = efa(BASE);
    assert_eq!((c.items, c.layers), (6, 1));
}

#[test]
fn huge_dims_are_errors_naming_the_field_before_anything_is_allocated() {
    // Each of these aborted (allocation failure), panicked (shape overflow) or ran without
    // end before the sizes were checked.
    let cases = [
        // 10¹² × 8 item embeddings: 32 TB of f32, far beyond any machine.
        (
            "items = 6",
            "items = 1000000000000",
            "the largest part is field `items` = 1000000000000 × `item_dim` = 8 \
             (8000000000000 of the 8000000000632 parameters)",
        ),
        // 2⁶² × 8 elements overflow u64.
        (
            "items = 6",
            "items = 4611686018427387904",
            "EFA config field `items` = 4611686018427387904 × `item_dim` = 8: parameter \
             `item_emb` of shape [4611686018427387904, 8] exceeds the limit of",
        ),
        (
            "layers = 1",
            "layers = 100000000",
            "EFA config field `layers`: 100000000 blocks; at most 1024 are supported",
        ),
        (
            "heads = 2",
            "heads = 4294967296",
            "the largest part is field `heads` = 4294967296 × `key_dim` = 4 (in each of \
             `layers` = 1)",
        ),
        (
            "heads = 2\nkey_dim = 4",
            "heads = 288230376151711744\nkey_dim = 1",
            "EFA config field `heads/key_dim`: heads × model width (item_dim + values.dim) = \
             288230376151711744 × 12 exceeds the limit of",
        ),
        (
            "key_dim = 4",
            "key_dim = 9223372036854775807",
            "EFA config field `heads/key_dim`: heads × key_dim = 2 × 9223372036854775807 \
             exceeds the limit of",
        ),
        (
            "item_dim = 8",
            "item_dim = 9223372036854775807",
            "EFA config field `item_dim`: item_dim 9223372036854775807 + values.dim 4 exceeds \
             the limit of",
        ),
        (
            "max_len = 5",
            "max_len = 100000000000",
            "the largest part is the tapes' positions: 100000000000 per training micro-batch, \
             100000000000 per evaluation chunk, from one sample as long as field \
             `model.efa.positions.max_len` = 100000000000 allows",
        ),
        (
            "rows = 10",
            "rows = 100000000000",
            "the largest part is field `values.rows` = 100000000000 × `values.dim` = 4",
        ),
        (
            "head_hidden = [8]",
            "head_hidden = [100000000000]",
            "the largest part is field `head_hidden` = [100000000000]",
        ),
        (
            "layers = 1",
            "layers = 1\nffn = 100000000000",
            "the largest part is field `ffn` = 100000000000 (in each of `layers` = 1)",
        ),
    ];
    for (from, to, expected) in cases {
        let e = config_error(&BASE.replace(from, to));
        assert!(
            e.starts_with("invalid model configuration: c.toml: "),
            "{e}"
        );
        // Either refusal names the field: the memory estimate's largest part, or (for a value
        // beyond 2²⁸, checked first since the model-file size limit) the field limit.
        let key = to.rsplit('\n').next().unwrap().split(" =").next().unwrap();
        assert!(
            e.contains(expected) || (e.contains("beyond the limit") && e.contains(key)),
            "{to}: {e}"
        );
    }
    // The memory error states the estimate, the parameters and the available memory.
    // Beyond 2²⁸ values the configuration limit answers first, naming the field.
    let e = config_error(&BASE.replace("items = 6", "items = 1000000000000"));
    assert!(
        e.contains("field `model.efa.items` = 1000000000000 is beyond the limit"),
        "{e}"
    );
    // Factor models too.
    let fm = "[family]\nkind = \"gaussian_known_var\"\ns2 = 1.0\n[model.fm]\nkind = \"rating\"\nitems = 100000000000\ndim = 50\n[train]\nlr = 0.1\nbatch_size = 2\nmax_epochs = 1\npatience = 1\nseed = 0\n";
    let e = config_error(fm);
    assert!(
        e.contains("the largest part is field `items` = 100000000000 × `dim` = 50")
            || e.contains("field `model.fm.items` = 100000000000 is beyond the limit"),
        "{e}"
    );
    let e = FmConfig::Item {
        tokens: 1 << 40,
        dim: 1 << 40,
        classes: 3,
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(
            "FM config field `tokens` = 1099511627776 × `dim` = 1099511627776: parameter `alpha`"
        ),
        "{e}"
    );
}

#[test]
fn parameter_counts_match_the_declared_layout() {
    // The counting walk against the layout the model declares (its shapes, multiplied here).
    let mut models = vec![
        ModelConfig::Efa(efa(BASE)),
        ModelConfig::Efa(efa(
            &BASE.replace("layers = 1", "layers = 3\nffn = 5\nnorm = \"post\"")
        )),
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
        zero_padding: false,
        values: None,
        positions: None,
        layers: 2,
        heads: 2,
        key_dim: 16,
        ffn: Some(64),
        norm: efa_model::Norm::Post,
        ln_eps: 1e-3,
        head_hidden: vec![128, 16],
        out_dim: 1,
        out_bias: true,
        direction: efa_model::Direction::Padding,
        continuous: Some(efa_model::efa::ContinuousInputs {
            hidden: 128,
            dim: 32,
            sites: vec![vec![1.0, 2.0]],
            lag_rows: Some(2),
            fuse: 64,
        }),
    }));
    for m in &models {
        let layout = m.layout();
        let elements: usize = layout
            .entries
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        let count = count_params(m).unwrap();
        assert_eq!(count.elements, elements as u64, "{m:?}");
        assert_eq!(count.tensors, layout.entries.len());
        assert_eq!(
            count.by_field.iter().map(|(_, n)| n).sum::<u64>(),
            elements as u64
        );
    }
    // The base model by hand: item_emb 6·8, value_emb 10·4, pos_emb 5·12, attention
    // 3·(12·8 + 8) + 8·12 + 12, head0 12·8 + 8, out 8·1 = 48 + 40 + 60 + 420 + 104 + 8.
    assert_eq!(
        count_params(&models[0]).unwrap().elements,
        48 + 40 + 60 + 420 + 104 + 8
    );
}

#[test]
fn the_memory_estimate_follows_its_formula() {
    // A rating FM: P = 2·10·4 = 80 parameters, F = 3 floats per position, F_t = 4·4 = 16 per
    // target, no tables. Training batch 16, evaluation batch 64, 100 samples of at most 5
    // positions, 2 threads:
    //   train micro-batch: 16 targets, min(16·5, 65536) = 80 positions;
    //   eval chunk: 64 targets, min(64·5, 64·512) = 320 positions;
    //   train tape = 3·4·80 + 2·4·(80·3 + 16·16) = 960 + 3968 = 4928;
    //   eval tape = 4·80 + 4·(320·3 + 64·16) = 320 + 7936 = 8256;
    //   total = 5·4·80 + 2·max(4928, 8256) = 1600 + 16512 = 18112 bytes.
    let m = ModelConfig::Fm(FmConfig::Rating { items: 10, dim: 4 });
    let mut t = TrainConfig::paper(1, 0);
    (t.batch_size, t.eval_batch) = (16, 64);
    let job = Job::new(&t, 100, 5, 2);
    assert_eq!(
        job,
        Job {
            threads: 2,
            train_positions: 80,
            train_targets: 16,
            eval_positions: 320,
            eval_targets: 64
        }
    );
    let e = estimate(&m, &job).unwrap();
    assert_eq!(e.params.elements, 80);
    assert_eq!((e.resident, e.train_tape, e.eval_tape), (1600, 4928, 8256));
    assert_eq!(e.total, 18112);
    // One long sample: the micro-batch holds one sample of 100,000 positions (above the
    // budget), the evaluation chunk min(64·100000, max(64·512, 100000)) = 100,000 positions.
    let job = Job::new(&t, 100, 100_000, 1);
    assert_eq!(
        (job.train_positions, job.eval_positions),
        (100_000, 100_000)
    );
    // Checked against a given amount of memory: just enough passes, one byte less fails.
    let job = Job::new(&t, 100, 5, 2);
    assert!(check_memory_against(&m, &job, "five rows", (18112, "test")).is_ok());
    let err = check_memory_against(&m, &job, "five rows", (18111, "test"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid model configuration: not enough memory: the job needs about 18.1 kB (80 \
         parameters: 1.6 kB for parameters, best parameters, Adam moments and gradient; \
         16.5 kB for 2 worker tape(s) of up to 80 training and 320 evaluation positions), but \
         18.1 kB is available (test); the largest part is the tapes' positions: 80 per \
         training micro-batch, 320 per evaluation chunk, from five rows"
    );
    // The EFA's projected tables count too: (items + value rows + max_len)·3·H·K floats.
    let c = efa(BASE);
    let m = ModelConfig::Efa(c);
    let big = efa(&BASE.replace("items = 6", "items = 6000"));
    let (a, b) = (
        estimate(&m, &job).unwrap(),
        estimate(&ModelConfig::Efa(big), &job).unwrap(),
    );
    // 5994 more item rows: 5994·8 more parameters (×4 bytes: 5 resident, 3 per training
    // tape) and 5994·3·8 more table floats per training tape (values and gradients).
    let dp = 5994 * 8 * 4;
    assert_eq!(b.resident - a.resident, 5 * dp);
    assert_eq!(b.train_tape - a.train_tape, 3 * dp + 2 * 4 * 5994 * 3 * 8);
    assert_eq!(MAX_LAYERS, 1024);
    // The documented property: an f64 copy of the largest tensor has a byte size ndarray and
    // the allocator can represent.
    assert!(MAX_ELEMENTS
        .checked_mul(8)
        .is_some_and(|b| b <= isize::MAX as u64));
}

#[test]
fn degenerate_settings_are_errors_naming_the_field_when_the_config_is_read() {
    let family = |spec: &str| {
        BASE.replace("kind = \"poisson\"", spec)
            .replace("out_dim = 1", "out_dim = OUT")
    };
    let cases: Vec<(String, &str)> = vec![
        (
            BASE.replace("max_epochs = 6", "max_epochs = 0"),
            "field `train.max_epochs`: 0 must be at least 1",
        ),
        (
            BASE.replace("batch_size = 16", "batch_size = 0"),
            "field `train.batch_size`: 0 must be at least 1",
        ),
        (
            BASE.replace("eval_batch = 64", "eval_batch = 0"),
            "field `train.eval_batch`: 0 must be at least 1",
        ),
        (
            BASE.replace("lr = 0.01", "lr = -0.5"),
            "field `train.lr`: -0.5 must be a finite positive number",
        ),
        (
            BASE.replace("lr = 0.01", "lr = nan"),
            "field `train.lr`: NaN must be a finite positive number",
        ),
        (
            BASE.replace("layers = 1", "layers = 1\nln_eps = inf"),
            "EFA config field `ln_eps`: must be a finite positive number",
        ),
        (
            family("kind = \"categorical\"\nk = 1").replace("OUT", "1"),
            "field `family.k`: 1 classes; at least 2 are needed",
        ),
        (
            family("kind = \"categorical\"\nk = 0").replace("OUT", "1"),
            "field `family.k`: 0 classes; at least 2 are needed",
        ),
        (
            family("kind = \"binomial\"\nn = 0").replace("OUT", "1"),
            "field `family.n`: 0 trials; at least 1 is needed",
        ),
        (
            family("kind = \"negative_binomial\"\nr = 0.0").replace("OUT", "1"),
            "field `family.r`: 0 must be a finite positive number of failures",
        ),
        (
            family("kind = \"negative_binomial\"\nr = inf").replace("OUT", "1"),
            "field `family.r`: inf must be a finite positive number of failures",
        ),
        (
            family("kind = \"gaussian_known_var\"\ns2 = -1.0").replace("OUT", "1"),
            "field `family.s2`: -1 must be a finite positive variance",
        ),
    ];
    for (text, expected) in cases {
        let e = config_error(&text);
        assert!(
            e.starts_with(&format!("invalid model configuration: c.toml: {expected}")),
            "{text}\n{e}"
        );
    }
    // The smallest sensible families are accepted: 2 classes, 1 trial.
    let ok = family("kind = \"categorical\"\nk = 2").replace("OUT", "2");
    UserConfig::from_toml(&ok, Path::new("c.toml")).unwrap();
    let ok = family("kind = \"binomial\"\nn = 1").replace("OUT", "1");
    UserConfig::from_toml(&ok, Path::new("c.toml")).unwrap();
    // patience = 0 is Keras's default and behaves as 1: accepted.
    UserConfig::from_toml(
        &BASE.replace("patience = 3", "patience = 0"),
        Path::new("c.toml"),
    )
    .unwrap();
}
