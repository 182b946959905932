//! AFL++ entry point: `bash bench/fuzz.sh s3_response`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::s3_response(data));
}
