#!/usr/bin/env bash
# CurveZMQ as an operator sets it up: keygen, a server admitting two clients
# and an admin, a worker admitting only that server. Checks who gets in
# (no key, an unknown key: refused in the handshake), who owns what
# (sessions, jobs: another client is forbidden, the admin sees all), the
# serve <-> worker link, and that a non-loopback endpoint without
# authentication is refused unless --insecure.
# Usage: curve_auth.sh TROUPE MODEL WORKDIR
set -euo pipefail
troupe="$1" model="$2" work="$3/curve-auth-$$"
mkdir -p "$work/clients" "$work/front"
ep="ipc://$work/s.sock" wep="ipc://$work/w.sock"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 $p 2>/dev/null; done; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
wait_listen() {  # LOG: 60 s, beside CI's other tests
  for _ in $(seq 1200); do grep -q "listening on" "$1" && return 0; sleep 0.05; done
  fail "no 'listening on' in $1 within 60 s: $(cat "$1")"
}

for k in server worker alice bob root carol; do "$troupe" keygen "$work/keys/$k" >/dev/null; done
[ "$(stat -c %a "$work/keys/alice.secret")" = 600 ] || fail "a secret file is mode 600"
if "$troupe" keygen "$work/keys/alice" 2>"$work/err"; then fail "keygen overwrote a key"; fi
grep -q "exists already" "$work/err" || fail "overwrite refusal: $(cat "$work/err")"
cp "$work/keys/alice.key" "$work/keys/bob.key" "$work/clients/"
{ cat "$work/keys/root.key"; echo "admin = true"; } >"$work/clients/root.key"
# Front ends that hand sessions to each other share the server's pair, an admin client of each.
{ cat "$work/keys/server.key"; echo "admin = true"; } >"$work/clients/front.key"
cp "$work/keys/server.key" "$work/front/"  # the worker admits only the front end

"$troupe" worker -m "$model" --listen "$wep" --threads 1 --kv-tokens 4096 --auth curve \
  --server-key "$work/keys/worker.secret" --clients-dir "$work/front" >"$work/worker.log" 2>&1 &
pids+=($!)
wait_listen "$work/worker.log"
"$troupe" serve -m "$model" --listen "$ep" --data-dir "$work/data" --worker "$wep" --auth curve \
  --server-key "$work/keys/server.secret" --clients-dir "$work/clients" --worker-key "$work/keys/worker.key" \
  >"$work/serve.log" 2>&1 &
pids+=($!)
wait_listen "$work/serve.log"

as() {  # NAME COMMAND...: a client command with NAME's key
  local who="$1"; shift
  "$troupe" "$@" --connect "$ep" --connect-timeout 3 --client-key "$work/keys/$who.secret" --server-key "$work/keys/server.key"
}

# Who gets in.
if "$troupe" stats --connect "$ep" --connect-timeout 1 2>"$work/err"; then fail "a client without a key got in"; fi
grep -q "no troupe server answers" "$work/err" || fail "no key: $(cat "$work/err")"
if as carol stats 2>"$work/err"; then fail "a key not in --clients-dir got in"; fi
grep -q "is your key in its --clients-dir" "$work/err" || fail "unknown key: $(cat "$work/err")"
as alice stats | grep -q '"running"' || fail "alice's stats"

# Sessions are their owner's (the turn runs on the worker, over CURVE).
echo "hello" | as alice chat --session notes -n 4 -q >/dev/null 2>"$work/err" || fail "alice's chat: $(cat "$work/err")"
as alice sessions list | grep -Eq '^notes +1 ' || fail "alice lists her session"
as bob sessions list | grep -q notes && fail "bob lists alice's session"
if as bob sessions show notes 2>"$work/err"; then fail "bob reads alice's session"; fi
grep -q "forbidden: session 'notes' belongs to another client" "$work/err" || fail "bob show: $(cat "$work/err")"
if echo "mine now" | as bob chat --session notes -n 4 -q >/dev/null 2>"$work/err"; then fail "bob continues alice's session"; fi
grep -q "forbidden" "$work/err" || fail "bob chat: $(cat "$work/err")"
if as bob sessions delete notes 2>"$work/err"; then fail "bob deletes alice's session"; fi
as root sessions list | grep -q notes || fail "the admin lists every session"

# A second front end (same key pair, its own store, --peer the first) takes alice's session over
# when she comes back through it; bob cannot take it through it either.
ep2="ipc://$work/s2.sock"
"$troupe" serve -m "$model" --listen "$ep2" --data-dir "$work/data2" --auth curve --threads 1 --kv-tokens 4096 \
  --server-key "$work/keys/server.secret" --clients-dir "$work/clients" --peer "$ep" >"$work/serve2.log" 2>&1 &
pids+=($!)
wait_listen "$work/serve2.log"
as2() {
  local who="$1"; shift
  "$troupe" "$@" --connect "$ep2" --connect-timeout 3 --client-key "$work/keys/$who.secret" --server-key "$work/keys/server.key"
}
if echo "mine now" | as2 bob chat --session notes -n 4 -q >/dev/null 2>"$work/err"; then fail "bob took alice's session via a peer"; fi
grep -q "forbidden" "$work/err" || fail "bob via the peer: $(cat "$work/err")"
echo "again" | as2 alice chat --session notes -n 4 -q >/dev/null 2>"$work/err" || fail "alice via the peer: $(cat "$work/err")"
as2 alice sessions list | grep -Eq '^notes +2 ' || fail "the second front end holds alice's session, 2 turns"
as alice sessions list | grep -q notes && fail "the first front end still lists the session it handed over"
grep -q "session 'notes' handed to the front end at $ep2" "$work/serve.log" || fail "hand-off log: $(cat "$work/serve.log")"

# Jobs too.
as alice batch submit --item one --item two -n 4 --watch >"$work/submit.out" 2>"$work/err" || fail "submit: $(cat "$work/err")"
job="$(head -1 "$work/submit.out")"
grep -q "job $job: finished, 2 of 2 items" "$work/submit.out" || fail "alice watches her job: $(cat "$work/submit.out")"
if as bob batch status "$job" 2>"$work/err"; then fail "bob reads alice's job"; fi
grep -q "forbidden: job '$job' belongs to another client" "$work/err" || fail "bob status: $(cat "$work/err")"
as bob batch list | grep -q "$job" && fail "bob lists alice's job"
as root batch status "$job" | grep -q "finished, 2 of 2" || fail "the admin reads every job"
grep -q "refused" "$work/serve.log" && fail "serve logged a refusal: $(cat "$work/serve.log")"

# Beyond the loopback: CURVE, or --insecure said out loud.
port=$((20000 + $$ % 20000))
if "$troupe" serve -m "$model" --listen "tcp://0.0.0.0:$port" --data-dir "$work/data3" >"$work/serve3.log" 2>&1; then
  fail "served 0.0.0.0 without authentication"
fi
grep -q "tcp://0.0.0.0:$port is not a loopback endpoint: serve it with --auth curve" "$work/serve3.log" ||
  fail "non-loopback refusal: $(cat "$work/serve3.log")"
if "$troupe" serve -m "$model" --auth curve --server-key "$work/keys/server.secret" 2>"$work/err"; then
  fail "--auth curve without --clients-dir"
fi
grep -q "needs --server-key (this server's .secret) and --clients-dir" "$work/err" || fail "half the flags: $(cat "$work/err")"
if "$troupe" serve -m "$model" --auth curve --server-key "$work/keys/server.key" --clients-dir "$work/clients" \
  --listen "ipc://$work/s4.sock" --data-dir "$work/data4" 2>"$work/err"; then fail "a public key served as a secret"; fi
grep -q "no secret-key line" "$work/err" || fail "public as secret: $(cat "$work/err")"
echo "curve auth: ok"
