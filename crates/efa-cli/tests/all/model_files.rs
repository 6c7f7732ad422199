//! Files given as a model (`--model`) or checkpoint that are none: they are refused after
//! their header, never read whole first.

use efa_testkit::scratch;

use crate::audit_inputs::trained;
use crate::common;
use crate::sizes::{efa_limited, fails};
use common::{efa, fixture, s};

#[test]
fn a_file_that_is_no_model_is_refused_after_its_header_not_read_whole() {
    // The whole file was read before its header was looked at: an endless stream or a large
    // CSV given as --model took memory as large as the file (under a 2 GiB address-space
    // limit: "cannot read: out of memory"; without one, /dev/zero took all of it).
    let dir = scratch::scratch("efa-model-files");
    let data = fixture("counts_train.csv");
    let limit = 2 << 20; // KiB
    let not_model = "not a valid safetensors file (truncated or corrupt?): ";
    let o = efa_limited(
        limit,
        &["evaluate", "--model", "/dev/zero", "--data", s(&data)],
    );
    fails(&o, &format!("/dev/zero: {not_model}"), "");
    // A 16 GiB CSV (sparse): its first 8 bytes, read as the header's length, are too large.
    let csv = dir.join("big.csv");
    let f = std::fs::File::create(&csv).unwrap();
    std::io::Write::write_all(&mut &f, b"seq,order,item,value\n").unwrap();
    f.set_len(16 << 30).unwrap();
    for cmd in ["evaluate", "predict"] {
        let o = efa_limited(limit, &[cmd, "--model", s(&csv), "--data", s(&data)]);
        fails(
            &o,
            &format!("{}: {not_model}HeaderTooLarge", csv.display()),
            "",
        );
    }
    // A model file is read as far as its header declares, and one byte more: bytes past
    // its end are still refused, a model without them still loads.
    let run = dir.join("run");
    let cfg = fixture("efa_poisson.toml");
    trained(&cfg, &data, &run, &[]);
    let model = run.join("model.safetensors");
    let longer = dir.join("longer.safetensors");
    let mut bytes = std::fs::read(&model).unwrap();
    bytes.extend_from_slice(b"\0\0\0\0\0\0\0\0");
    std::fs::write(&longer, &bytes).unwrap();
    let o = efa(&["evaluate", "--model", s(&longer), "--data", s(&data)]);
    fails(
        &o,
        &format!("{}: {not_model}MetadataIncompleteBuffer", longer.display()),
        "",
    );
    let o = efa(&["evaluate", "--model", s(&model), "--data", s(&data)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn an_item_table_given_with_a_model_without_continuous_inputs_names_both_files() {
    // `efa evaluate --items` with a model that has no continuous inputs named neither the
    // model file nor the table: "field `model.efa.continuous`: an item-feature table was
    // given, …".
    let dir = scratch::scratch("efa-model-items");
    let data = fixture("counts_train.csv");
    let run = dir.join("run");
    let cfg = fixture("efa_poisson.toml");
    trained(&cfg, &data, &run, &[]);
    let items = fixture("mixed_sites_items.csv");
    for cmd in ["evaluate", "predict"] {
        let o = efa(&[
            cmd,
            "--model",
            s(&run),
            "--items",
            s(&items),
            "--data",
            s(&data),
        ]);
        fails(
            &o,
            &format!(
                "{}: metadata `efa.config`: field `model.efa.continuous`: the model has no \
                 continuous inputs, but the item-feature table {} was given",
                run.join("model.safetensors").display(),
                items.display()
            ),
            "",
        );
    }
}
