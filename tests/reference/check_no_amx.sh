#!/usr/bin/env bash
# The llama.cpp builds troupe is checked and measured against hold no AMX
# instruction (ops/llama-cpu-flags.sh says why), so they run on every x86 CPU
# CI may have. Disassembles every shared library of the Python oracle and, when
# built, the peer tools of ops/llama-tools.sh.
#   check_no_amx.sh PYTHON [LLAMA_TOOLS_HOME]
set -euo pipefail
python="$1"
tools_home="${2:-${TROUPE_HOME:-$HOME/.cache/troupe}/llama-tools}"
amx='\b(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilerelease|tilezero|tdpb[su][su]d|tdpbf16ps|tdpfp16ps)\b'

# The control: objdump names an AMX instruction when it sees one.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf 'tilerelease\ntdpbssd %%tmm2, %%tmm1, %%tmm0\n' > "$tmp/amx.s"
as -o "$tmp/amx.o" "$tmp/amx.s"
found="$(objdump -d --no-show-raw-insn "$tmp/amx.o" | grep -Ec "$amx" || true)"
[ "$found" = 2 ] || { echo "objdump did not name the 2 AMX instructions of the control ($found)"; exit 1; }

libs=()
lib_dir="$("$python" -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib"))')"
mapfile -t -O "${#libs[@]}" libs < <(find "$lib_dir" -name '*.so*' -type f)
[ "${#libs[@]}" -gt 0 ] || { echo "no shared library under $lib_dir"; exit 1; }
if [ -d "$tools_home" ]; then
  mapfile -t -O "${#libs[@]}" libs < <(find "$tools_home" -path '*/build/bin/*' \( -name '*.so*' -o -name 'llama-bench' \) -type f)
fi
bad=0
for lib in "${libs[@]}"; do
  n="$(objdump -d --no-show-raw-insn "$lib" | grep -Ec "$amx" || true)"
  if [ "$n" != 0 ]; then
    echo "AMX: $n instructions in $lib"
    bad=1
  fi
done
[ "$bad" = 0 ] || exit 1
echo "no AMX instruction in ${#libs[@]} files: ${libs[*]}"
