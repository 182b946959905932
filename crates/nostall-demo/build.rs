//! Embeds the demo photographs (assets/demo/<class>/<file>.jpg) into the crate, so that
//! `nostall demo` and `nostall.demo_photos()` work offline on a fresh machine with nothing
//! to download.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/demo");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    if let Ok(classes) = std::fs::read_dir(&root) {
        for class in classes.flatten().filter(|e| e.path().is_dir()) {
            println!("cargo:rerun-if-changed={}", class.path().display());
            for file in std::fs::read_dir(class.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = file.path();
                let is_jpeg = path
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("jpg"));
                if is_jpeg {
                    let name = format!(
                        "{}/{}",
                        class.file_name().to_string_lossy(),
                        file.file_name().to_string_lossy()
                    );
                    files.push((name, path));
                }
            }
        }
    }
    files.sort();
    let mut code = String::from("/// The demo photographs: (class/file name, JPEG bytes).\npub const PHOTOS: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        writeln!(
            code,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    code.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("demo_photos.rs");
    std::fs::write(out, code).unwrap();
}
