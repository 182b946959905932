//! AFL++ entry point: `bash bench/fuzz.sh agent_messages`.
//!
//! `fuzz_nohook!`: the `tokenizers` crate panics on some malformed `tokenizer.json`s, and
//! nostall reads them under `catch_unwind` (such a file is the job's error); only a panic
//! that escapes nostall is a crash.

#[global_allocator]
static ALLOCATOR: nostall_fuzz::alloc::Counting = nostall_fuzz::alloc::Counting;

fn main() {
    nostall_fuzz::alloc::limit_from_env();
    afl::fuzz_nohook!(|data: &[u8]| nostall_fuzz::agent_messages(data));
}
