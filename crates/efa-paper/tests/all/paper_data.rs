//! The paper's data files against their fingerprints: a missing file says where the data set
//! comes from, another file is refused naming it and what differs (size, else SHA-256), and
//! `allow_other_data` lists it instead. The check of the paper's own files is ignored unless
//! asked for (it reads `EFA_DATA`, else `../shared/data` beside the repository).

use efa_paper::paper_data::{verify, DataSet, Differs, MOVIELENS};
use efa_paper::{movielens, DataOptions, Experiment, PaperError};
use std::path::{Path, PathBuf};

use efa_testkit::scratch;

fn paper_data() -> PathBuf {
    efa_testkit::paper_data()
}

fn u_data(dir: &Path, bytes: &[u8]) -> PathBuf {
    std::fs::create_dir_all(dir.join("movielens")).unwrap();
    let p = dir.join("movielens").join("u.data");
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn a_missing_file_says_where_the_data_set_comes_from() {
    let dir = scratch::scratch("efa-pd-missing");
    let e = verify(&dir, DataSet::Instacart, false).unwrap_err();
    match &e {
        PaperError::MissingData { path, how } => {
            assert_eq!(path, &dir.join("instacart").join("items.csv"));
            assert!(how.contains("Instacart Market Basket Analysis"), "{how}");
        }
        e => panic!("{e}"),
    }
    // The same with other data allowed: a missing file is never "other data".
    assert!(matches!(
        verify(&dir, DataSet::Instacart, true),
        Err(PaperError::MissingData { .. })
    ));
}

#[test]
fn a_file_of_another_size_is_refused_naming_it_and_both_sizes() {
    let dir = scratch::scratch("efa-pd-size");
    let file = u_data(&dir, b"1\t2\t3\t4\n");
    let e = verify(&dir, DataSet::Movielens, false).unwrap_err();
    let PaperError::OtherData(m) = &e else {
        panic!("{e}")
    };
    assert_eq!(m.file, file);
    assert_eq!(
        m.differs,
        Differs::Size {
            expected: 1_979_173,
            found: 8
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "{}: 8 bytes, but the expected file has 1979173 bytes. It is not the file the \
             paper used, so the results would not be the paper's; set `allow_other_data` to \
             run on it anyway, with the results marked as not the paper's",
            file.display()
        )
    );
}

#[test]
fn a_file_of_the_same_size_with_other_bytes_is_refused_naming_both_hashes() {
    let dir = scratch::scratch("efa-pd-hash");
    let file = u_data(&dir, &vec![b'x'; MOVIELENS[0].size as usize]);
    let e = verify(&dir, DataSet::Movielens, false).unwrap_err();
    let PaperError::OtherData(m) = &e else {
        panic!("{e}")
    };
    let found = efa_data::sha256::hex(&efa_data::sha256::sha256(&vec![
        b'x';
        MOVIELENS[0].size as usize
    ]));
    assert_eq!(
        m.differs,
        Differs::Sha256 {
            expected: MOVIELENS[0].sha256.into(),
            found: found.clone()
        }
    );
    assert!(
        e.to_string().starts_with(&format!(
            "{}: SHA-256 {found}, but the expected file (of the same size) has SHA-256 {}. ",
            file.display(),
            MOVIELENS[0].sha256
        )),
        "{e}"
    );
}

#[test]
fn allowed_other_data_is_listed_not_refused() {
    let dir = scratch::scratch("efa-pd-allow");
    let file = u_data(&dir, b"1\t2\t3\t4\n");
    let d = verify(&dir, DataSet::Movielens, true).unwrap();
    assert!(!d.is_papers());
    assert_eq!(d.other.len(), 1);
    assert_eq!(d.other[0].file, file);
    assert_eq!(d.dir, dir.to_path_buf());
}

#[test]
fn an_experiment_refuses_other_data_before_reading_it() {
    // Not even valid u.data: the fingerprint is checked before the file is parsed.
    let dir = scratch::scratch("efa-pd-exp");
    let file = u_data(&dir, b"not a ratings file\n");
    let options = movielens::RatingsOptions {
        data: DataOptions {
            data: Some(dir.to_path_buf()),
            ..DataOptions::default()
        },
        ..movielens::RatingsOptions::default()
    };
    match movielens::Ratings::new(&options) {
        Err(PaperError::OtherData(m)) => assert_eq!(m.file, file),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted another u.data"),
    }
}

#[test]
fn fingerprints_are_well_formed_and_distinct() {
    let mut paths = Vec::new();
    for set in [DataSet::Movielens, DataSet::Instacart, DataSet::Temperature] {
        for fp in set.files() {
            assert_eq!(fp.sha256.len(), 64, "{}", fp.path);
            assert!(
                fp.sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{}",
                fp.path
            );
            assert!(fp.size > 0);
            paths.push(fp.path);
        }
    }
    let n = paths.len();
    paths.sort_unstable();
    paths.dedup();
    assert_eq!(paths.len(), n);
}

#[test]
#[ignore = "needs the paper data (EFA_DATA)"]
fn the_papers_files_match_their_fingerprints() {
    let dir = paper_data();
    for set in [DataSet::Movielens, DataSet::Instacart, DataSet::Temperature] {
        let d = verify(&dir, set, false).unwrap_or_else(|e| panic!("{set:?}: {e}"));
        assert!(d.is_papers());
    }
    // And an experiment built on them is not marked.
    let options = movielens::ItemsOptions {
        data: DataOptions {
            data: Some(dir),
            ..DataOptions::default()
        },
        ..movielens::ItemsOptions::default()
    };
    assert!(movielens::Items::new(&options)
        .unwrap()
        .other_data()
        .is_empty());
}
