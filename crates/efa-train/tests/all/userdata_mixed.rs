//! Mixed families, continuous inputs from an item-feature table, and lag rows: the samples
//! they become, and every error naming the file, line and field (or the configuration field).

use efa_expfam::Family;
use efa_model::{Objective, Targets};
use efa_train::userdata::{build, read_csv_with, read_item_csv, Families, FamilySpec, UserConfig};
use std::path::{Path, PathBuf};

fn file(tag: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("efa-mixed-{tag}-{}.csv", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// Items 0..=5 with coordinates; families: 1–2 gaussian, 3–4 bernoulli, 5 poisson (item 0
/// has none).
const CFG: &str = r#"
[[family]]
items = [1, 2]
kind = "gaussian"
[[family]]
items = [3, 4]
kind = "bernoulli"
[[family]]
items = [5, 5]
kind = "poisson"
[model.efa]
items = 6
item_dim = 4
layers = 1
heads = 1
key_dim = 2
head_hidden = [4]
out_dim = 2
[model.efa.continuous]
hidden = 4
dim = 2
fuse = 4
lag_rows = 2
item_embedding = true
[train]
lr = 0.01
batch_size = 4
max_epochs = 1
patience = 1
seed = 0
"#;

const ITEMS: &str =
    "item,lat,lon\n1,40.0,-100.0\n2,40.0,-100.0\n3,41.0,-101.0\n4,41.0,-101.0\n5,42.5,-99.0\n";

/// Two days: day a with lag-1 rows, day b without.
const DATA: &str = "seq,order,item,value,lag\n\
a,0,1,12.5,0\n\
a,1,3,1,0\n\
a,2,5,4,0\n\
a,3,1,11.0,1\n\
a,4,3,0,1\n\
b,0,2,9.25,0\n\
b,1,4,0,0\n";

fn setup(tag: &str, cfg: &str, data: &str) -> Result<(UserConfig, PathBuf), String> {
    let items = read_item_csv(&file(&format!("{tag}-items"), ITEMS)).map_err(|e| e.to_string())?;
    let (cfg, _) = UserConfig::from_toml_with_items(cfg, Path::new("m.toml"), Some(&items))
        .map_err(|e| e.to_string())?;
    let p = file(tag, data);
    read_csv_with(&p, &cfg, Some(&items)).map_err(|e| e.to_string())?;
    Ok((cfg, p))
}

fn read_err(tag: &str, data: &str) -> String {
    let items = read_item_csv(&file(&format!("{tag}-items"), ITEMS)).unwrap();
    let (cfg, _) =
        UserConfig::from_toml_with_items(CFG, Path::new("m.toml"), Some(&items)).unwrap();
    let p = file(tag, data);
    let e = read_csv_with(&p, &cfg, Some(&items))
        .unwrap_err()
        .to_string();
    e.replace(&p.display().to_string(), "DATA")
}

#[test]
fn family_tables_parse_and_one_table_still_means_every_item() {
    let (cfg, _) = setup("parse", CFG, DATA).unwrap();
    let Families::Ranges(r) = &cfg.family else {
        panic!("{:?}", cfg.family)
    };
    assert_eq!(r.len(), 3);
    assert_eq!(r[1].items, [3, 4]);
    assert_eq!(r[1].family, FamilySpec::Bernoulli {});
    assert_eq!(cfg.family.of(4).unwrap().0, 1);
    assert!(cfg.family.of(0).is_none());
    assert_eq!(cfg.objective(), Objective::MixedNll);
    assert_eq!(cfg.family.eta_width(), 2);
    // The sites come from the item-feature table: one row per item id 0..items, item 0 zeros.
    let efa_model::ModelConfig::Efa(c) = &cfg.model else {
        panic!()
    };
    let sites = &c.continuous.as_ref().unwrap().sites;
    assert_eq!(sites.len(), 6);
    assert_eq!(sites[0], vec![0.0, 0.0]);
    assert_eq!(sites[5], vec![42.5, -99.0]);
    // A single [family] table is every item's family.
    let one = CFG.replace(
        "[[family]]\nitems = [1, 2]\nkind = \"gaussian\"\n[[family]]\nitems = [3, 4]\nkind = \"bernoulli\"\n[[family]]\nitems = [5, 5]\nkind = \"poisson\"",
        "[family]\nkind = \"gaussian\"",
    );
    let items = read_item_csv(&file("one-items", ITEMS)).unwrap();
    let (cfg, _) =
        UserConfig::from_toml_with_items(&one, Path::new("m.toml"), Some(&items)).unwrap();
    assert_eq!(cfg.family, Families::All(FamilySpec::Gaussian {}));
    assert_eq!(cfg.objective(), Objective::Nll(Family::Gaussian));
}

#[test]
fn samples_carry_values_lags_item_ids_and_each_targets_family() {
    let (cfg, p) = setup("samples", CFG, DATA).unwrap();
    let items = read_item_csv(&file("samples-items", ITEMS)).unwrap();
    let data = read_csv_with(&p, &cfg, Some(&items)).unwrap();
    let s = build(&data, &cfg);
    // Targets: the lag-0 rows only (a: 3, b: 2), in file order.
    let lines: Vec<usize> = s.targets.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![2, 3, 4, 7, 8]);
    let d = efa_train::userdata::build_samples(&data, &cfg);
    assert_eq!(d.tokens.row(0).to_vec(), vec![1, 3, 5, 1, 3]);
    assert_eq!(d.tokens.row(3).to_vec(), vec![2, 4, 0, 0, 0]);
    assert_eq!(d.lengths, vec![5, 5, 5, 2, 2]);
    // Values as weights, the target's own value hidden (0), lags as `values`.
    let w = d.weights.as_ref().unwrap();
    assert_eq!(w.row(1).to_vec(), vec![12.5, 0.0, 4.0, 11.0, 0.0]);
    assert_eq!(w.row(4).to_vec(), vec![9.25, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(
        d.values.as_ref().unwrap().row(0).to_vec(),
        vec![0, 0, 0, 1, 1]
    );
    assert_eq!(d.pred_idx, vec![0, 1, 2, 0, 1]);
    let Targets::Mixed { y, families } = &d.targets else {
        panic!("{:?}", d.targets)
    };
    assert_eq!(y, &vec![12.5, 1.0, 4.0, 9.25, 0.0]);
    assert_eq!(
        families,
        &vec![
            Family::Gaussian,
            Family::Bernoulli,
            Family::Poisson,
            Family::Gaussian,
            Family::Bernoulli
        ]
    );
}

#[test]
fn data_errors_name_file_line_and_field() {
    // An item no family covers.
    let e = read_err("nofamily", "seq,order,item,value\na,0,1,1.5\na,1,0,2\n");
    assert!(e.starts_with("DATA:3: field `item`"), "{e}");
    assert!(e.contains("item 0 has no family"), "{e}");
    // A value outside its item's family.
    let e = read_err("support", "seq,order,item,value\na,0,1,1.5\na,1,3,2\n");
    assert!(
        e.starts_with("DATA:3: field `value`") && e.contains("bernoulli"),
        "{e}"
    );
    // A lag row whose sequence has no lag-0 row.
    let e = read_err(
        "lagonly",
        "seq,order,item,value,lag\na,0,1,1.5,0\na,1,3,1,0\nb,0,1,2.5,1\nb,1,3,0,1\n",
    );
    assert!(e.starts_with("DATA:4: field `lag`"), "{e}");
    assert!(e.contains("lag-0 rows") && e.contains("`b`"), "{e}");
    // A lag beyond the lag embedding, and a lag row marked as a target.
    let e = read_err(
        "lagbig",
        "seq,order,item,value,lag\na,0,1,1.5,0\na,1,3,1,2\n",
    );
    assert!(
        e.starts_with("DATA:3: field `lag`") && e.contains("lag_rows"),
        "{e}"
    );
    let e = read_err(
        "lagtarget",
        "seq,order,item,value,lag,target\na,0,1,1.5,0,1\na,1,3,1,1,1\n",
    );
    assert!(
        e.starts_with("DATA:3: field `target`") && e.contains("context only"),
        "{e}"
    );
    // An item the feature table lacks (item 0 here has a family but no features).
    let cfg0 = CFG.replace("items = [1, 2]", "items = [0, 2]");
    let items = read_item_csv(&file("missing-items", ITEMS)).unwrap();
    let (cfg, _) =
        UserConfig::from_toml_with_items(&cfg0, Path::new("m.toml"), Some(&items)).unwrap();
    let p = file("missing", "seq,order,item,value\na,0,1,1.5\na,1,0,2\n");
    let e = read_csv_with(&p, &cfg, Some(&items))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}:3: field `item`", p.display()))
            && e.contains("no row in the item-feature table"),
        "{e}"
    );
}

#[test]
fn item_table_errors_name_file_line_and_field() {
    let p = file("badfeat", "item,lat,lon\n1,40.0,-100.0\n2,north,-99.0\n");
    let e = read_item_csv(&p).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}:3: field `lat`", p.display())),
        "{e}"
    );
    let p = file("dupitem", "item,lat,lon\n1,40.0,-100.0\n1,41.0,-99.0\n");
    let e = read_item_csv(&p).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}:3: field `item`", p.display())) && e.contains("line 2"),
        "{e}"
    );
    let p = file("nofeat", "item\n1\n");
    let e = read_item_csv(&p).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}:1: field `header`", p.display())),
        "{e}"
    );
    // An item id beyond the model's items, named where the table meets the configuration.
    let p = file("bigitem", "item,lat,lon\n9,40.0,-100.0\n");
    let t = read_item_csv(&p).unwrap();
    let e = UserConfig::from_toml_with_items(CFG, Path::new("m.toml"), Some(&t))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{}:2: field `item`", p.display())),
        "{e}"
    );
    // Continuous inputs without a table.
    let e = UserConfig::from_toml(CFG, Path::new("m.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("m.toml: field `model.efa.continuous.sites`"),
        "{e}"
    );
}

#[test]
fn configuration_errors_name_the_field() {
    let items = read_item_csv(&file("cfg-items", ITEMS)).unwrap();
    let err = |text: &str| {
        UserConfig::from_toml_with_items(text, Path::new("m.toml"), Some(&items))
            .unwrap_err()
            .to_string()
    };
    // Overlapping ranges, a range beyond the items.
    let e = err(&CFG.replace("items = [3, 4]", "items = [2, 4]"));
    assert!(
        e.starts_with("m.toml: field `family[1].items`") && e.contains("overlaps family[0]"),
        "{e}"
    );
    let e = err(&CFG.replace("items = [5, 5]", "items = [5, 6]"));
    assert!(e.starts_with("m.toml: field `family[2].items`"), "{e}");
    // η narrower than the widest family.
    let e = err(&CFG.replace("out_dim = 2", "out_dim = 1"));
    assert!(e.starts_with("m.toml: field `model.efa.out_dim`"), "{e}");
    // A variance that underflows the f32 training dtype.
    let e = err(&CFG.replace(
        "kind = \"gaussian\"",
        "kind = \"gaussian_known_var\"\ns2 = 1e-50",
    ));
    assert!(
        e.starts_with("m.toml: field `family[0].s2`") && e.contains("f32"),
        "{e}"
    );
    let one = "[family]\nkind = \"gaussian_known_var\"\ns2 = 1e-40\n".to_string()
        + &CFG[CFG.find("[model.efa]").unwrap()..];
    let e = err(&one.replace("out_dim = 2", "out_dim = 1"));
    assert!(e.starts_with("m.toml: field `family.s2`"), "{e}");
    // A learning rate that is 0 in f32.
    let e = err(&CFG.replace("lr = 0.01", "lr = 1e-50"));
    assert!(e.starts_with("m.toml: field `train.lr`"), "{e}");
    // A paper loss needs its one family.
    let e = err(&("loss = \"mse\"\n".to_string() + CFG));
    assert!(e.starts_with("m.toml: field `loss`"), "{e}");
}

#[test]
fn the_papers_losses_map_the_output_to_their_natural_parameter() {
    use efa_train::userdata::UserLoss;
    let p = Family::Poisson;
    // v1: λ = e^z, η = z; v2: μ = 1 + e^z, η = ln μ; mse: η = z / s2 (z is the mean).
    assert_eq!(UserLoss::PoissonV1.natural(&p, &[0.7]), vec![0.7]);
    let v2 = UserLoss::PoissonV2.natural(&p, &[0.7])[0];
    assert!((v2 - (1.0 + 0.7f64.exp()).ln()).abs() < 1e-15);
    let g = Family::GaussianKnownVar { s2: 4.0 };
    assert_eq!(UserLoss::Mse.natural(&g, &[2.0]), vec![0.5]);
    // The default is the family's link of the leading columns.
    let gauss = UserLoss::Nll.natural(&Family::Gaussian, &[1.0, 0.0, 9.0]);
    assert_eq!(
        gauss,
        efa_expfam::link::natural(&Family::Gaussian, &[1.0, 0.0])
    );
    assert_eq!(
        UserLoss::PoissonV1.objective(&Families::All(FamilySpec::Poisson {})),
        Objective::PoissonLogEps
    );
    assert_eq!(
        UserLoss::PoissonV2.objective(&Families::All(FamilySpec::Poisson {})),
        Objective::PoissonOnePlus
    );
}

#[test]
fn a_target_column_selects_exactly_the_marked_rows() {
    let data = "seq,order,item,value,lag,target\n\
a,0,1,12.5,0,0\n\
a,1,3,1,0,1\n\
a,2,5,4,0,0\n\
a,3,1,11.0,1,0\n\
b,0,2,9.25,0,1\n\
b,1,4,0,0,1\n";
    let (cfg, p) = setup("target", CFG, data).unwrap();
    let items = read_item_csv(&file("target-items", ITEMS)).unwrap();
    let s = build(&read_csv_with(&p, &cfg, Some(&items)).unwrap(), &cfg);
    let lines: Vec<usize> = s.targets.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![3, 6, 7]);
    // A sequence without any target is an error naming it.
    let e = read_err(
        "notarget",
        "seq,order,item,value,target\na,0,1,1.5,0\na,1,3,1,0\n",
    );
    assert!(
        e.starts_with("DATA:2: field `target`") && e.contains("no target row"),
        "{e}"
    );
    let e = read_err(
        "badtarget",
        "seq,order,item,value,target\na,0,1,1.5,yes\na,1,3,1,1\n",
    );
    assert!(e.starts_with("DATA:2: field `target`"), "{e}");
}
