#!/usr/bin/env bash
# GPU figures of the CUDA backend, side by side with PyTorch on the same GPU (never run by CI):
#   vit_b16_gpu_forward_images_per_s         ttmoe ViT-B/16 no-grad forward, batch 64, float32
#   vit_b16_gpu_forward_speedup_vs_pytorch   ttmoe images/s over torchvision vit_b_16's
#   moetta_gpu_step_s                        ttmoe MoETTA adaptation step, batch 64
#   moetta_gpu_step_speedup_vs_pytorch       PyTorch MoETTA step time (tests/reference/moetta_torchvision.py) over ttmoe's
#   moetta_gpu_step_over_forward             ttmoe step / ttmoe forward (the paper reports 2.47 for PyTorch)
#   moetta_gpu_step_peak_mb_vs_pytorch       ttmoe pool peak over torch.cuda.max_memory_allocated
# The two sides alternate process by process for ROUNDS rounds; each figure is the median of the
# per-round values. Both use float32 GEMMs without TF32.
#   [ROUNDS=3] [RUNS=10] [WARMUP=3] [PYTHON=python3] bench/gpu/run_gpu_bench.sh [BUILD_DIR]
# Extra CMake arguments (e.g. -DCMAKE_PREFIX_PATH=... for the dependencies) go in CMAKE_ARGS.
# BENCH_BIN=path runs an already built bench_vit_gpu instead of configuring and building one (for a
# GPU machine that lacks the build's dependencies: build here with -DTTMOE_CUDA=ON, copy the binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-gpu-bench}
rounds=${ROUNDS:-3}; runs=${RUNS:-10}; warmup=${WARMUP:-3}; py=${PYTHON:-python3}
bin=${BENCH_BIN:-$build/bench_vit_gpu}
if [ -z "${BENCH_BIN:-}" ]; then
  # shellcheck disable=SC2086
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="${CUDACXX:-nvcc}" ${CMAKE_ARGS:-} >/dev/null
  cmake --build "$build" --target bench_vit_gpu -j"$(nproc)" >/dev/null
fi
field() { awk -v k="$1:" '$1 == k {print $2}'; }
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
div() { python3 -c "print(f'{$1 / $2:.3f}')"; }
ips=(); fsp=(); sst=(); ssp=(); sof=(); tsof=(); mem=()
for r in $(seq 1 "$rounds"); do
  c=$("$bin" --batch 64 --runs "$runs" --warmup "$warmup")
  p=$("$py" "$root/tests/reference/moetta_torchvision.py" --bench-gpu --batch 64 --steps "$runs" --warmup "$warmup")
  [ "$r" = 1 ] && { echo "$c" | head -1; echo "$p" | head -1; }
  cf=$(field ttmoe_gpu_forward_s <<<"$c"); cs=$(field ttmoe_gpu_moetta_step_s <<<"$c")
  pf=$(field torch_gpu_forward_s <<<"$p"); ps=$(field torch_gpu_moetta_step_s <<<"$p")
  ips+=("$(field ttmoe_gpu_forward_images_per_s <<<"$c")"); fsp+=("$(div "$pf" "$cf")")
  sst+=("$cs"); ssp+=("$(div "$ps" "$cs")")
  sof+=("$(field ttmoe_gpu_step_over_forward <<<"$c")"); tsof+=("$(field torch_gpu_step_over_forward <<<"$p")")
  mem+=("$(div "$(field ttmoe_gpu_step_peak_mb <<<"$c")" "$(field torch_gpu_step_peak_mb <<<"$p")")")
  echo "round $r: ttmoe forward ${cf}s step ${cs}s | torch forward ${pf}s step ${ps}s"
done
echo "vit_b16_gpu_forward_images_per_s: $(med "${ips[@]}")   (per round: ${ips[*]})"
echo "vit_b16_gpu_forward_speedup_vs_pytorch: $(med "${fsp[@]}")   (per round: ${fsp[*]})"
echo "moetta_gpu_step_s: $(med "${sst[@]}")   (per round: ${sst[*]})"
echo "moetta_gpu_step_speedup_vs_pytorch: $(med "${ssp[@]}")   (per round: ${ssp[*]})"
echo "moetta_gpu_step_over_forward: $(med "${sof[@]}")   (torch: $(med "${tsof[@]}"); paper: 2.47)"
echo "moetta_gpu_step_peak_mb_vs_pytorch: $(med "${mem[@]}")   (per round: ${mem[*]})"
