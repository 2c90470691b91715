#!/usr/bin/env bash
# The CMake flags llama.cpp is built with here (the test oracle in ops/python-env.sh, the peer
# tools in ops/llama-tools.sh): this CPU's x86 instruction sets named one by one, AMX always off.
#
#   ops/llama-cpu-flags.sh      prints the flags on one line
#
# Why not GGML_NATIVE (-march=native): on an Intel Xeon with AMX it compiles llama.cpp's AMX
# kernels, which crashed the oracle there (SIGSEGV in the forward tests, SIGILL at a tileloadd
# in llama-bench); and -march=native expands to explicit -mamx-* flags that a -mno-amx-* given
# before it cannot undo. The AVX-512/AVX2 kernels the oracle runs are the same either way.
# docs/DECISIONS.md, "The llama.cpp oracle without AMX".
set -euo pipefail
flags=()
if [ "$(uname -m)" = x86_64 ]; then
  cpu=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() { [[ "$cpu" == *" $1 "* ]]; }
  on() { if has "$2"; then flags+=("-D$1=ON"); else flags+=("-D$1=OFF"); fi; }
  flags+=(-DGGML_NATIVE=OFF)
  on GGML_SSE42 sse4_2
  on GGML_AVX avx
  on GGML_AVX2 avx2
  on GGML_FMA fma
  on GGML_F16C f16c
  on GGML_BMI2 bmi2
  on GGML_AVX_VNNI avx_vnni
  # llama.cpp's AVX512 switch is F, CD, VL, DQ and BW together.
  if has avx512f && has avx512cd && has avx512vl && has avx512dq && has avx512bw; then
    flags+=(-DGGML_AVX512=ON)
    on GGML_AVX512_VBMI avx512vbmi
    on GGML_AVX512_VNNI avx512_vnni
    on GGML_AVX512_BF16 avx512_bf16
  else
    flags+=(-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
  fi
  flags+=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
else
  flags+=(-DGGML_NATIVE=ON)  # no AMX outside x86
fi
echo "${flags[*]}"
