#!/usr/bin/env bash
# llama.cpp's own command-line tools (llama-bench, llama-batched-bench,
# llama-perplexity, and llama-server, the HTTP peer), built natively from the llama.cpp source that the pinned
# llama-cpp-python sdist carries (PyPI; nothing else is downloaded): the peer
# the benchmarks measure against, with no Python in its timed loop.
#
#   ops/llama-tools.sh          builds once (~10 min on 2 cores), then prints the bin directory
#
# Cached in ${TROUPE_HOME:-$HOME/.cache/troupe}/llama-tools/<version>; the
# build is for this CPU's instruction sets with AMX off (ops/llama-cpu-flags.sh),
# as the Python wheel's is; a build made with other flags is made again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(sed -n 's/^LLAMA_PIN=llama-cpp-python==//p' "$root/ops/python-env.sh")"
home="${TROUPE_HOME:-$HOME/.cache/troupe}/llama-tools/$version"
bin="$home/build/bin"
log() { printf '[llama-tools] %s\n' "$*" >&2; }
tools=(llama-bench llama-batched-bench llama-perplexity llama-server)
flags="$("$root/ops/llama-cpu-flags.sh")"
have=1
for t in "${tools[@]}"; do [ -x "$bin/$t" ] || have=0; done
if [[ "$(cat "$home/cmake-args" 2>/dev/null)" != "$flags" ]]; then
  have=0
  rm -rf "$home/build"
fi
if ((have)); then
  echo "$bin"
  exit 0
fi
python="$("$root/ops/python-env.sh" --no-llama)"
mkdir -p "$home"
if [ ! -d "$home/src" ]; then
  log "fetching the llama-cpp-python $version sdist from PyPI"
  "$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$home/sdist" >&2
  tarball="$(ls "$home"/sdist/llama_cpp_python-"$version".tar.gz)"
  mkdir -p "$home/src"
  tar -xzf "$tarball" -C "$home/src" --strip-components=1
fi
src="$home/src/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { log "no llama.cpp source in the sdist ($src)"; exit 1; }
log "building ${tools[*]} ($flags, $(nproc) jobs)"
# shellcheck disable=SC2086  # the flags are words
cmake -S "$src" -B "$home/build" -DCMAKE_BUILD_TYPE=Release $flags -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$home/build" -j"$(nproc)" --target "${tools[@]}" >&2
printf '%s\n' "$flags" > "$home/cmake-args"
echo "$bin"
