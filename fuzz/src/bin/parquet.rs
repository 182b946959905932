//! AFL++ entry point: `bash bench/fuzz.sh parquet`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::parquet(data));
}
