#!/usr/bin/env bash
# Every client command against an endpoint where nothing listens exits 1
# within its --connect-timeout (not its --timeout), with one line naming the
# endpoint. Usage: dead_endpoint.sh TROUPE WORKDIR
set -uo pipefail
troupe="$1" ep="ipc://$2/nobody-$$.sock"
for cmd in "stats" "sessions list" "batch list" "batch status job-x" "complete -p hi" "chat -p hi"; do
  began=$(date +%s%N)
  # shellcheck disable=SC2086
  out="$("$troupe" $cmd --connect "$ep" --connect-timeout 0.5 2>&1)"
  rc=$? ms=$((($(date +%s%N) - began) / 1000000))
  want="troupe: error: no troupe server answers at $ep (waited 0.5 s; is \`troupe serve\` running there?)"
  if [ "$rc" != 1 ] || [ "$ms" -ge 5000 ] || [ "$out" != "$want" ]; then
    echo "FAIL: troupe $cmd: exit $rc after $ms ms: $out"
    exit 1
  fi
done
echo "dead endpoint: ok"
