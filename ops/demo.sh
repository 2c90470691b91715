#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds, fetches
# the default model, starts the service (`troupe serve`), and streams a real
# answer to a real question through the client (`troupe chat`).
#   ops/demo.sh ["your question"]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Only what serving needs; the model downloads while troupe compiles.
ops/setup.sh --serve
ops/models.sh qwen2.5-coder-0.5b >/dev/null &
models=$!
# Without a GPU the CUDA backend would serve nothing: a first build skips it
# (where nvcc is installed it costs ~40 s of compiling); ops/test.sh builds it.
cuda=()
if ! [ -f "${BUILD_DIR:-$root/build}/CMakeCache.txt" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  cuda=(-DTROUPE_CUDA=OFF)
fi
ops/build.sh --serve "${cuda[@]}"
wait $models

troupe="${BUILD_DIR:-$root/build}/troupe"
endpoint="${TROUPE_ENDPOINT:-tcp://127.0.0.1:7700}"
log="$(mktemp -t troupe-serve.XXXXXX.log)"
question="${1:-Write a Python function that checks whether a string is a palindrome, with a short explanation.}"

echo "[demo] troupe serve --model qwen2.5-coder-0.5b --listen $endpoint (log: $log)" >&2
"$troupe" serve --model qwen2.5-coder-0.5b --listen "$endpoint" >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "listening on" "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
grep -q "listening on" "$log" || { echo "[demo] the server did not start" >&2; cat "$log" >&2; exit 1; }

echo "[demo] troupe chat --connect $endpoint --prompt \"$question\"" >&2
"$troupe" chat --connect "$endpoint" --prompt "$question" --max-tokens 200 --temperature 0.3
