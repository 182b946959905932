//! AFL++ entry point: `bash bench/fuzz.sh image`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::image(data));
}
