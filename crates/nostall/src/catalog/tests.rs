//! The catalog's tests: scans, the saved index, and where and when it is reused.

use std::env;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;

use super::index::{checksum, put_table, put_u64, MAGIC, VERSION};
use super::store::cache_dir;
use super::*;
use std::os::unix::fs::symlink;
use std::time::{Duration, SystemTime};

/// Creates `files` (relative paths) under `root`, each holding its own path as bytes.
fn tree(root: &Path, files: &[&str]) {
    for file in files {
        let path = root.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, file.as_bytes()).unwrap();
    }
}

fn rel_paths(catalog: &Catalog) -> Vec<&str> {
    (0..catalog.len() as u64)
        .map(|id| catalog.relative_path(id))
        .collect()
}

fn labels(catalog: &Catalog) -> Vec<Option<u32>> {
    (0..catalog.len() as u64)
        .map(|id| catalog.label(id))
        .collect()
}

/// Sets a directory's modification time far in the past, so that a change made now
/// is seen as a change even on filesystems with coarse timestamps.
fn backdate(dir: &Path) {
    let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    File::open(dir).unwrap().set_modified(past).unwrap();
}

fn backdate_all(root: &Path) {
    backdate(root);
    for entry in fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            backdate_all(&path);
        }
    }
}

fn scan(root: &Path) -> (Catalog, ScanReport) {
    Catalog::scan(root, crate::sample::Modality::Image).unwrap()
}

#[test]
fn image_folder_labels_follow_sorted_class_names() {
    let dir = tempfile::tempdir().unwrap();
    tree(
        dir.path(),
        &[
            "dog/1.jpg",
            "cat/2.png",
            "cat/1.jpeg",
            "zebra/deep/er/3.jpg",
            "zebra/0.JPG",
        ],
    );
    let (catalog, report) = scan(dir.path());
    assert_eq!(report.layout, DatasetLayout::ImageFolder);
    assert_eq!(catalog.layout(), DatasetLayout::ImageFolder);
    assert_eq!(catalog.classes(), ["cat", "dog", "zebra"]);
    assert_eq!(
        rel_paths(&catalog),
        [
            "cat/1.jpeg",
            "cat/2.png",
            "dog/1.jpg",
            "zebra/0.JPG",
            "zebra/deep/er/3.jpg"
        ]
    );
    assert_eq!(
        labels(&catalog),
        [Some(0), Some(0), Some(1), Some(2), Some(2)]
    );
    assert_eq!(report.ignored, 0);
}

#[test]
fn order_within_a_class_matches_torchvision() {
    // torchvision sorts os.walk's directories by path, then files by name within each:
    // "a/b-c" sorts before "a/b/deep" because '-' < '/', but "a/x.jpg" comes first
    // because its directory "a" is a prefix of the others.
    let dir = tempfile::tempdir().unwrap();
    tree(
        dir.path(),
        &[
            "a/x.jpg",
            "a/b/y.jpg",
            "a/b/deep/w.jpg",
            "a/b-c/z.jpg",
            "a/b/a.jpg",
        ],
    );
    let (catalog, _) = scan(dir.path());
    assert_eq!(
        rel_paths(&catalog),
        [
            "a/x.jpg",
            "a/b/a.jpg",
            "a/b/y.jpg",
            "a/b-c/z.jpg",
            "a/b/deep/w.jpg"
        ]
    );
}

#[test]
fn empty_class_keeps_its_label() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["a/1.jpg", "c/1.jpg"]);
    fs::create_dir(dir.path().join("b")).unwrap();
    let (catalog, _) = scan(dir.path());
    assert_eq!(catalog.classes(), ["a", "b", "c"]);
    assert_eq!(labels(&catalog), [Some(0), Some(2)]);
}

#[test]
fn flat_layout_has_no_labels() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["b.png", "a.jpg", "c.jpeg"]);
    let (catalog, report) = scan(dir.path());
    assert_eq!(report.layout, DatasetLayout::Flat);
    assert!(catalog.classes().is_empty());
    assert_eq!(rel_paths(&catalog), ["a.jpg", "b.png", "c.jpeg"]);
    assert_eq!(labels(&catalog), [None, None, None]);
}

#[test]
fn accessors_report_paths_and_sizes() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["cls/one.jpg", "cls/three.png"]);
    let (catalog, _) = scan(dir.path());
    let root = fs::canonicalize(dir.path()).unwrap();
    assert_eq!(catalog.root(), root);
    assert_eq!(catalog.path(0), root.join("cls/one.jpg"));
    assert_eq!(catalog.size(0), "cls/one.jpg".len() as u64);
    assert_eq!(catalog.size(1), "cls/three.png".len() as u64);
    assert_eq!(
        catalog.total_bytes(),
        ("cls/one.jpg".len() + "cls/three.png".len()) as u64
    );
    assert_eq!(catalog.len(), 2);
    assert!(!catalog.is_empty());
}

#[test]
#[should_panic(expected = "sample id 2 is out of range")]
fn out_of_range_id_panics_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["a.jpg", "b.jpg"]);
    scan(dir.path()).0.relative_path(2);
}

#[test]
fn other_files_are_counted_and_extensions_ignore_case() {
    let dir = tempfile::tempdir().unwrap();
    tree(
        dir.path(),
        &[
            "A.JPG",
            "b.Jpeg",
            "c.pNg",
            "d.txt",
            "e.gif",
            "noext",
            "f.jpg.bak",
        ],
    );
    let (catalog, report) = scan(dir.path());
    assert_eq!(rel_paths(&catalog), ["A.JPG", "b.Jpeg", "c.pNg"]);
    assert_eq!(report.ignored, 4);
}

#[test]
fn files_beside_class_directories_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["cls/1.jpg", "stray.jpg", "README"]);
    let (catalog, report) = scan(dir.path());
    assert_eq!(rel_paths(&catalog), ["cls/1.jpg"]);
    assert_eq!(report.ignored, 2);
}

#[test]
fn hidden_entries_are_skipped_without_counting() {
    let dir = tempfile::tempdir().unwrap();
    // The hidden directory at the root must not turn the layout into ImageFolder.
    tree(
        dir.path(),
        &["a.jpg", ".DS_Store", ".hidden.jpg", ".git/x.jpg"],
    );
    let (catalog, report) = scan(dir.path());
    assert_eq!(report.layout, DatasetLayout::Flat);
    assert_eq!(rel_paths(&catalog), ["a.jpg"]);
    assert_eq!(report.ignored, 0);

    let dir = tempfile::tempdir().unwrap();
    tree(
        dir.path(),
        &["cls/a.jpg", "cls/.cache/b.jpg", ".ipynb_checkpoints/c.jpg"],
    );
    let (catalog, report) = scan(dir.path());
    assert_eq!(catalog.classes(), ["cls"]);
    assert_eq!(rel_paths(&catalog), ["cls/a.jpg"]);
    assert_eq!(report.ignored, 0);
}

#[test]
fn non_utf8_names_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["cls/ok.jpg"]);
    let bad = OsStr::from_bytes(b"caf\xe9.jpg");
    fs::write(dir.path().join("cls").join(bad), b"x").unwrap();
    fs::create_dir(dir.path().join("cls").join(OsStr::from_bytes(b"sub\xff"))).unwrap();
    let (catalog, report) = scan(dir.path());
    assert_eq!(rel_paths(&catalog), ["cls/ok.jpg"]);
    assert_eq!(report.ignored, 2);
}

#[test]
fn non_utf8_class_name_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["cls/ok.jpg"]);
    fs::create_dir(dir.path().join(OsStr::from_bytes(b"b\xffd"))).unwrap();
    let err = Catalog::scan(dir.path(), crate::sample::Modality::Image).unwrap_err();
    assert!(
        matches!(&err, Error::Config(msg) if msg.contains("rename")),
        "{err}"
    );
}

#[test]
fn symlinks_are_followed_and_loops_cut() {
    let data = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    tree(elsewhere.path(), &["linked/1.jpg", "file.jpg"]);
    tree(data.path(), &["real/1.jpg"]);
    let root = data.path();
    symlink(elsewhere.path().join("linked"), root.join("via_link")).unwrap();
    symlink(elsewhere.path().join("file.jpg"), root.join("real/2.jpg")).unwrap();
    symlink(root.join("nowhere.jpg"), root.join("real/dangling.jpg")).unwrap();
    symlink(root.join("real"), root.join("real/loop")).unwrap();
    let (catalog, report) = scan(root);
    assert_eq!(catalog.classes(), ["real", "via_link"]);
    assert_eq!(
        rel_paths(&catalog),
        ["real/1.jpg", "real/2.jpg", "via_link/1.jpg"]
    );
    // The dangling link and the loop.
    assert_eq!(report.ignored, 2);
    assert_eq!(catalog.size(1), "file.jpg".len() as u64);
}

#[test]
fn empty_dataset_is_a_config_error_naming_the_root() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["notes.txt", "cls/readme.md"]);
    let err = Catalog::scan(dir.path(), crate::sample::Modality::Image).unwrap_err();
    let root = fs::canonicalize(dir.path()).unwrap();
    assert!(
        matches!(&err, Error::Config(msg) if msg.contains(&*root.to_string_lossy())
            && msg.contains("2 other entries")),
        "{err}"
    );
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        Catalog::scan(empty.path(), crate::sample::Modality::Image),
        Err(Error::Config(_))
    ));
}

#[test]
fn bad_roots_are_errors_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    match Catalog::scan(&missing, crate::sample::Modality::Image) {
        Err(Error::Io { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    let file = dir.path().join("file.jpg");
    fs::write(&file, b"x").unwrap();
    let err = Catalog::scan(&file, crate::sample::Modality::Image).unwrap_err();
    assert!(
        matches!(&err, Error::Config(msg) if msg.contains("file.jpg") && msg.contains("not a directory")),
        "{err}"
    );
}

#[test]
fn save_then_load_round_trips() {
    for files in [
        &["b/2.jpg", "a/1.png", "a/sub/3.jpeg"][..],
        &["x.jpg", "y.png"][..],
    ] {
        let data = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        tree(data.path(), files);
        let (catalog, _) = scan(data.path());
        let index = out.path().join("new/dir/cat.idx");
        catalog.save(&index).unwrap();
        let loaded = Catalog::load(&index).unwrap();
        assert_eq!(loaded, catalog);
        assert_eq!(rel_paths(&loaded), rel_paths(&catalog));
        // No temporary files are left behind.
        assert_eq!(fs::read_dir(index.parent().unwrap()).unwrap().count(), 1);
    }
}

fn saved_index() -> Vec<u8> {
    let data = tempfile::tempdir().unwrap();
    tree(data.path(), &["b/2.jpg", "a/1.png", "a/sub/3.jpeg"]);
    scan(data.path()).0.encode()
}

fn bad_index_reason(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cat.idx");
    fs::write(&path, bytes).unwrap();
    match Catalog::load(&path) {
        Err(Error::BadIndex { path: p, reason }) => {
            assert_eq!(p, path);
            reason
        }
        other => panic!("expected BadIndex, got {other:?}"),
    }
}

#[test]
fn every_truncation_is_a_bad_index() {
    let bytes = saved_index();
    for len in 0..bytes.len() {
        bad_index_reason(&bytes[..len]);
    }
}

#[test]
fn every_flipped_byte_is_a_bad_index() {
    let bytes = saved_index();
    for i in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[i] ^= 0x10;
        bad_index_reason(&damaged);
    }
}

#[test]
fn wrong_magic_and_version_say_so() {
    let mut bytes = saved_index();
    bytes[0] = b'X';
    assert!(bad_index_reason(&bytes).contains("magic"));
    let mut bytes = saved_index();
    bytes[MAGIC.len()] = VERSION + 1;
    assert!(bad_index_reason(&bytes).contains("version 2"));
}

/// Builds an index body field by field and seals it with a valid checksum, as a
/// hostile writer would.
fn sealed(build: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(VERSION);
    build(&mut out);
    let sum = checksum(&out);
    put_u64(&mut out, sum);
    out
}

fn flat_header(out: &mut Vec<u8>) {
    out.push(1);
    out.push(0);
    put_u64(out, 4);
    out.extend_from_slice(b"/tmp");
    put_table(out, std::iter::empty());
    put_table(out, [""].into_iter());
    put_u64(out, 0);
}

#[test]
fn hostile_lengths_are_bad_index_without_allocating() {
    let huge_table = sealed(|out| {
        flat_header(out);
        put_u64(out, u64::MAX / 8);
    });
    assert!(bad_index_reason(&huge_table).contains("cannot fit"));
    let huge_root = sealed(|out| {
        out.push(1);
        out.push(0);
        put_u64(out, u64::MAX);
    });
    assert!(bad_index_reason(&huge_root).contains("root path"));
    let unordered = sealed(|out| {
        flat_header(out);
        put_u64(out, 2);
        put_u64(out, 5);
        put_u64(out, 3);
        out.extend_from_slice(b"a.jpgb");
    });
    assert!(bad_index_reason(&unordered).contains("out of order"));
}

#[test]
fn paths_escaping_the_root_are_bad_index() {
    for path in ["../x.jpg", "a/../../x.jpg", "/etc/x.jpg", "a//b.jpg", ""] {
        let bytes = sealed(|out| {
            flat_header(out);
            put_table(out, [path].into_iter());
            put_u64(out, 1);
        });
        assert!(
            bad_index_reason(&bytes).contains("not a plain path"),
            "{path}"
        );
    }
}

#[test]
fn a_well_formed_hand_built_index_loads() {
    // Pins the format: the hostile-index tests above are only meaningful if a
    // hand-built index with honest fields is accepted.
    let bytes = sealed(|out| {
        flat_header(out);
        put_table(out, ["a.jpg"].into_iter());
        put_u64(out, 7);
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cat.idx");
    fs::write(&path, bytes).unwrap();
    let catalog = Catalog::load(&path).unwrap();
    assert_eq!(catalog.root(), Path::new("/tmp"));
    assert_eq!(catalog.relative_path(0), "a.jpg");
    assert_eq!(catalog.size(0), 7);
}

#[test]
fn open_loads_a_fresh_index_and_rescans_a_stale_one() {
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let root = data.path();
    tree(root, &["a/1.jpg", "b/nested/2.jpg"]);
    backdate_all(root);
    let index = out.path().join("cat.idx");
    let open = || Catalog::open(root, Some(&index), crate::sample::Modality::Image).unwrap();

    let (first, how) = open();
    assert_eq!(how, Opened::Scanned);
    let (second, how) = open();
    assert_eq!(how, Opened::Loaded);
    assert_eq!(second, first);

    // A file added to a class directory.
    tree(root, &["a/3.jpg"]);
    let (third, how) = open();
    assert_eq!(how, Opened::Scanned);
    assert_eq!(third.len(), 3);
    assert_eq!(open().1, Opened::Loaded);

    // A file added in a nested directory.
    backdate_all(root);
    let _ = open();
    tree(root, &["b/nested/4.jpg"]);
    let (fourth, how) = open();
    assert_eq!(how, Opened::Scanned);
    assert_eq!(fourth.len(), 4);

    // A new class.
    backdate_all(root);
    let _ = open();
    tree(root, &["c/5.jpg"]);
    let (fifth, how) = open();
    assert_eq!(how, Opened::Scanned);
    assert_eq!(fifth.classes(), ["a", "b", "c"]);
}

#[test]
fn open_rescans_over_a_damaged_or_foreign_index() {
    let data = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    tree(data.path(), &["a.jpg"]);
    tree(other.path(), &["b.jpg", "c.jpg"]);
    let index = out.path().join("cat.idx");

    fs::write(&index, b"garbage").unwrap();
    assert_eq!(
        Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
            .unwrap()
            .1,
        Opened::Scanned
    );
    assert_eq!(
        Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
            .unwrap()
            .1,
        Opened::Loaded
    );

    // The same index file, asked about another root.
    let (catalog, how) =
        Catalog::open(other.path(), Some(&index), crate::sample::Modality::Image).unwrap();
    assert_eq!(how, Opened::Scanned);
    assert_eq!(rel_paths(&catalog), ["b.jpg", "c.jpg"]);
}

#[test]
fn open_ignores_an_index_others_could_have_written() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    tree(data.path(), &["a/1.jpg", "b/2.jpg"]);
    backdate_all(data.path());
    let index = out.path().join("cat.idx");
    assert_eq!(
        Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
            .unwrap()
            .1,
        Opened::Scanned
    );
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&index), 0o600);
    assert_eq!(
        Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
            .unwrap()
            .1,
        Opened::Loaded
    );
    // Writable by others: it could map the files to other labels.
    fs::set_permissions(&index, fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(
        Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
            .unwrap()
            .1,
        Opened::Scanned
    );
    assert_eq!(
        Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
            .unwrap()
            .1,
        Opened::Loaded
    );
    // Another user's (as root, hand it to `nobody`).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&index, Some(65534), None).unwrap();
        assert_eq!(
            Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image)
                .unwrap()
                .1,
            Opened::Scanned
        );
    }
}

#[test]
fn open_survives_an_index_it_cannot_write() {
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    tree(data.path(), &["a.jpg"]);
    // The index's directory would have to be created where a file is.
    fs::write(out.path().join("file"), b"").unwrap();
    let index = out.path().join("file/cat.idx");
    let (catalog, how) =
        Catalog::open(data.path(), Some(&index), crate::sample::Modality::Image).unwrap();
    assert_eq!(how, Opened::Scanned);
    assert_eq!(catalog.len(), 1);
    assert!(catalog.save(&index).is_err());
}

#[test]
fn open_refuses_an_index_inside_the_dataset() {
    let data = tempfile::tempdir().unwrap();
    tree(data.path(), &["a.jpg"]);
    for index in ["cat.idx", "not/yet/there/cat.idx"] {
        let err = Catalog::open(
            data.path(),
            Some(&data.path().join(index)),
            crate::sample::Modality::Image,
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::Config(msg) if msg.contains("inside")),
            "{err}"
        );
    }
}

#[test]
fn default_index_path_is_keyed_by_the_canonical_root() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let path = Catalog::default_index_path(a.path(), crate::sample::Modality::Image);
    assert_eq!(path.extension().unwrap(), "idx");
    assert_eq!(
        path,
        Catalog::default_index_path(&a.path().join("."), crate::sample::Modality::Image)
    );
    assert_ne!(
        path,
        Catalog::default_index_path(b.path(), crate::sample::Modality::Image)
    );
}

#[test]
fn cache_dir_follows_the_environment_in_order() {
    let var = |s: &str| Some(OsString::from(s));
    assert_eq!(cache_dir(var("/n"), var("/x"), var("/h")), Path::new("/n"));
    assert_eq!(
        cache_dir(var(""), var("/x"), var("/h")),
        Path::new("/x/nostall")
    );
    assert_eq!(
        cache_dir(None, var("rel"), var("/h")),
        Path::new("/h/.cache/nostall")
    );
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(
        cache_dir(None, None, None),
        env::temp_dir().join(format!("nostall-{uid}"))
    );
}

#[test]
fn debug_is_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path(), &["cls/a.jpg"]);
    let text = format!("{:?}", scan(dir.path()).0);
    assert!(
        text.contains("samples: 1") && !text.contains("a.jpg"),
        "{text}"
    );
}
