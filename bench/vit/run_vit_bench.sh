#!/usr/bin/env bash
# Alternates the ttmoe and torchvision ViT-B/16 forward benchmarks (batch 8, 2 threads each) for
# ROUNDS rounds, so slow drifts of a shared machine hit both sides alike, and prints the median of
# the per-round ratios ttmoe / torchvision as `vit_b16_forward_speedup_vs_pytorch: R`.
#   [RUNS=5] [WARMUP=1] bench/vit/run_vit_bench.sh [BUILD_DIR] [ROUNDS]   (default build-vit-bench, 3 rounds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-vit-bench}
rounds=${2:-3}
runs=${RUNS:-5}      # timed forwards per side per round (median), after WARMUP untimed ones
warmup=${WARMUP:-1}
# shellcheck source=../openblas_core.sh
. "$here/../openblas_core.sh"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target bench_vit_forward -j2 >/dev/null
ratios=()
for r in $(seq 1 "$rounds"); do
  t=$("$build/bench_vit_forward" --batch 8 --threads 2 --runs "$runs" --warmup "$warmup" | awk '/ttmoe_vit_b16_images_per_s/ {print $2}')
  p=$(OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$here/torchvision_vit.py" --batch 8 --runs "$runs" --warmup "$warmup" |
      awk '/torchvision_vit_b16_images_per_s/ {print $2}')
  ratio=$(python3 -c "print(f'{$t / $p:.3f}')")
  echo "round $r: ttmoe_vit_b16_images_per_s: $t torchvision_vit_b16_images_per_s: $p ratio: $ratio"
  ratios+=("$ratio")
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
echo "vit_b16_forward_speedup_vs_pytorch: $median"
