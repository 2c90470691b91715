#!/usr/bin/env bash
# Retention against a real `troupe serve`: with a tiny --session-ttl and
# --job-ttl, a session and a finished job are listed, then swept: gone from
# the listings, unknown_session / unknown_job, and one log line says so. A
# duration that does not parse, or a cap below 64M, is one line of error.
# Usage: retention.sh TROUPE MODEL WORKDIR
set -euo pipefail
troupe="$1" model="$2" work="$3/retention-$$"
mkdir -p "$work"
ep="ipc://$work/s.sock"
server=""
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if timeout 30 "$troupe" serve -m "$model" --listen "$ep" --data-dir "$work/data" --session-ttl 5x 2>"$work/err"; then
  fail "a bad duration was taken"
fi
[ "$(wc -l <"$work/err")" -le 2 ] && grep -q "session-ttl" "$work/err" || fail "bad duration: $(cat "$work/err")"
if timeout 30 "$troupe" serve -m "$model" --listen "$ep" --data-dir "$work/data" --max-store-bytes 1M 2>"$work/err"; then
  fail "a cap below 64M was taken"
fi
grep -qx "troupe: error: --max-store-bytes must be 0 (no cap) or at least 64M" "$work/err" || fail "cap: $(cat "$work/err")"
[ ! -e "$work/data" ] || fail "a refused serve created its store"

"$troupe" serve -m "$model" --listen "$ep" --data-dir "$work/data" --threads 1 --kv-tokens 4096 \
  --session-ttl 4s --job-ttl 4s >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1200); do grep -q "listening on" "$work/serve.log" && break; sleep 0.05; done
grep -q "listening on" "$work/serve.log" || fail "serve did not listen: $(cat "$work/serve.log")"

echo "hello" | "$troupe" chat --connect "$ep" --session brief -n 4 -q >/dev/null 2>"$work/chat.err" ||
  fail "chat: $(cat "$work/chat.err")"
"$troupe" sessions list --connect "$ep" | grep -Eq '^brief ' || fail "the new session is listed"
echo "Paper: the quick brown fox." >"$work/item.txt"
"$troupe" batch submit --connect "$ep" --file "$work/item.txt" -n 4 --seed 1 --watch >"$work/submit.out" 2>/dev/null ||
  fail "submit: $(cat "$work/submit.out")"
job="$(head -1 "$work/submit.out")"
"$troupe" batch status "$job" --connect "$ep" | grep -q "finished" || fail "the job finished"

# 4 s TTL, a sweep every second: both gone within a few seconds.
for _ in $(seq 200); do
  if ! "$troupe" sessions list --connect "$ep" | grep -Eq '^brief ' &&
    ! "$troupe" batch list --connect "$ep" | grep -q "$job"; then
    break
  fi
  sleep 0.1
done
if "$troupe" sessions show brief --connect "$ep" 2>"$work/err"; then fail "the expired session still shows"; fi
grep -q "unknown_session" "$work/err" || fail "unknown session: $(cat "$work/err")"
if "$troupe" batch status "$job" --connect "$ep" 2>"$work/err"; then fail "the expired job still has a status"; fi
grep -q "unknown_job" "$work/err" || fail "unknown job: $(cat "$work/err")"
grep -Eq "retention: deleted [0-9]+ sessions, [0-9]+ jobs" "$work/serve.log" || fail "no sweep logged: $(cat "$work/serve.log")"
echo "retention: ok"
