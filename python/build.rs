//! Embeds the demo photographs of the CLI (crates/nostall-cli/assets/demo/<class>/*.jpg)
//! so that `nostall.demo_photos()` gives a fresh user a dataset without a download.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/nostall-cli/assets/demo");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    for class in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        if !class.path().is_dir() {
            continue;
        }
        for file in std::fs::read_dir(class.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = file.path();
            if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("jpg"))
            {
                let name = format!(
                    "{}/{}",
                    class.file_name().to_string_lossy(),
                    file.file_name().to_string_lossy()
                );
                files.push((name, path.canonicalize().unwrap_or(path)));
            }
        }
    }
    files.sort();
    let mut code = String::from("const DEMO_PHOTOS: &[(&str, &[u8])] = &[\n");
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
