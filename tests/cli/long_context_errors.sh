#!/usr/bin/env bash
# Bad long-context settings as a user types them: each is one line of error,
# exit status 1, and nothing is stored (serve opens no store).
# Usage: long_context_errors.sh TROUPE MODEL WORKDIR
set -uo pipefail
troupe="$1" model="$2" work="$3/long-context-errors-$$"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect "what it says" command...: exit 1 and exactly one line naming the problem.
expect() {
  local want="$1"; shift
  local out rc
  out="$("$@" 2>&1 </dev/null)"; rc=$?
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1: $* -> $out"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "more than one line: $* -> $out"
  grep -qF -- "$want" <<<"$out" || fail "'$want' not in: $out"
}

expect "--kv-type: unknown KV type 'q4' (f16, q8_0, k8v4, q4_0)" "$troupe" generate -m "$model" --prompt hi --kv-type q4
expect "--rope-factor: 0 must be a finite number above 0" \
  "$troupe" generate -m "$model" --prompt hi --rope-scaling yarn --rope-factor 0
expect "--rope-factor: -2 must be a finite number above 0" \
  "$troupe" generate -m "$model" --prompt hi --rope-scaling linear --rope-factor -2
expect "--rope-factor: nan must be a finite number above 0" \
  "$troupe" generate -m "$model" --prompt hi --rope-scaling ntk --rope-factor nan
expect "--rope-scaling: unknown RoPE scaling 'warp'" \
  "$troupe" generate -m "$model" --prompt hi --rope-scaling warp --rope-factor 2
expect "--rope-factor and --rope-orig-ctx need --rope-scaling" "$troupe" generate -m "$model" --prompt hi --rope-factor 4
expect "--kv-type: unknown KV type 'int3'" "$troupe" serve -m "$model" --listen "ipc://$work/s.sock" \
  --data-dir "$work/data" --kv-type int3
expect "--kv-type: unknown KV type 'int3'" "$troupe" worker -m "$model" --listen "ipc://$work/w.sock" --kv-type int3
expect "--kv-type: unknown KV type 'q2'" "$troupe" bench -m "$model" --kv-type q2
expect "--attention-precision: unknown attention precision 'fp16' (fp32, bf16)" \
  "$troupe" generate -m "$model" --prompt hi --attention-precision fp16
expect "--attention-precision: unknown attention precision 'int8'" "$troupe" serve -m "$model" \
  --listen "ipc://$work/s.sock" --data-dir "$work/data" --attention-precision int8
[ -e "$work/data" ] && fail "serve with a bad --kv-type or --attention-precision created its store"
expect "--context 40000 is more than the KV pool holds: 4096 tokens (256 pages of 16); raise --kv-tokens or lower --context" \
  "$troupe" serve -m "$model" --listen "ipc://$work/s.sock" --data-dir "$work/data" --kv-tokens 4096 --context 40000
[ -e "$work/data" ] && fail "serve with --context over the pool created its store"
small="a KV budget of 100 positions is too small: at least 128"
expect "$small" "$troupe" generate -m "$model" --prompt hi --kv-budget 100
expect "${small/100/64}" "$troupe" perplexity -m "$model" /usr/share/common-licenses/GPL-3 --kv-budget 64
expect "$small" "$troupe" serve -m "$model" --listen "ipc://$work/s.sock" --data-dir "$work/data" --kv-budget 100
[ -e "$work/data" ] && fail "serve with a bad --kv-budget created its store"
# A worker that cannot evict (a sliding-window model's) behind a server with a budget.
"$troupe" make-model -o "$work/gemma3.gguf" --arch gemma3 >/dev/null || fail "make-model gemma3"
"$troupe" worker -m "$work/gemma3.gguf" --listen "ipc://$work/w.sock" --threads 1 --kv-tokens 2048 \
  >"$work/worker.log" 2>&1 &
worker=$!
trap 'kill "$worker" 2>/dev/null; wait "$worker" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q listening "$work/worker.log" && break; sleep 0.1; done
expect "--kv-budget: the worker at ipc://$work/w.sock cannot evict KV" "$troupe" serve -m "$work/gemma3.gguf" \
  --listen "ipc://$work/s.sock" --data-dir "$work/data" --worker "ipc://$work/w.sock" --kv-budget 256 --kv-tokens 2048
[ -e "$work/data" ] && fail "serve with a budget its worker cannot keep created its store"
out="$("$troupe" chat --context-policy sideways -p hi 2>&1)" && fail "an unknown policy ran"
grep -q "context-policy: sideways not in {default,window,summarize,refuse}" <<<"$out" || fail "policy error: $out"
echo "long-context errors: ok"
