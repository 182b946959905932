//! AFL++ entry point: `bash bench/fuzz.sh audio`.
//!
//! `fuzz_nohook!`: symphonia asserts on some malformed FLAC and Vorbis headers, and
//! nostall decodes under `catch_unwind` (such a file is an error of its sample); only a
//! panic that escapes nostall, or a fault in the C decoders, is a crash.

#[global_allocator]
static ALLOCATOR: nostall_fuzz::alloc::Counting = nostall_fuzz::alloc::Counting;

fn main() {
    nostall_fuzz::alloc::limit_from_env();
    afl::fuzz_nohook!(|data: &[u8]| nostall_fuzz::audio(data));
}
