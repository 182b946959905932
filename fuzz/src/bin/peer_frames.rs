//! AFL++ entry point: `bash bench/fuzz.sh peer_frames`.

#[global_allocator]
static ALLOCATOR: nostall_fuzz::alloc::Counting = nostall_fuzz::alloc::Counting;

fn main() {
    nostall_fuzz::alloc::limit_from_env();
    afl::fuzz!(|data: &[u8]| nostall_fuzz::peer_frames(data));
}
