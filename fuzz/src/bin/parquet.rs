//! AFL++ entry point: `bash bench/fuzz.sh parquet`.
//!
//! `fuzz_nohook!`: the `parquet` crate panics on some crafted pages, and nostall decodes
//! pages under `catch_unwind` (such a page is an error of its samples); only a panic that
//! escapes nostall is a crash.

#[global_allocator]
static ALLOCATOR: nostall_fuzz::alloc::Counting = nostall_fuzz::alloc::Counting;

fn main() {
    nostall_fuzz::alloc::limit_from_env();
    afl::fuzz_nohook!(|data: &[u8]| nostall_fuzz::parquet(data));
}
