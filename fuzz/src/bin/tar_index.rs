//! AFL++ entry point: `bash bench/fuzz.sh tar_index`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::tar_index(data));
}
