#!/usr/bin/env bash
# The CPU peers' own command-line tools (llama-bench, llama-batched-bench, llama-perplexity and
# llama-server), built natively from the source a pinned PyPI sdist carries (nothing else is
# downloaded): the engines the benchmarks measure against, with no Python in their timed loops.
#
#   ops/llama-tools.sh          mainline llama.cpp, from the pinned llama-cpp-python sdist
#   ops/llama-tools.sh ik       ik_llama.cpp (the fork whose CPU kernels were rewritten for
#                               prompt processing), from the pinned ik-llama-cpp-python sdist
#
# Each builds once (~10-20 min on 2 cores), then prints its bin directory. Cached in
# ${TROUPE_HOME:-$HOME/.cache/troupe}/llama-tools/<version> (ik-llama-tools/<version> for the
# fork). Mainline is built for this CPU's instruction sets with AMX off (ops/llama-cpu-flags.sh),
# as the Python wheel is; ik_llama.cpp has no AMX kernels and selects its own kernels from the
# compiler's target macros, so it is built -march=native (GGML_NATIVE), as its README says. A
# build made with other flags is made again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peer="${1:-mainline}"
log() { printf '[llama-tools %s] %s\n' "$peer" "$*" >&2; }
case "$peer" in
  mainline)
    package=llama-cpp-python
    version="$(sed -n 's/^LLAMA_PIN=llama-cpp-python==//p' "$root/ops/python-env.sh")"
    sha256=  # the oracle's pin; pip installs the same file into the test environment
    vendor=vendor/llama.cpp
    home="${TROUPE_HOME:-$HOME/.cache/troupe}/llama-tools/$version"
    flags="$("$root/ops/llama-cpu-flags.sh")"
    ;;
  ik)
    package=ik-llama-cpp-python
    version=0.1.5
    sha256=33c67eb99e4dcab5e611050433243815709b8b3067753f9ce18375013cf002ad
    vendor=vendor/ik_llama.cpp
    home="${TROUPE_HOME:-$HOME/.cache/troupe}/ik-llama-tools/$version"
    flags="-DGGML_NATIVE=ON -DGGML_IQK_MUL_MAT=ON -DGGML_OPENMP=ON -DGGML_CUDA=OFF"
    ;;
  *) log "unknown peer (mainline or ik)"; exit 2 ;;
esac
bin="$home/build/bin"
tools=(llama-bench llama-batched-bench llama-perplexity llama-server)
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
  log "fetching the $package $version sdist from PyPI"
  "$python" -m pip download --quiet --no-deps --no-binary :all: "$package==$version" -d "$home/sdist" >&2
  tarball="$(ls "$home"/sdist/"${package//-/_}"-"$version".tar.gz)"
  if [ -n "$sha256" ] && ! echo "$sha256  $tarball" | sha256sum --check --quiet -; then
    log "the $package $version sdist does not have the pinned sha256 ($sha256)"
    exit 1
  fi
  mkdir -p "$home/src.part"
  tar -xzf "$tarball" -C "$home/src.part" --strip-components=1
  mv "$home/src.part" "$home/src"
fi
src="$home/src/$vendor"
[ -f "$src/CMakeLists.txt" ] || { log "no source in the sdist ($src)"; exit 1; }
# ik-llama-cpp-python's sdist leaves out the script that writes the tools' build-info.cpp from
# git; written here instead (no git: the sdist is the version), newer than its template.
if [ ! -f "$src/common/cmake/build-info-gen-cpp.cmake" ] && [ ! -f "$src/common/build-info.cpp" ]; then
  sed -e "s/@BUILD_NUMBER@/0/" -e "s/@BUILD_COMMIT@/$package-$version/" \
      -e "s/@BUILD_COMPILER@/$(cc --version | head -1)/" -e "s/@BUILD_TARGET@/$(uname -m)/" \
      "$src/common/build-info.cpp.in" > "$src/common/build-info.cpp"
fi
log "building ${tools[*]} ($flags, $(nproc) jobs)"
# shellcheck disable=SC2086  # the flags are words
cmake -S "$src" -B "$home/build" -DCMAKE_BUILD_TYPE=Release $flags -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$home/build" -j"$(nproc)" --target "${tools[@]}" >&2
printf '%s\n' "$flags" > "$home/cmake-args"
echo "$bin"
