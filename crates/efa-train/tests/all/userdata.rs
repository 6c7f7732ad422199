//! The CSV layout of `efa train` becomes exactly the samples documented in `userdata`.

use efa_train::userdata::{build, read_csv, Direction, Families, FamilySpec, UserConfig};
use ndarray::array;
use std::path::Path;

const CSV: &str = "item,seq,value,order\n2,a,3,20\n1,a,0,10\n4,b,1,5\n3,a,2,30\n5,b,2,7\n";

fn config(text: &str) -> UserConfig {
    UserConfig::from_toml(text, Path::new("inline.toml"))
        .unwrap()
        .0
}

fn write_csv(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("efa-userdata-{tag}-{}.csv", std::process::id()));
    std::fs::write(&p, CSV).unwrap();
    p
}

const EFA: &str = "direction = \"DIR\"\n[family]\nkind = \"poisson\"\n[model.efa]\nitems = 6\nitem_dim = 2\nlayers = 1\nheads = 1\nkey_dim = 2\nout_dim = 1\nvalues = { rows = 6, dim = 2 }\n[train]\nlr = 0.1\nbatch_size = 2\nmax_epochs = 1\npatience = 1\nseed = 0\n";

#[test]
fn efa_samples_bidirectional_and_unidirectional() {
    let path = write_csv("efa");
    let cfg = config(&EFA.replace("DIR", "bi"));
    assert_eq!(cfg.family, Families::All(FamilySpec::Poisson {}));
    let data = read_csv(&path, &cfg).unwrap();
    // Sequences in order of first appearance, rows sorted by `order`.
    let orders: Vec<Vec<i64>> = data
        .sequences
        .iter()
        .map(|s| s.iter().map(|r| r.order).collect())
        .collect();
    assert_eq!(orders, vec![vec![10, 20, 30], vec![5, 7]]);
    let s = build(&data, &cfg).samples.dense();
    assert_eq!(
        s.tokens,
        array![[1, 2, 3], [1, 2, 3], [1, 2, 3], [4, 5, 0], [4, 5, 0]]
    );
    // value v → row v + 1; the target's row is [MASK] = rows − 1 = 5; padding 0.
    assert_eq!(
        s.values.unwrap(),
        array![[5, 4, 3], [1, 5, 3], [1, 4, 5], [5, 3, 0], [2, 5, 0]]
    );
    assert_eq!(s.lengths, vec![3, 3, 3, 2, 2]);
    assert_eq!(s.pred_idx, vec![0, 1, 2, 0, 1]);
    assert_eq!(
        s.targets,
        efa_model::Targets::Real(vec![0.0, 3.0, 2.0, 1.0, 2.0])
    );

    let cfg = config(&EFA.replace("DIR", "uni"));
    assert_eq!(cfg.direction, Direction::Uni);
    let u = build(&read_csv(&path, &cfg).unwrap(), &cfg);
    let s = u.samples.dense();
    assert_eq!(s.tokens, array![[1, 2, 0], [1, 2, 3], [4, 5, 0]]);
    assert_eq!(s.values.unwrap(), array![[1, 5, 0], [1, 4, 5], [2, 5, 0]]);
    assert_eq!(s.lengths, vec![2, 3, 2]);
    assert_eq!(s.pred_idx, vec![1, 2, 1]);
    assert_eq!(
        u.targets
            .iter()
            .map(|r| (r.seq.as_str(), r.order, r.line))
            .collect::<Vec<_>>(),
        vec![("a", 20, 2), ("a", 30, 5), ("b", 7, 6)]
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn rating_fm_samples() {
    let path = write_csv("fm");
    let text = "[family]\nkind = \"gaussian_known_var\"\ns2 = 1.0\n[model.fm]\nkind = \"rating\"\nitems = 6\ndim = 2\n[train]\nlr = 0.1\nbatch_size = 2\nmax_epochs = 1\npatience = 1\nseed = 0\n";
    let cfg = config(text);
    let s = build(&read_csv(&path, &cfg).unwrap(), &cfg).samples.dense();
    assert_eq!(s.tokens, array![[2, 3], [1, 3], [1, 2], [5, 0], [4, 0]]);
    assert_eq!(
        s.weights.unwrap(),
        array![[3.0, 2.0], [0.0, 2.0], [0.0, 3.0], [2.0, 0.0], [1.0, 0.0]]
    );
    assert_eq!(s.center.unwrap(), vec![1, 2, 3, 4, 5]);
    assert_eq!(s.lengths, vec![2, 2, 2, 1, 1]);
    // The categorical family needs k natural parameters: impossible for the rating FM.
    let e = UserConfig::from_toml(
        &text.replace(
            "kind = \"gaussian_known_var\"\ns2 = 1.0",
            "kind = \"categorical\"\nk = 3",
        ),
        Path::new("c.toml"),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(e, "c.toml: field `family`: `categorical` needs 3 natural parameters but the rating FM outputs 1");
    let _ = std::fs::remove_file(&path);
}

/// A one-row sequence is an EFA sample when its row is marked a target: its context is its
/// own item with the [MASK] value (the paper's first unidirectional sample). Without the
/// marking, or for a factor model (no context at all), it stays an error naming the line.
#[test]
fn one_row_sequence_is_a_sample_only_as_a_marked_efa_target() {
    let dir = std::env::temp_dir();
    let write = |tag: &str, text: &str| {
        let p = dir.join(format!("efa-userdata-{tag}-{}.csv", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    };
    let marked = write(
        "lone",
        "seq,order,item,value,target\nx,0,3,2,1\ny,0,4,1,0\ny,1,2,0,1\n",
    );
    let cfg = config(&EFA.replace("DIR", "uni"));
    let u = build(&read_csv(&marked, &cfg).unwrap(), &cfg);
    let s = u.samples.dense();
    assert_eq!(s.tokens, array![[3, 0], [4, 2]]);
    assert_eq!(s.values.unwrap(), array![[5, 0], [2, 5]]);
    assert_eq!(s.lengths, vec![1, 2]);
    assert_eq!(s.pred_idx, vec![0, 1]);
    assert_eq!(s.targets, efa_model::Targets::Real(vec![2.0, 0.0]));

    let unmarked = write(
        "lone-unmarked",
        "seq,order,item,value\nx,0,3,2\ny,0,4,1\ny,1,2,0\n",
    );
    let e = read_csv(&unmarked, &cfg).unwrap_err().to_string();
    assert!(
        e.contains(":2: field `seq` = \"x\": sequence `x` has 1 row")
            && e.contains("`target` column"),
        "{e}"
    );
    let fm = config(
        "[family]\nkind = \"poisson\"\n[model.fm]\nkind = \"rating\"\nitems = 6\ndim = 2\n[train]\nlr = 0.1\nbatch_size = 2\nmax_epochs = 1\npatience = 1\nseed = 0\n",
    );
    let e = read_csv(&marked, &fm).unwrap_err().to_string();
    assert!(
        e.contains("sequence `x` has 1 row") && !e.contains("`target` column"),
        "{e}"
    );
    for p in [marked, unmarked] {
        let _ = std::fs::remove_file(p);
    }
}
