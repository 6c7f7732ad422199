//! Continuous inputs with large site tables: the table checked against memory before it is
//! built, and the site MLP run over the sites a batch reads, not the whole table.

use crate::common::{fixture, s};
use crate::sizes::{efa_limited, fails};
use efa_testkit::scratch;

/// The mixed-sites model (`fixtures/train/mixed_sites.toml`) with `items` sites, site MLP
/// width `hidden`, no item embedding and one epoch, written to `dir`.
fn config(dir: &std::path::Path, items: usize, hidden: usize) -> std::path::PathBuf {
    let base = std::fs::read_to_string(fixture("mixed_sites.toml")).unwrap();
    let text = base
        .replace("items = 25 ", &format!("items = {items} "))
        .replace("hidden = 32", &format!("hidden = {hidden}"))
        .replace("item_embedding = true", "item_embedding = false")
        .replace("max_epochs = 150", "max_epochs = 1");
    let cfg = dir.join("sites.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn a_site_table_that_cannot_fit_in_memory_is_refused_before_it_is_built() {
    // 2·10⁷ items × 2 features passes the size check (4·10⁷ values), but the table with its
    // copies (about 5.4 GB) does not fit the 4 GiB address space the process runs in: refused
    // naming the field before the table is built (it aborted on allocation before), whatever
    // memory the machine has (the address-space limit counts as available memory).
    let dir = scratch::scratch("efa-sizes-site-memory");
    let cfg = config(&dir, 20_000_000, 32);
    let (items, data) = (
        fixture("mixed_sites_items.csv"),
        fixture("mixed_sites_train.csv"),
    );
    let out = dir.join("out");
    for cmd in ["train", "audit"] {
        let mut args = vec![cmd, "--config", s(&cfg), "--items", s(&items)];
        args.extend(["--data", s(&data)]);
        if cmd == "train" {
            args.extend(["--out", s(&out), "--quiet"]);
        }
        let o = efa_limited(4 << 20, &args);
        fails(
            &o,
            &format!(
                "{}: field `model.efa.items`: 20000000 item rows × 2 feature columns of {}: \
                 the site table needs about 5.4 GB (the table and its copies in the size \
                 check and the model file), but 4.3 GB is available (",
                cfg.display(),
                items.display()
            ),
            "address-space limit",
        );
    }
    assert!(!out.exists(), "nothing was written");
}

#[test]
fn a_model_with_a_million_sites_trains_in_three_gib() {
    // The training plans ran the site MLP over the whole site table at every micro-batch:
    // with 10⁶ sites and a hidden layer of 512, 10⁹ floats per tape and as many gradients,
    // which the memory check refused (and at smaller widths an epoch took a minute). The MLP
    // now runs over the sites the batch reads, a few dozen here.
    let dir = scratch::scratch("efa-sizes-million-sites");
    let cfg = config(&dir, 1_000_000, 512);
    let out = dir.join("out");
    let (items, data) = (
        fixture("mixed_sites_items.csv"),
        fixture("mixed_sites_train.csv"),
    );
    let args = [
        "train",
        "--config",
        s(&cfg),
        "--items",
        s(&items),
        "--data",
        s(&data),
        "--out",
        s(&out),
        "--quiet",
    ];
    let o = efa_limited(3 << 20, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.join("model.safetensors").exists(),
        "the run wrote its model"
    );
}
