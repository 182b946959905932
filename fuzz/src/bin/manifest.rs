//! AFL++ entry point: `bash bench/fuzz.sh manifest`.
//!
//! `fuzz_nohook!`: the segments are decoded as the audio target decodes recordings, under
//! nostall's `catch_unwind` around symphonia; only a panic that escapes nostall is a
//! crash.

#[global_allocator]
static ALLOCATOR: nostall_fuzz::alloc::Counting = nostall_fuzz::alloc::Counting;

fn main() {
    nostall_fuzz::alloc::limit_from_env();
    afl::fuzz_nohook!(|data: &[u8]| nostall_fuzz::manifest(data));
}
