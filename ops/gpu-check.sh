#!/usr/bin/env bash
# The CUDA backend on a GPU machine, in one pass of about 8 minutes: the CUDA
# tests, the real-shape checks against the CPU backend, and the benchmark
# against HF transformers on the same GPU. Binaries come prebuilt in .gpu/
# (ops/gpu-bundle.sh); synthetic models with the real shapes of
# Qwen2.5-0.5B/1.5B are made here by `troupe make-model`. Logs and
# results.json go to $OUT (the device tool brings them back).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-/tmp/troupe-gpu-check}"
mkdir -p "$out"
bin="${TROUPE_GPU_BIN:-$root/.gpu}"
models="${TROUPE_GPU_MODELS:-/tmp/troupe-gpu-models}"
mkdir -p "$models"
exec > >(tee "$out/gpu-check.log") 2>&1

# cuBLAS 13 from the CUDA image, or from the Python wheels beside PyTorch.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         "$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)"; do
  if [ -n "$d" ] && [ -e "$d/libcublas.so.13" ]; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$bin/lib"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
"$bin/troupe" --help > /dev/null || { echo "troupe binary does not run here"; ldd "$bin/troupe"; exit 1; }

step() { echo "=== $* ($(date +%T))"; }
shape_q05=(--embd 896 --layers 24 --heads 14 --kv-heads 2 --ff 4864 --vocab 151936 --context 4096)
shape_q15=(--embd 1536 --layers 28 --heads 12 --kv-heads 2 --ff 8960 --vocab 151936 --context 4096)
step "making real-shape synthetic models in the background"
makers=()
make() { [ -s "$models/$1" ] || { "$bin/troupe" make-model -o "$models/$1" "${@:2}" & makers+=($!); }; }
make q05-BF16.gguf --type BF16 "${shape_q05[@]}"
make q05-Q8_0.gguf --type Q8_0 "${shape_q05[@]}"
make q05-Q4_0.gguf --type Q4_0 "${shape_q05[@]}"
make q15-BF16.gguf --type BF16 "${shape_q15[@]}"

if [ -z "${SKIP_TESTS:-}" ]; then
  step "CUDA tests"
  timeout 120 "$bin/troupe_cuda_tests" --durations yes 2>&1 | tee "$out/cuda-tests.log"
fi
# Wait for the model makers only: a bare `wait` would also wait for the tee above.
for p in "${makers[@]}"; do wait "$p"; done
ls -la "$models"

for shape in q05 q15; do
  for w in bf16 int8 int4; do
    step "troupe bench $shape $w"
    timeout "${BENCH_TIMEOUT:-45}" "$bin/troupe" bench -m "$models/$shape-BF16.gguf" --device cuda --weights "$w" --threads 16 \
      --batch 1,16,64,256 --prompt-tokens 128 --gen-tokens 128 --repeat "${REPEAT:-2}" | tee -a "$out/$shape-troupe.jsonl"
  done
done
for shape in q05 q15; do
  step "HF transformers $shape"
  PYTHONUNBUFFERED=1 timeout "${HF_TIMEOUT:-60}" python3 ops/bench/hf_generate.py "$shape" 1,16,64,256 128 32 | tee -a "$out/hf.jsonl"
done
step "summary"
python3 ops/bench/gpu_summary.py "$out"

if [ -z "${SKIP_REAL:-}" ]; then
  step "real shapes against the CPU backend"
  TROUPE_CUDA_REAL_DIR="$models" timeout "${REAL_TIMEOUT:-100}" "$bin/troupe_cuda_tests" "[.real]" 2>&1 | tee "$out/real-shapes.log"
fi
