#!/usr/bin/env bash
# Installs the Debian packages troupe builds with, if any is missing.
# Idempotent: when all are installed it only checks them.
#   ops/setup.sh           everything the test suite needs (ops/test.sh)
#   ops/setup.sh --serve   only what building and serving `troupe` needs (ops/demo.sh)
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git python3 python3-venv
  libboost-dev nlohmann-json3-dev  # the HTTP gateway: Boost.Asio and Boost.Beast (header-only), JSON
  libsodium-dev  # HTTP bearer tokens (SHA-256), as libzmq's CURVE uses it
  libcaf-dev libzmq3-dev cppzmq-dev libflatbuffers-dev flatbuffers-compiler
  librocksdb-dev libpcre2-dev libcli11-dev libspdlog-dev
  libtomlplusplus-dev  # troupe serve --config
)
if [ "${1:-}" != "--serve" ]; then
  PACKAGES+=(
    catch2
    clang libclang-rt-14-dev  # ops/fuzz.sh: libFuzzer and the sanitizers' runtimes
    chromium  # tests/http/test_web_page.py: the web page's browser test (headless)
    iproute2  # tests/e2e/hosts.test.cpp: hosts simulated by network namespaces
    json-schema-test-suite  # tests/engine/json_schema_test_suite.test.cpp: the schema converter's oracle
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
echo "[setup] Debian packages present" >&2
