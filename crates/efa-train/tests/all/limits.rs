//! Sizes checked before anything is allocated (overflow-safe parameter counts, the memory
//! estimate against the available memory) and degenerate settings rejected when the
//! configuration is read, each error naming the field or flag.

use efa_model::{EfaConfig, FmConfig, ModelConfig};
use efa_train::memory::{check_memory_against, check_site_table_against, estimate, Job};
use efa_train::userdata::UserConfig;
use efa_train::TrainConfig;
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
        .0
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
fn huge_sizes_in_a_configuration_file_are_errors_naming_the_file_and_field() {
    // Each of these aborted (allocation failure), panicked (shape overflow) or ran without
    // end before sizes were checked. The size check itself is efa-model's (tests/size.rs);
    // here: it answers for a configuration file, naming the file and the field's path.
    let cases = [
        (
            "items = 6",
            "items = 1000000000000",
            "model.efa.items",
            "1000000000000",
        ),
        (
            "items = 6",
            "items = 4611686018427387904",
            "model.efa.items",
            "4611686018427387904",
        ),
        (
            "heads = 2",
            "heads = 4294967296",
            "model.efa.heads",
            "4294967296",
        ),
        (
            "max_len = 5",
            "max_len = 100000000000",
            "model.efa.positions.max_len",
            "100000000000",
        ),
        (
            "rows = 10",
            "rows = 100000000000",
            "model.efa.values.rows",
            "100000000000",
        ),
        (
            "head_hidden = [8]",
            "head_hidden = [100000000000]",
            "model.efa.head_hidden[0]",
            "100000000000",
        ),
        (
            "layers = 1",
            "layers = 1\nffn = 100000000000",
            "model.efa.ffn",
            "100000000000",
        ),
    ];
    for (from, to, field, value) in cases {
        let e = config_error(&BASE.replace(from, to));
        assert_eq!(
            e,
            format!(
                "c.toml: field `{field}`: {value} is beyond the limit of 268435456 (the most \
                 parameter values a model may have)"
            ),
            "{to}"
        );
    }
    assert_eq!(
        config_error(&BASE.replace("layers = 1", "layers = 100000000")),
        "c.toml: field `model.efa.layers`: 100000000 blocks; at most 1024 are supported"
    );
    // A product beyond the limit names the file, the tensor and the fields behind it.
    let e = config_error(
        &BASE
            .replace("items = 6", "items = 134217728")
            .replace("item_dim = 8", "item_dim = 134217728"),
    );
    assert_eq!(
        e,
        "c.toml: field `model`: parameter `item_emb` of shape [134217728, 134217728] (from \
         `items` = 134217728 × `item_dim` = 134217728) has more than 268435456 values"
    );
    // Factor models too.
    let fm = "[family]\nkind = \"gaussian_known_var\"\ns2 = 1.0\n[model.fm]\nkind = \"rating\"\nitems = 100000000000\ndim = 50\n[train]\nlr = 0.1\nbatch_size = 2\nmax_epochs = 1\npatience = 1\nseed = 0\n";
    assert_eq!(
        config_error(fm),
        "c.toml: field `model.fm.items`: 100000000000 is beyond the limit of 268435456 (the \
         most parameter values a model may have)"
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
    let count = m.validate().unwrap();
    let e = estimate(&m, &count, &job);
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
    assert!(check_memory_against(&m, &count, &job, "five rows", (18112, "test")).is_ok());
    let err = check_memory_against(&m, &count, &job, "five rows", (18111, "test"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "not enough memory: the job needs about 18.1 kB (80 \
         parameters: 1.6 kB for parameters, best parameters, Adam moments and gradient; \
         16.5 kB for 2 worker tape(s) of up to 80 training and 320 evaluation positions), but \
         18.1 kB is available (test); the largest part is the tapes' positions: 80 per \
         training micro-batch, 320 per evaluation chunk, from five rows"
    );
    // The EFA's projected tables count too: (items + value rows + max_len)·3·H·K floats.
    let c = efa(BASE);
    let m = ModelConfig::Efa(c);
    let big = efa(&BASE.replace("items = 6", "items = 6000"));
    let big = ModelConfig::Efa(big);
    let (a, b) = (
        estimate(&m, &m.validate().unwrap(), &job),
        estimate(&big, &big.validate().unwrap(), &job),
    );
    // 5994 more item rows: 5994·8 more parameters (×4 bytes: 5 resident, 3 per training
    // tape) and 5994·3·8 more table floats per training tape (values and gradients).
    let dp = 5994 * 8 * 4;
    assert_eq!(b.resident - a.resident, 5 * dp);
    assert_eq!(b.train_tape - a.train_tape, 3 * dp + 2 * 4 * 5994 * 3 * 8);
    // A job whose tapes' positions dominate names where they come from.
    let long = Job::new(&t, 100, 20_000_000, 1);
    let err = check_memory_against(
        &m,
        &a.params,
        &long,
        "one sample of 20000000 rows",
        (1 << 30, "test"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.ends_with(
            "the largest part is the tapes' positions: 20000000 per training micro-batch, \
             20000000 per evaluation chunk, from one sample of 20000000 rows"
        ),
        "{err}"
    );
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
            "field `model.efa.ln_eps`: must be a finite positive number",
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
        assert!(e.starts_with(&format!("c.toml: {expected}")), "{text}\n{e}");
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

#[test]
fn the_site_table_and_the_sites_a_tape_reads_count_in_the_memory_estimate() {
    // Continuous inputs keep a site table, and every tape runs the site MLP over the sites
    // its batch reads (at most its positions) and projects their rows: the estimate left
    // both out, so 10⁷ sites passed the check and aborted on allocation.
    let text = |sites: usize| {
        let rows = vec!["[0.5, 1.5]"; sites].join(", ");
        format!(
            "[family]\nkind = \"gaussian\"\n[model.efa]\nitems = {sites}\nitem_dim = 8\n\
             layers = 1\nheads = 2\nkey_dim = 4\nout_dim = 2\n[model.efa.continuous]\n\
             hidden = 16\ndim = 4\nfuse = 8\nsites = [{rows}]\n[train]\nlr = 0.01\n\
             batch_size = 16\nmax_epochs = 6\npatience = 3\nseed = 7\neval_batch = 64\n"
        )
    };
    let job = Job::new(&TrainConfig::paper(1, 0), 100, 5, 2);
    let (n_train, n_eval) = (job.train_positions, job.eval_positions);
    assert!(
        10 < n_train && n_train <= n_eval && n_eval < 1010,
        "the cases below straddle the positions: {n_train}, {n_eval}"
    );
    let est = |sites: usize| {
        let m = ModelConfig::Efa(efa(&text(sites)));
        estimate(&m, &m.validate().unwrap(), &job)
    };
    let (e10, e20, e1010, e2010) = (est(10), est(20), est(1010), est(2010));
    assert_eq!(
        e10.params, e2010.params,
        "no parameter grows with the sites"
    );
    // Floats per site row a tape reads: its 3·H·K projections, 2 features, the hidden layer
    // before and after its activation and the output.
    let per = (3 * 2 * 4 + 2 + 2 * 16 + 4) as u64;
    // The table grows with every site: 96 + 88·2 bytes each.
    assert_eq!(e2010.site_table - e1010.site_table, 1000 * (96 + 88 * 2));
    // Below the positions the tapes grow with the sites (training: values and gradients) ...
    assert_eq!(e20.train_tape - e10.train_tape, 2 * 4 * 10 * per);
    assert_eq!(e20.eval_tape - e10.eval_tape, 4 * 10 * per);
    // ... and past them not at all: a tape reads at most its positions' sites.
    assert_eq!(e1010.train_tape, e2010.train_tape);
    assert_eq!(e1010.eval_tape, e2010.eval_tape);
    assert_eq!(
        e1010.train_tape - e10.train_tape,
        2 * 4 * (n_train as u64 - 10) * per
    );
    assert_eq!(
        e2010.total - e1010.total,
        e2010.site_table - e1010.site_table
    );
    // Before the table is built: refused naming the field, against the memory given.
    let need = 1000 * (96 + 88 * 2);
    let f = Path::new("items.csv");
    assert!(check_site_table_against(1000, 2, f, (need, "test")).is_ok());
    let err = check_site_table_against(1000, 2, f, (need - 1, "test"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "field `model.efa.items`: 1000 item rows × 2 feature columns of items.csv: the site \
         table needs about 272.0 kB (the table and its copies in the size check and the model \
         file), but 272.0 kB is available (test)"
    );
}

#[test]
fn a_site_table_given_in_the_configuration_is_checked_against_memory_before_the_size_check() {
    // A site table read from an item-feature file is checked against memory before it is
    // built; one written in the configuration (`sites = [...]`) met the memory check only
    // after the size check had copied it (the configuration as JSON values). Now it is
    // checked first, in the same terms. (A table large enough to fail the check on this
    // machine costs the TOML parser several times the estimate, so the memory is given.)
    let rows = vec!["[0.5, 1.5]"; 1000].join(", ");
    let text = format!(
        "[family]\nkind = \"gaussian\"\n[model.efa]\nitems = 1000\nitem_dim = 8\nlayers = 1\n\
         heads = 2\nkey_dim = 4\nout_dim = 2\n[model.efa.continuous]\nhidden = 16\ndim = 4\n\
         fuse = 8\nsites = [{rows}]\n[train]\nlr = 0.01\nbatch_size = 16\nmax_epochs = 6\n\
         patience = 3\nseed = 7\neval_batch = 64\n"
    );
    let (cfg, params) = UserConfig::from_toml(&text, Path::new("c.toml")).unwrap();
    // The table and its copies: 1000 rows of 96 + 88·2 bytes.
    let need = 1000 * (96 + 88 * 2);
    let err = cfg
        .validate_against((need - 1, "test"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "field `model.efa.continuous.sites`: 1000 rows × 2 feature columns given in the \
         configuration: the site table needs about 272.0 kB (the table and its copies in the \
         size check and the model file), but 272.0 kB is available (test)"
    );
    // Room for the table but not for the job (a sample of 2 rows, as validate sizes it):
    // the full check refuses it; with room for the job it passes, counting the same
    // parameters.
    let job = Job::new(&cfg.train, 1, 2, 1);
    let total = estimate(&cfg.model, &params, &job).total;
    assert!(need < total);
    let err = cfg
        .validate_against((total - 1, "test"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("not enough memory: the job needs about"),
        "{err}"
    );
    assert_eq!(cfg.validate_against((total, "test")).unwrap(), params);
}
