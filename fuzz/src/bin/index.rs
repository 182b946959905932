//! AFL++ entry point: `bash bench/fuzz.sh index`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::index(data));
}
