//! AFL++ entry point: `bash bench/fuzz.sh audio`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::audio(data));
}
