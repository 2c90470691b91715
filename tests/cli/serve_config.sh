#!/usr/bin/env bash
# `troupe serve --config FILE` and `--print-config`: the printed configuration reads back
# as itself, with the defaults and with a non-default value for every key; a flag beats the
# file; an unknown key, a wrong type or a refused value is one line naming the key; and a
# server started from a file listens where the file says, with the file's KV size.
# Usage: serve_config.sh TROUPE MODEL WORKDIR
set -euo pipefail
troupe="$1" model="$2" work="$3/serve-config-$$"
mkdir -p "$work"
server=""
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
print() { "$troupe" serve --print-config "$@"; }

# 1. The defaults (no model, no file) read back as themselves.
print >"$work/defaults.toml"
print --config "$work/defaults.toml" >"$work/defaults.again" || fail "the defaults do not read back"
cmp -s "$work/defaults.toml" "$work/defaults.again" || fail "defaults: $(diff "$work/defaults.toml" "$work/defaults.again")"

# Every key with a value that is not its default, written as --print-config writes it.
touch "$work/server.secret" "$work/worker.key"
mkdir -p "$work/clients"
declare -A value=(
  [model]="\"$model\"" [listen]='"ipc:///tmp/troupe-config.sock"' [http]='"127.0.0.1:8099"'
  [http-threads]=8 [http-max-connections]=512 [http-max-connections-per-address]=8 [http-header-timeout]=2.5
  [http-body-timeout]=7.5 [http-idle-timeout]=12.5 [drain-timeout]=2.5 [device]='"cuda"' [weights]='"int8"' [kv-type]='"q8_0"'
  [attention-precision]='"bf16"'
  [rope-scaling]='"yarn"' [rope-factor]=4.0 [rope-orig-ctx]=2048 [gpu-memory]=0.5 [threads]=3
  [kv-tokens]=4096 [context]=1024 [kv-budget]=512 [token-budget]=128 [max-running]=16 [max-waiting]=100
  [intake-frames]=32 [intake-bytes]=2097152 [no-prefix-cache]=true [no-jump-forward]=true
  [worker]='["tcp://127.0.0.1:7801", "tcp://127.0.0.1:7805"]' [data-dir]='"/srv/troupe \"data\" \\ here"'
  [events]='"tcp://127.0.0.1:7802"' [job-concurrency]=2 [batch-share]=4 [batch-step]=32
  [kv-spill-codec]='"int8"' [speculation]='"ngram"' [max-draft]=4 [suffix-memory]=1073741824 [draft-model]='"draft.gguf"'
  [draft-worker]='"tcp://127.0.0.1:7803"' [draft-timeout]=7.25 [worker-timeout]=45.5 [join-listen]='"ipc:///tmp/troupe-join.sock"' [peer]='["tcp://127.0.0.1:7806"]' [draft-kv-tokens]=2048
  [no-kv-spill]=true [session-idle]=60 [session-ttl]=86400 [job-ttl]=3600
  [max-store-bytes]=21474836480 [sweep-interval]=5 [response-cache-bytes]=1048576 [response-cache-ttl]=600
  [auth]='"curve"'
  [server-key]="\"$work/server.secret\"" [clients-dir]="\"$work/clients\"" [insecure]=true
  [worker-key]="\"$work/worker.key\"" [client-queue-share]=0.25 [client-slot-share]=0.75
  [client-page-share]=0.125 [tiers]='["small.gguf", "large.gguf"]' [tier]='"large"' [escalate-threshold]=0.45
  [escalate-budget]=0.25 [escalate-signal]='"tail"' [escalate-hold]=16 [escalate-window]=4 [escalate-within]=0 [tier-workers]='["tcp://127.0.0.1:7804"]' [escalate-for-good]=2
  [summary-model]='"small"'
)
keys=$(sed -nE 's/^(# )?([a-z0-9-]+) =.*/\2/p' "$work/defaults.toml")
[ "$(wc -w <<<"$keys")" -ge 40 ] || fail "print-config lists too few keys: $keys"
missing=""
for k in $keys; do [ -n "${value[$k]+x}" ] || missing="$missing $k"; done
[ -z "$missing" ] || fail "no non-default value here for:$missing (add them to this test)"
for k in $keys; do echo "$k = ${value[$k]}"; done >"$work/all.toml"
print --config "$work/all.toml" >"$work/all.out" 2>"$work/err" || fail "every key: $(cat "$work/err")"
for k in $keys; do
  line="$k = ${value[$k]}"
  grep -qxF -- "$line" "$work/all.out" || fail "every key: '$line' did not come back: $(grep -- "$k =" "$work/all.out")"
  ! grep -qxF -- "$line" "$work/defaults.toml" || fail "every key: '$line' is the default"
done
print --config "$work/all.out" >"$work/all.again"
cmp -s "$work/all.out" "$work/all.again" || fail "every key: $(diff "$work/all.out" "$work/all.again")"
# Underscores stand for dashes.
printf 'kv_tokens = 1024\n' >"$work/underscore.toml"
print --config "$work/underscore.toml" | grep -qx "kv-tokens = 1024" || fail "kv_tokens was not kv-tokens"

# The example in ops/ reads.
example="$(dirname "$0")/../../ops/troupe.example.toml"
print --config "$example" >"$work/example.out" 2>"$work/err" || fail "$example: $(cat "$work/err")"
grep -qx 'speculation = "auto"' "$work/example.out" || fail "example: $(cat "$work/example.out")"

# 2. A flag beats the file; units are strings in the file.
cat >"$work/some.toml" <<EOF
model = "from-file"
kv-tokens = 4096
session-ttl = "2h"
max-store-bytes = "1G"
no-prefix-cache = true
EOF
print --config "$work/some.toml" --kv-tokens 8192 -m from-flag >"$work/some.out"
for line in 'model = "from-flag"' 'kv-tokens = 8192' 'session-ttl = 7200' 'max-store-bytes = 1073741824' \
  'no-prefix-cache = true'; do
  grep -qxF "$line" "$work/some.out" || fail "flag over file: no '$line' in: $(cat "$work/some.out")"
done

# 3, 4. An unknown key, a wrong type, a refused value: exit 1, one line naming the key.
refused() {  # KEY LINE
  printf 'model = "m"\n%s\n' "$2" >"$work/bad.toml"
  if print --config "$work/bad.toml" >"$work/out" 2>"$work/err"; then fail "'$2' was taken"; fi
  [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "^troupe: error: $work/bad.toml:2: .*$1" "$work/err" ||
    fail "'$2': $(cat "$work/err")"
  [ ! -s "$work/out" ] || fail "'$2' printed a configuration"
}
refused "unknown key 'kv-tokenz'" 'kv-tokenz = 1'
refused "kv-tokens: expected an integer, got a string" 'kv-tokens = "lots"'
refused "no-prefix-cache: expected true or false, got an integer" 'no-prefix-cache = 3'
refused "listen: expected a string, got an integer" 'listen = 7700'
refused "draft-timeout: expected a number, got a string" 'draft-timeout = "soon"'
refused "kv-tokens: expected an integer, got an array" 'kv-tokens = [1, 2]'
refused "session-ttl: expected an integer or a string with a unit, got a boolean" 'session-ttl = true'
refused "kv-tokens: Value 10 not in range" 'kv-tokens = 10'
refused "speculation: fast not in" 'speculation = "fast"'
refused "'config' cannot be set" 'config = "other.toml"'
if "$troupe" serve --config "$work/none.toml" 2>"$work/err"; then fail "a missing file was taken"; fi
grep -qx "troupe: error: $work/none.toml: No such file or directory" "$work/err" || fail "missing: $(cat "$work/err")"
printf 'kv-tokens = \n' >"$work/broken.toml"
if print --config "$work/broken.toml" 2>"$work/err"; then fail "broken TOML was taken"; fi
[ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "^troupe: error: $work/broken.toml:1:" "$work/err" ||
  fail "broken TOML: $(cat "$work/err")"

# 5. A server started from a file listens where it says, with its KV pool (4096 tokens: 256 pages).
ep="ipc://$work/s.sock"
cat >"$work/serve.toml" <<EOF
model = "$model"
listen = "$ep"
data-dir = "$work/data"
threads = 1
kv-tokens = 4096
drain-timeout = 1.0
EOF
"$troupe" serve --config "$work/serve.toml" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 600); do grep -q "listening on" "$work/serve.log" && break; sleep 0.05; done
grep -q "listening on $ep; .* 256 pages" "$work/serve.log" || fail "serve: $(cat "$work/serve.log")"
"$troupe" stats --connect "$ep" >"$work/stats.json" || fail "stats against the file's endpoint"
grep -q '"pages_total": 256' "$work/stats.json" || fail "stats: $(cat "$work/stats.json")"
kill -TERM $server
wait $server || fail "serve did not stop cleanly: $(cat "$work/serve.log")"
server=""
echo "serve config: ok"
