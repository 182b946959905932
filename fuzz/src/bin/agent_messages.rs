//! AFL++ entry point: `bash bench/fuzz.sh agent_messages`.

fn main() {
    afl::fuzz!(|data: &[u8]| nostall_fuzz::agent_messages(data));
}
