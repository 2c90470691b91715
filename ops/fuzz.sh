#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz: a clang build with ASan and UBSan in
# build-fuzz/ (BUILD_DIR overrides), runs over their seed corpora.
#   ops/fuzz.sh --build              configure and build the targets and their seeds
#   ops/fuzz.sh --list               the target names
#   ops/fuzz.sh TARGET SECONDS [ARG...]
#       runs fuzz_TARGET for SECONDS over its seeds (read, never written) and
#       its scratch corpus; extra arguments go to libFuzzer (e.g. -max_len=4096).
#       Work goes to FUZZ_WORK (default build-fuzz/work/TARGET): corpus/ (new
#       inputs), crashes/ (crash-*, leak-*, oom-*, timeout-* inputs), log.
#       Prints the executions, exec/s, corpus size and crashes; exit 1 on a crash.
#   ops/fuzz.sh --ci SECONDS         every target for SECONDS each (CTest label fuzz)
# Reproduce a crash: build-fuzz/tests/fuzz/fuzz_TARGET CRASH_FILE
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"
jobs="${FUZZ_BUILD_JOBS:-$(nproc)}"

build_targets() {
  "$root/ops/setup.sh"
  # RelWithDebInfo: optimized as a server runs, with line numbers in reports.
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DTROUPE_CUDA=OFF -DTROUPE_SANITIZE=ON -DTROUPE_FUZZ=ON "$@" >&2
  cmake --build "$build" -j"$jobs" --target troupe_fuzzers >&2
}

targets() { ls "$root/tests/fuzz" | sed -n 's/\.fuzz\.cpp$//p'; }

run_target() {
  local target="$1" seconds="$2"
  shift 2
  local bin="$build/tests/fuzz/fuzz_$target"
  [ -x "$bin" ] || { echo "ops/fuzz.sh: $bin is not built (ops/fuzz.sh --build; targets: $(targets | xargs))" >&2; exit 1; }
  local work="${FUZZ_WORK:-$build/work/$target}"
  mkdir -p "$work/corpus" "$work/crashes"
  local seeds=("$build/tests/fuzz/corpus/$target")
  [ -d "$root/tests/fuzz/seeds/$target" ] && seeds+=("$root/tests/fuzz/seeds/$target")
  local rc=0
  # The first folder is the one libFuzzer writes to: the scratch corpus, never the seeds.
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/crashes/" "$@" "$work/corpus" "${seeds[@]}" > "$work/log" 2>&1 || rc=$?
  local execs rate
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)"
  local crashes
  crashes="$(find "$work/crashes" -type f | wc -l)"
  echo "[fuzz] $target: ${seconds} s, ${execs:-?} executions, ${rate:-?} exec/s, corpus $(ls "$work/corpus" | wc -l) new inputs, $crashes crash files in $work/crashes (log: $work/log)"
  if ((rc != 0)); then
    grep -m1 -E "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz property failed" "$work/log" >&2 || tail -20 "$work/log" >&2
    return 1
  fi
}

case "${1:-}" in
  --build) build_targets ;;
  --list) targets ;;
  --ci)
    build_targets -DTROUPE_FUZZ_SECONDS="${2:-20}"
    cd "$build"
    ctest --output-on-failure -j"$(nproc)" -L fuzz ;;
  ""|-h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
  *)
    [ $# -ge 2 ] || { echo "usage: ops/fuzz.sh TARGET SECONDS [libFuzzer args]" >&2; exit 2; }
    run_target "$@" ;;
esac
