//! AFL++ entry point: `bash bench/fuzz.sh peer_frames`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::peer_frames(data));
}
