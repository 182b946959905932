//! AFL++ entry point: `bash bench/fuzz.sh operators`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::operators(data));
}
