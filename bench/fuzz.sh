#!/usr/bin/env bash
# Coverage-guided fuzzing of nostall's parsers of untrusted bytes with AFL++ (cargo-afl,
# stable Rust). Usage:
#
#   bash bench/fuzz.sh [TARGET ...] [--seconds N]     (default: every target, 1200 s each)
#
# Targets (fuzz/src/lib.rs): tar_index, parquet, index, image, audio, peer_frames,
# s3_response, agent_messages, operators. Each starts from its seed corpus (fuzz/corpus/TARGET) and
# writes its queue and findings to fuzz/out/TARGET (not kept in git); the summary of each
# run, with the fuzzer's own figures (executions, edges covered, crashes and hangs), goes
# to bench/out/fuzz-TARGET.json. A crash or hang is a bug: copy the input into
# fuzz/regressions/TARGET, where `cargo test` replays it, and fix it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=1200
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(tar_index parquet index image audio peer_frames s3_response agent_messages operators)

command -v cargo-afl >/dev/null || cargo install cargo-afl --locked
cargo afl config --build >/dev/null 2>&1 || true   # builds AFL++ once; fails if already built
export CARGO_TARGET_DIR="$PWD/target/afl"           # instrumented builds apart from the rest
cargo afl build --release -p nostall-fuzz --features afl --bins

# This machine's core dumps go to a handler and its CPU governor is not ours to change:
# neither matters for finding crashes.
export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1
mkdir -p bench/out fuzz/out
for target in "${targets[@]}"; do
  out="fuzz/out/$target"
  rm -rf "$out"
  echo "fuzzing $target for $seconds s"
  started=$(date -u +%FT%TZ)
  cargo afl fuzz -i "fuzz/corpus/$target" -o "$out" -V "$seconds" -t 2000 -m none \
    "$CARGO_TARGET_DIR/release/$target" >"$out.log" 2>&1 || { tail -20 "$out.log"; exit 1; }
  stats="$out/default/fuzzer_stats"
  field() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$stats"; }
  crashes=$(find "$out/default/crashes" -type f -name 'id:*' | wc -l)
  hangs=$(find "$out/default/hangs" -type f -name 'id:*' | wc -l)
  cat >"bench/out/fuzz-$target.json" <<EOF
{"target": "$target", "started": "$started", "seconds": $seconds,
 "execs_done": $(field execs_done), "execs_per_sec": $(field execs_per_sec),
 "corpus_count": $(field corpus_count), "edges_found": $(field edges_found),
 "total_edges": $(field total_edges), "bitmap_cvg": "$(field bitmap_cvg)",
 "crashes": $crashes, "hangs": $hangs, "afl_version": "$(field afl_version)"}
EOF
  cat "bench/out/fuzz-$target.json"
done
