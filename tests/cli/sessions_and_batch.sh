#!/usr/bin/env bash
# The session and batch commands as a user meets them, against a real
# `troupe serve`: chat --session reads turns from stdin and resumes after a
# restart; sessions list/show/delete; batch submit --watch, results, status.
# Usage: sessions_and_batch.sh TROUPE MODEL WORKDIR
set -euo pipefail
troupe="$1" model="$2" work="$3/sessions-batch-$$"
mkdir -p "$work"
ep="ipc://$work/s.sock"
server=""
start() {
  "$troupe" serve -m "$model" --listen "$ep" --data-dir "$work/data" --threads 1 --kv-tokens 4096 >"$work/serve.log" 2>&1 &
  server=$!
  # 60 s: a restart after kill -9 recovers RocksDB's log, slow beside CI's other tests
  for _ in $(seq 1200); do grep -q "listening on" "$work/serve.log" && return 0; sleep 0.05; done
  fail "serve did not listen within 60 s: $(cat "$work/serve.log")"
}
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

start
printf 'first line\nsecond line\n' | "$troupe" chat --connect "$ep" --session notes -n 4 -q >/dev/null 2>"$work/chat.err" ||
  fail "first chat: $(cat "$work/chat.err")"
"$troupe" sessions list --connect "$ep" | grep -Eq '^notes +2 ' || fail "two turns listed"
kill -9 $server; wait $server 2>/dev/null || true
start
echo "third line" | "$troupe" chat --connect "$ep" --session notes -n 4 2>"$work/chat.err" >/dev/null ||
  fail "chat after the restart: $(cat "$work/chat.err")"
grep -q "resuming session 'notes'" "$work/chat.err" || fail "resumed"
show="$("$troupe" sessions show notes --connect "$ep" 2>&1)" || fail "show: $show"
grep -q "3 turns" <<<"$show" || fail "three turns: $show"
for line in "first line" "second line" "third line"; do grep -qx "$line" <<<"$show" || fail "shows '$line'"; done
"$troupe" sessions delete notes --connect "$ep" | grep -q "deleted session 'notes'" || fail "deleted"
if "$troupe" sessions show notes --connect "$ep" 2>"$work/err"; then fail "a deleted session shows"; fi
grep -q "unknown_session: no session 'notes'" "$work/err" || fail "unknown session error: $(cat "$work/err")"

mkdir -p "$work/papers"
for i in 1 2 3; do echo "Paper $i: the quick brown fox." >"$work/papers/p$i.txt"; done
"$troupe" batch submit --connect "$ep" --dir "$work/papers" --template 'Summarize: {item}' -n 6 --seed 1 --watch \
  >"$work/submit.out" 2>"$work/watch.err" || fail "submit: $(cat "$work/submit.out" "$work/watch.err")"
job="$(head -1 "$work/submit.out")"
grep -q "job $job: finished, 3 of 3 items" "$work/submit.out" || fail "watch: $(cat "$work/submit.out" "$work/watch.err")"
grep -q "3/3 items" "$work/watch.err" || fail "progress bar: $(cat "$work/watch.err")"
"$troupe" batch status "$job" --connect "$ep" | grep -q "finished, 3 of 3 items" || fail "status"
"$troupe" batch results "$job" --connect "$ep" --out "$work/out" 2>"$work/err" || fail "results: $(cat "$work/err")"
[ "$(ls "$work/out" | wc -l)" = 3 ] || fail "three result files"
"$troupe" batch list --connect "$ep" | grep -q "$job" || fail "listed"
if "$troupe" batch status job-none --connect "$ep" 2>"$work/err"; then fail "an unknown job has a status"; fi
grep -q "unknown_job" "$work/err" || fail "unknown job error"
# Offline: the stopped server's store checks clean and holds the job.
kill -9 $server; wait $server 2>/dev/null || true; server=""
check="$("$troupe" store check --data-dir "$work/data")" || fail "store check: $check"
grep -q "^ok$" <<<"$check" && grep -q " 1 jobs" <<<"$check" || fail "store check: $check"
if "$troupe" store check --data-dir "$work/none" 2>"$work/err"; then fail "a missing store checks"; fi
grep -q "holds no store" "$work/err" || fail "missing store: $(cat "$work/err")"
echo "sessions and batch commands: ok"
