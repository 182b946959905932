//! Compiles the engine's one C file: the MP3 decoder (`csrc/mp3.c`, over the vendored
//! minimp3 in `csrc/minimp3/`).

fn main() {
    println!("cargo:rerun-if-changed=csrc");
    cc::Build::new()
        .file("csrc/mp3.c")
        .include("csrc")
        .opt_level(3)
        .warnings(true)
        .compile("nostall_mp3");
}
