use nostall::catalog::{Catalog, Opened};
use std::time::Instant;

#[test]
#[ignore]
fn timing_second_open() {
    let data = std::path::PathBuf::from("/tmp/nostall-timing/data");
    let out = tempfile::tempdir().unwrap();
    if !data.exists() {
        let t = Instant::now();
        for c in 0..1000 {
            let dir = data.join(format!("n{c:08}"));
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..200 {
                std::fs::File::create(dir.join(format!("n{c:08}_{i:05}.JPEG"))).unwrap();
            }
        }
        eprintln!("generated in {:?}", t.elapsed());
    }
    let index = out.path().join("cat.idx");
    let t = Instant::now();
    let (cat, how) = Catalog::open(&data, Some(&index)).unwrap();
    eprintln!("first open: {:?} {how:?} len={} index={} bytes", t.elapsed(), cat.len(), std::fs::metadata(&index).unwrap().len());
    for _ in 0..5 {
        let t = Instant::now();
        let (cat2, how) = Catalog::open(&data, Some(&index)).unwrap();
        eprintln!("second open: {:?} {how:?}", t.elapsed());
        assert_eq!(how, Opened::Loaded);
        assert_eq!(cat2.len(), cat.len());
    }
    let t = Instant::now();
    let _ = Catalog::load(&index).unwrap();
    eprintln!("load alone: {:?}", t.elapsed());
    let t = Instant::now();
    let _ = Catalog::scan(&data).unwrap();
    eprintln!("scan alone (warm dentries): {:?}", t.elapsed());
}
