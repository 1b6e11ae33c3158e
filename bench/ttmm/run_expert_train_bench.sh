#!/usr/bin/env bash
# Training one TTMM expert, ttmoe (bench_ttmm_expert_train, expert_train.cpp: ttmm::train_expert) vs
# PEFT + transformers (expert_train_torch.py), 2 threads each, on the same token ids: a small
# randomly initialised Llama (hidden 512, 4 layers, 8 heads / 4 KV heads, MLP 1376, vocab 8192, an
# untied head), a rank-64 alpha-16 LoRA on all seven projections of every block, AdamW, batch 4 of
# SEQ tokens. The sides alternate process by process for ROUNDS rounds; each figure is the median of
# its per-round values, the ratio the median of the per-round ratios:
#   ttmm_expert_train_speedup_vs_peft           ttmoe tokens/s / PyTorch tokens/s     (target >= 1.3)
#   ttmm_{ttmoe,torch}_expert_train_tokens_per_s the absolute rates behind it
#   [SEQ=256] [STEPS=3] [WARMUP=1] [TTMM_TRAIN_BIN=prebuilt bench_ttmm_expert_train]
#   bench/ttmm/run_expert_train_bench.sh [BUILD_DIR] [ROUNDS]      (default build-ttmm-bench, 3 rounds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-ttmm-bench}
rounds=${2:-3}
seq_len=${SEQ:-256}
steps=${STEPS:-3}
warmup=${WARMUP:-1}
# shellcheck source=../openblas_core.sh
. "$here/../openblas_core.sh"
# shellcheck source=../rounds.sh
. "$here/../rounds.sh"
bin=${TTMM_TRAIN_BIN:-}
if [ -z "$bin" ]; then  # stand-alone build of this folder
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target bench_ttmm_expert_train -j2 >/dev/null
  bin=$build/bench_ttmm_expert_train
fi
find_torch_python run_expert_train_bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
err=$tmp/err
fail() { echo "run_expert_train_bench: $1 failed:" >&2; tail -20 "$err" >&2; exit 1; }
# The same token ids for both sides.
"$torch_py" -c "import numpy as np; np.random.default_rng(0).integers(0, 8192, size=($steps + $warmup) * 4 * $seq_len).astype('<i8').tofile('$tmp/tokens.bin')"
args=(--seq "$seq_len" --steps "$steps" --warmup "$warmup" --threads 2 --tokens "$tmp/tokens.bin")
echo "# PyTorch side: $torch_py, torch $("$torch_py" -c 'import torch; print(torch.__version__)'), peft $("$torch_py" -c 'import peft; print(peft.__version__)')"
echo "# one expert: batch 4 x $seq_len tokens, rank 64, $steps timed step(s) after $warmup warm-up per process, $rounds rounds"
for r in $(seq 1 "$rounds"); do
  l0=$(load)
  c=$("$bin" "${args[@]}" 2>"$err") || fail "$bin"
  p=$(OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$torch_py" "$here/expert_train_torch.py" "${args[@]}" 2>"$err") ||
    fail "expert_train_torch.py"
  cv=$(field ttmoe_expert_train_tokens_per_s <<<"$c") pv=$(field torch_expert_train_tokens_per_s <<<"$p")
  keep ttmm_expert_train_speedup_vs_peft "$(div "$cv" "$pv")"
  keep ttmm_ttmoe_expert_train_tokens_per_s "$cv"
  keep ttmm_torch_expert_train_tokens_per_s "$pv"
  echo "# round $r (load $l0 -> $(load)): ttmoe $cv tok/s | PEFT + transformers $pv tok/s"
done
print_medians ttmm_expert_train_speedup_vs_peft ttmm_ttmoe_expert_train_tokens_per_s ttmm_torch_expert_train_tokens_per_s
