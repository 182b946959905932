//! AFL++ entry point: `bash bench/fuzz.sh video`.

#[global_allocator]
static ALLOCATOR: nostall_fuzz::alloc::Counting = nostall_fuzz::alloc::Counting;

fn main() {
    nostall_fuzz::alloc::limit_from_env();
    afl::fuzz!(|data: &[u8]| nostall_fuzz::video(data));
}
