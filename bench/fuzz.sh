#!/usr/bin/env bash
# Coverage-guided fuzzing of nostall's parsers of untrusted bytes with AFL++ (cargo-afl,
# stable Rust). Usage:
#
#   bash bench/fuzz.sh [TARGET ...] [--seconds N] [--alloc-mib N] [--no-build]
#
# (default: every target, 1200 s each, 512 MiB; --no-build runs the targets as last built,
# for a second run beside a first while the sources change). Targets (fuzz/src/lib.rs): tar_index,
# parquet, index, image, audio, video, manifest, peer_frames, s3_response, agent_messages,
# operators, fields, remote_wire. Each starts from its seed corpus (fuzz/corpus/TARGET) and writes its queue
# and findings to fuzz/out/TARGET (not kept in git); the summary of each run, with the
# fuzzer's own figures (executions, edges covered, crashes and hangs) and the crashes that
# were an input over the allocation limit, goes to bench/out/fuzz-TARGET.json. A crash or
# hang is a bug: copy the input into fuzz/regressions/TARGET, where `cargo test` replays
# it, and fix it.
#
# Every target holds at most --alloc-mib MiB at once (fuzz/src/alloc.rs: the process
# aborts, a crash, when an input makes it ask for more), and its address space is limited
# to four times that (AFL's -m) for what C libraries allocate beside Rust's allocator;
# the headroom is for the address space that threads' stacks and malloc's arenas reserve
# without using it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=1200
alloc_mib=512
build=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --alloc-mib) alloc_mib="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(tar_index parquet index image audio video manifest peer_frames s3_response agent_messages
  operators fields remote_wire)

command -v cargo-afl >/dev/null || cargo install cargo-afl --locked
cargo afl config --build >/dev/null 2>&1 || true   # builds AFL++ once; fails if already built
export CARGO_TARGET_DIR="$PWD/target/afl"           # instrumented builds apart from the rest
[ "$build" = 0 ] || cargo afl build --release -p nostall-fuzz --features afl --bins

# This machine's core dumps go to a handler and its CPU governor is not ours to change:
# neither matters for finding crashes.
export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1
export NOSTALL_FUZZ_ALLOC_MIB="$alloc_mib"
mkdir -p bench/out fuzz/out
for target in "${targets[@]}"; do
  out="fuzz/out/$target"
  rm -rf "$out"
  echo "fuzzing $target for $seconds s"
  started=$(date -u +%FT%TZ)
  binary="$CARGO_TARGET_DIR/release/$target"
  cargo afl fuzz -i "fuzz/corpus/$target" -o "$out" -V "$seconds" -t 2000 \
    -m $((alloc_mib * 4)) "$binary" >"$out.log" 2>&1 || { tail -20 "$out.log"; exit 1; }
  stats="$out/default/fuzzer_stats"
  field() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$stats"; }
  crashes=$(find "$out/default/crashes" -type f -name 'id:*' | wc -l)
  hangs=$(find "$out/default/hangs" -type f -name 'id:*' | wc -l)
  # A crash is over the allocation limit when, run again alone, it ends with the
  # allocator's message.
  over_limit=0
  for crash in "$out"/default/crashes/id:*; do
    [ -e "$crash" ] || continue
    said=$(timeout 60 "$binary" <"$crash" 2>&1 >/dev/null || true)
    case "$said" in *"nostall-fuzz: an allocation of"*) over_limit=$((over_limit + 1)) ;; esac
  done
  cat >"bench/out/fuzz-$target.json" <<EOF
{"target": "$target", "started": "$started", "seconds": $seconds,
 "execs_done": $(field execs_done), "execs_per_sec": $(field execs_per_sec),
 "corpus_count": $(field corpus_count), "edges_found": $(field edges_found),
 "total_edges": $(field total_edges), "bitmap_cvg": "$(field bitmap_cvg)",
 "crashes": $crashes, "hangs": $hangs, "over_alloc_limit": $over_limit,
 "alloc_limit_mib": $alloc_mib, "afl_version": "$(field afl_version)"}
EOF
  cat "bench/out/fuzz-$target.json"
done
