//! AFL++ entry point: `bash bench/fuzz.sh remote_wire`.

#[global_allocator]
static ALLOCATOR: nostall_fuzz::alloc::Counting = nostall_fuzz::alloc::Counting;

fn main() {
    nostall_fuzz::alloc::limit_from_env();
    afl::fuzz!(|data: &[u8]| nostall_remote::wire::parse_for_fuzzing(data));
}
