//! Integrity of model files and checkpoints: per-tensor CRC-32 checksums catch a flipped bit
//! anywhere (header, weights, Adam moments), non-finite values are refused naming the tensor
//! and index, files without checksums are refused, a failed atomic write leaves no temporary
//! file.

use efa_model::{Params, Samples};
use efa_train::checkpoint::{
    load_model, read_meta, save_model, write_atomic, Checkpoint, CheckpointPolicy,
};
use efa_train::fsio::crc32::crc32;
use efa_train::userdata::UserConfig;
use efa_train::Evaluator;
use efa_train::TrainError;
use efa_train::{fit, FitOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use efa_testkit::scratch;

use crate::poisson_fixture;
use poisson_fixture::setup;

/// Trains the fixture model with a checkpoint after every epoch, stopping (as a crash would)
/// after epoch `stop_after`; returns the final parameters.
fn train_to(cfg: &UserConfig, train: &Samples, val: &Samples, ck: &Path, stop_after: usize) {
    let mut p = cfg.model.init::<f32>(cfg.init_seed);
    let objective = cfg.objective();
    let mut hook = |log: &efa_train::EpochLog| {
        if log.epoch == stop_after {
            Err(TrainError::Resume("stop".into()))
        } else {
            Ok(())
        }
    };
    let opts = FitOptions {
        checkpoint: Some(CheckpointPolicy {
            path: ck.to_path_buf(),
            every: 1,
            meta: BTreeMap::from([("efa.note".into(), "test".into())]),
        }),
        on_epoch: Some(&mut hook),
        ..Default::default()
    };
    let r = fit(
        &Evaluator::new(&cfg.model, &objective),
        &mut p,
        train,
        val,
        &cfg.train,
        opts,
    );
    assert_eq!(r.unwrap_err().to_string(), "cannot resume: stop");
}

/// The byte ranges of the tensors of a safetensors file, read with the safetensors crate:
/// (name, absolute start, absolute end).
fn tensor_ranges(bytes: &[u8]) -> (usize, Vec<(String, usize, usize)>) {
    let (n, meta) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
    let base = 8 + n;
    let mut v: Vec<_> = meta
        .tensors()
        .into_iter()
        .map(|(k, info)| (k, base + info.data_offsets.0, base + info.data_offsets.1))
        .collect();
    v.sort_by_key(|t| t.1);
    (base, v)
}

/// Flips one bit (bit `offset % 8`) at every byte of the JSON header, every third byte of
/// tensor data and the first and last byte of every tensor, and all 64 bits of the header
/// length; expects `load` to fail with a message naming the file, and the tensor for flips
/// in tensor data. Returns how many flips were tried.
fn flip_everywhere(
    good: &Path,
    dir: &Path,
    load: &dyn Fn(&Path) -> Result<(), TrainError>,
) -> usize {
    let bytes = std::fs::read(good).unwrap();
    let (base, ranges) = tensor_ranges(&bytes);
    let bad = dir.join("flipped.safetensors");
    let mut flips: Vec<(usize, u8)> = (0..64).map(|b| (b / 8, 1u8 << (b % 8))).collect();
    let ends = ranges.iter().flat_map(|r| [r.1, r.2 - 1]);
    let offsets = (8..base).chain((base..bytes.len()).step_by(3)).chain(ends);
    flips.extend(offsets.map(|i| (i, 1u8 << (i % 8))));
    for &(at, mask) in &flips {
        let mut b = bytes.clone();
        b[at] ^= mask;
        // A fresh file each time (rewriting one in place makes ext4 flush it on close).
        let _ = std::fs::remove_file(&bad);
        std::fs::write(&bad, &b).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(&bad)));
        let e = match r {
            Err(_) => panic!("panic loading a file with byte {at} ^ {mask:#04x}"),
            Ok(Ok(())) => panic!("byte {at} ^ {mask:#04x} accepted ({} bytes)", bytes.len()),
            Ok(Err(e)) => e.to_string(),
        };
        assert!(e.starts_with(&bad.display().to_string()), "byte {at}: {e}");
        if at >= base {
            let (name, ..) = ranges
                .iter()
                .find(|(_, s, e)| (*s..*e).contains(&at))
                .unwrap();
            assert!(
                e.contains(&format!("tensor `{name}`: checksum mismatch")),
                "byte {at} in `{name}`: {e}"
            );
        }
    }
    flips.len()
}

#[test]
fn a_flipped_bit_anywhere_in_a_checkpoint_or_model_file_is_an_error() {
    let (cfg, train, val) = setup();
    let dir = scratch::scratch("efa-ckflip");
    let ck = dir.join("ck.safetensors");
    train_to(&cfg, &train, &val, &ck, 3);
    let template = cfg.model.init::<f32>(0);
    let good = Checkpoint::load(&ck, &template).unwrap();
    assert_eq!(good.state.epoch, 3);
    // The file holds every tensor group: parameters, best parameters, Adam state.
    let (_, ranges) = tensor_ranges(&std::fs::read(&ck).unwrap());
    let names: Vec<&str> = ranges.iter().map(|r| r.0.as_str()).collect();
    assert!(names.contains(&"params/item_emb") && names.contains(&"best/out.b"));
    assert!(names.contains(&"optimizer/adam"));
    let n = flip_everywhere(&ck, &dir, &|p| Checkpoint::load(p, &template).map(|_| ()));
    assert!(n > 5_000, "{n} flips");

    let model = dir.join("model.safetensors");
    let meta = BTreeMap::from([("efa.config".to_string(), "{\"x\": 1}".to_string())]);
    save_model(&model, &good.best, &meta).unwrap();
    let (back, m) = load_model(&model, &template).unwrap();
    assert_eq!(
        m, meta,
        "checksums are not part of the metadata handed back"
    );
    assert_eq!(
        format!("{:?}", back.iter().collect::<Vec<_>>()),
        format!("{:?}", good.best.iter().collect::<Vec<_>>())
    );
    flip_everywhere(&model, &dir, &|p| load_model(p, &template).map(|_| ()));
    // read_meta verifies the checksums too: a flip in a weight is caught before the
    // configuration is trusted.
    let e = flip_one(
        &model,
        &dir,
        tensor_ranges(&std::fs::read(&model).unwrap()).1[0].1,
    );
    assert!(read_meta(&e)
        .unwrap_err()
        .to_string()
        .contains("checksum mismatch"));
}

fn flip_one(path: &Path, dir: &Path, at: usize) -> PathBuf {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x10;
    let p = dir.join("one.safetensors");
    std::fs::write(&p, b).unwrap();
    p
}

#[test]
fn the_stored_checksums_are_crc32_of_each_tensor_and_of_the_metadata() {
    let dir = scratch::scratch("efa-ckcrc");
    let mut p = Params::<f32>::new();
    p.insert(
        "a",
        ndarray::ArrayD::from_shape_vec(vec![2], vec![1.0, -2.5]).unwrap(),
    );
    let path = dir.join("m.safetensors");
    save_model(&path, &p, &BTreeMap::from([("k".into(), "v".into())])).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::read_metadata(&bytes).unwrap().1;
    let meta = st.metadata().clone().unwrap();
    // Tensor `a`: the little-endian bytes of 1.0f32 = 0x3F800000 and −2.5f32 = 0xC0200000.
    let data = [0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0];
    assert_eq!(meta["efa.crc32/a"], format!("{:08x}", crc32(&data)));
    // Metadata: the one other entry, as u64 LE lengths and bytes.
    let mut enc = vec![1, 0, 0, 0, 0, 0, 0, 0, b'k'];
    enc.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, b'v']);
    assert_eq!(meta["efa.meta_crc32"], format!("{:08x}", crc32(&enc)));
    assert_eq!(meta.len(), 3);
    // The same contents give the same bytes (sorted header).
    let again = dir.join("m2.safetensors");
    save_model(&again, &p, &BTreeMap::from([("k".into(), "v".into())])).unwrap();
    assert_eq!(std::fs::read(&again).unwrap(), bytes);
}

#[test]
fn files_without_checksums_are_refused() {
    let (cfg, _, _) = setup();
    let dir = scratch::scratch("efa-ckold");
    let template = cfg.model.init::<f32>(0);
    // A model file as written before checksums: the safetensors crate, metadata `efa.config`.
    let owned: Vec<(String, Vec<usize>, Vec<u8>)> = template
        .iter()
        .map(|(n, v)| {
            let b = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            (n.to_string(), v.shape().to_vec(), b)
        })
        .collect();
    let views: Vec<_> = owned
        .iter()
        .map(|(n, s, b)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b);
            (n.clone(), v.unwrap())
        })
        .collect();
    let meta = std::collections::HashMap::from([("efa.config".to_string(), "{}".to_string())]);
    let old = dir.join("old.safetensors");
    std::fs::write(&old, safetensors::serialize(views, &Some(meta)).unwrap()).unwrap();
    let want = format!(
        "{}: the file has no checksums (metadata `efa.crc32/<tensor>` and `efa.meta_crc32`): \
         it was written by an efa from before checksums or by another tool, and damage to it \
         could not be detected; train again to write a checked file",
        old.display()
    );
    assert_eq!(load_model(&old, &template).unwrap_err().to_string(), want);
    assert_eq!(read_meta(&old).unwrap_err().to_string(), want);
}

/// Walks the `efa_optim::Adam::save` layout (its module docs: 102 bytes of header, then per
/// parameter `u64 name length, name, u64 ndim, u64 × ndim shape, u64 len, len × f32 m,
/// len × f32 v`) to the byte offset of value `flat` of moment `which` (0 = m, 1 = v) of
/// parameter number `param`.
fn adam_value_offset(bytes: &[u8], param: usize, which: usize, flat: usize) -> usize {
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..8], b"EFAADAM1");
    let mut o = 8 + 1 + 8 + 3 * 8 + 1 + (1 + 8) + (1 + 8) + 1 + (1 + 8 + 8 + 8 + 8);
    assert_eq!(o, 94);
    o += 8; // n_params
    for _ in 0..param {
        o += 8 + u64_at(o);
        o += 8 + 8 * u64_at(o);
        o += 8 + 2 * 4 * u64_at(o);
    }
    o += 8 + u64_at(o);
    o += 8 + 8 * u64_at(o);
    let len = u64_at(o);
    o + 8 + which * 4 * len + 4 * flat
}

#[test]
fn non_finite_values_are_refused_naming_file_tensor_and_index() {
    let (cfg, train, val) = setup();
    let dir = scratch::scratch("efa-cknan");
    let ck_path = dir.join("ck.safetensors");
    train_to(&cfg, &train, &val, &ck_path, 2);
    let template = cfg.model.init::<f32>(0);
    let ck = Checkpoint::load(&ck_path, &template).unwrap();
    let bad = dir.join("bad.safetensors");
    let expect = |ck: &Checkpoint, msg: &str| {
        ck.save(&bad).unwrap();
        let e = Checkpoint::load(&bad, &template).unwrap_err().to_string();
        assert_eq!(e, format!("{}: {msg}", bad.display()));
    };
    // item_emb is [6, 8]: flat index 8·2 + 3 = 19 is [2, 3].
    let mut c = ck.clone();
    c.params
        .get_mut("item_emb")
        .unwrap()
        .as_slice_mut()
        .unwrap()[19] = f32::NAN;
    expect(&c, "tensor `params/item_emb` holds NaN at flat index 19 = [2, 3] (shape [6, 8]); model values must be finite");
    let mut c = ck.clone();
    c.best.get_mut("out.b").unwrap().as_slice_mut().unwrap()[0] = f32::NEG_INFINITY;
    expect(
        &c,
        "tensor `best/out.b` holds -inf at flat index 0 = [0] (shape [1]); model values must be finite",
    );
    // Adam moments: parameter 0 is item_emb (creation order), value [1, 0] = flat 8.
    let names: Vec<&str> = template.iter().map(|(n, _)| n).collect();
    assert_eq!(names[0], "item_emb");
    let mut c = ck.clone();
    let o = adam_value_offset(&ck.adam, 0, 0, 8);
    c.adam[o..o + 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    expect(&c, "tensor `optimizer/adam`: first moment `m` of `item_emb` holds inf at flat index 8 = [1, 0]; it must be finite");
    let mut c = ck.clone();
    let o = adam_value_offset(&ck.adam, 1, 1, 5);
    c.adam[o..o + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let (n1, s1) = template
        .iter()
        .nth(1)
        .map(|(n, v)| (n.to_string(), v.shape().to_vec()))
        .unwrap();
    let idx = efa_train::checkpoint::unravel(5, &s1);
    expect(&c, &format!("tensor `optimizer/adam`: second moment `v` of `{n1}` holds NaN at flat index 5 = {idx:?}; it must be finite and ≥ 0"));
    let mut c = ck.clone();
    c.adam[o..o + 4].copy_from_slice(&(-1.0f32).to_le_bytes());
    expect(&c, &format!("tensor `optimizer/adam`: second moment `v` of `{n1}` holds -1 at flat index 5 = {idx:?}; it must be finite and ≥ 0"));
    // A model file too.
    let model = dir.join("model.safetensors");
    let mut p = ck.params.clone();
    p.get_mut("out.w").unwrap().as_slice_mut().unwrap()[0] = f32::NAN;
    save_model(&model, &p, &BTreeMap::new()).unwrap();
    let shape = template.get("out.w").unwrap().shape().to_vec();
    let idx = efa_train::checkpoint::unravel(0, &shape);
    assert_eq!(
        load_model(&model, &template).unwrap_err().to_string(),
        format!("{}: tensor `out.w` holds NaN at flat index 0 = {idx:?} (shape {shape:?}); model values must be finite", model.display())
    );
}

#[test]
fn unravel_is_row_major() {
    use efa_train::checkpoint::unravel;
    assert_eq!(unravel(0, &[]), Vec::<usize>::new());
    assert_eq!(unravel(19, &[6, 8]), vec![2, 3]);
    // 2·12 + 1·4 + 3 = 31 in [3, 3, 4].
    assert_eq!(unravel(31, &[3, 3, 4]), vec![2, 1, 3]);
}

#[test]
fn a_failed_atomic_write_names_the_file_asked_for_not_its_temporary() {
    // A write into a directory that does not exist named `<file>.tmp`, a file the caller
    // never asked for (`efa predict --out missing/pred.csv`: "missing/pred.csv.tmp: cannot
    // create").
    let dir = scratch::scratch("efa-ckmissing");
    let target = dir.join("missing").join("pred.csv");
    let e = write_atomic(&target, b"abc").unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}: cannot create (through its temporary `<file>.tmp`): ",
            target.display()
        )),
        "{e}"
    );
    assert!(!e.contains("pred.csv.tmp"), "{e}");
}

#[test]
fn a_failed_atomic_write_leaves_no_temporary_file() {
    let dir = scratch::scratch("efa-cktmp");
    // The target is a non-empty directory: creating and writing `<target>.tmp` works, the
    // rename over the directory fails.
    let target = dir.join("model.safetensors");
    std::fs::create_dir_all(target.join("inside")).unwrap();
    let e = write_atomic(&target, b"abc").unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}: cannot rename the temporary file over it: ",
            target.display()
        )),
        "{e}"
    );
    assert!(
        !dir.join("model.safetensors.tmp").exists(),
        "temporary file left behind"
    );
    assert!(target.join("inside").is_dir());
    // Reserved metadata keys are refused before anything is written.
    let p = Params::<f32>::new();
    let m = BTreeMap::from([("efa.crc32/x".to_string(), "0".to_string())]);
    let e = save_model(&dir.join("m.safetensors"), &p, &m).unwrap_err();
    assert_eq!(
        e.to_string(),
        "field `checkpoint metadata`: key `efa.crc32/x` is reserved for checksums"
    );
    assert!(!dir.join("m.safetensors").exists());
}
