#!/usr/bin/env bash
# GMoE-S/16 training step and evaluation, ttmoe (bench_gmoe_step, gmoe_step.cpp) vs PyTorch
# (gmoe_torch.py: timm's ViT-S/16 with the fastest MoE dispatch found, see below), 2 threads each;
# bench/report runs it in its `gmoe` section. PyTorch runs at its best: the reference environment's
# torch (TTMOE_BENCH_TORCH_PYTHON overrides), torch.set_num_threads(2), OMP_NUM_THREADS=2
# OMP_WAIT_POLICY=PASSIVE, fused Adam where available, and glibc's malloc told to keep freed memory
# (TORCH_GLIBC_TUNABLES, default glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=64 GiB: no block
# goes back to the kernel, so a step does not fault its activations in afresh; a 32-image step took
# 57 s against 71 s without it, loaded EPYC), the counterpart of the CPU caching pool, whose cap
# follows the working set so that bench_gmoe_step reuses a whole step (core/caching_pool.hpp).
# The sides alternate process by process (ttmoe train, torch train, ..., then ttmoe eval, torch eval,
# ...) for ROUNDS rounds so slow drifts of a shared machine hit both alike. Each ratio is the median
# of its per-round ratios, each absolute figure the median of its per-round values:
#   gmoe_train_step_speedup_vs_pytorch   torch step seconds / ttmoe step seconds       (target >= 1.3)
#   gmoe_eval_speedup_vs_pytorch         ttmoe images/s / torch images/s              (target >= 1.2)
#   gmoe_{ttmoe,torch}_step_s, gmoe_{ttmoe,torch}_eval_images_per_s, and the peak RSS of each process
#   gmoe_{ttmoe,torch}_{train,eval}_peak_rss_mb (VmHWM / ru_maxrss at the process's end)
#   gmoe_{ttmoe,torch}_gemm_gflops   each side's GEMM rate at a ViT-S/16 block's four linear shapes with
#                                    the evaluation's token rows (--mode gemm, after each eval pair):
#                                    the ceiling the model's ~9.2 GFLOP per image forward runs under
# A step is GMoE's DomainBed step on STEP_IMAGES images (3 domains x 32 concatenated; forward with
# router noise, expert dropout and drop-path, cross-entropy + 0.01 l_aux, backward, Adam); evaluation
# is NoGrad / inference_mode forwards of EVAL_IMAGES images. Per process: WARMUP untimed runs, then
# STEPS (train) or EVAL_RUNS (eval) timed ones, the process's figure their median.
#   [STEP_IMAGES=96] [EVAL_IMAGES=64] [STEPS=1] [EVAL_RUNS=2] [WARMUP=1] [TORCH_DISPATCH=padded]
#   [TORCH_COMPILE=0] [TORCH_GLIBC_TUNABLES=...] [GMOE_STEP_BIN=prebuilt bench_gmoe_step] bench/gmoe/run_gmoe_bench.sh [BUILD_DIR] [ROUNDS]
# (default build-gmoe-bench, 3 rounds). TORCH_DISPATCH=segments takes per-expert token segments and
# addmm instead of Tutel's padded [E, C, D] slots with baddbmm (slower here although the padded form
# does 1.5x the expert FLOPs; gmoe_torch.py --mode dispatch compares them; docs/design.md "GMoE").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-gmoe-bench}
rounds=${2:-3}
step_images=${STEP_IMAGES:-96}
eval_images=${EVAL_IMAGES:-64}
steps=${STEPS:-1}
eval_runs=${EVAL_RUNS:-2}
warmup=${WARMUP:-1}
dispatch=${TORCH_DISPATCH:-padded}
compile=(); [ "${TORCH_COMPILE:-0}" = 1 ] && compile=(--compile)
# shellcheck source=../openblas_core.sh
. "$here/../openblas_core.sh"  # OpenBLAS's kernels for this CPU (they matter to a torch on OpenBLAS)
# shellcheck source=../rounds.sh
. "$here/../rounds.sh"
bin=${GMOE_STEP_BIN:-}
if [ -z "$bin" ]; then  # stand-alone build of this folder
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target bench_gmoe_step -j2 >/dev/null
  bin=$build/bench_gmoe_step
fi
find_torch_python run_gmoe_bench
tunables=${TORCH_GLIBC_TUNABLES-glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736}
echo "# PyTorch side: $torch_py, torch $("$torch_py" -c 'import torch; print(torch.__version__)'), dispatch $dispatch${compile:+, torch.compile}, GLIBC_TUNABLES=${tunables:-<none>}"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "run_gmoe_bench: $1 failed:" >&2; tail -20 "$err" >&2; exit 1; }
# The PyTorch side checks its MoE formulations against the parity tests' reference layer first.
OMP_NUM_THREADS=2 "$torch_py" "$here/gmoe_torch.py" --check 2>"$err" | sed 's/^/# /' || fail "gmoe_torch.py --check"
torch_run() {
  GLIBC_TUNABLES=$tunables OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$torch_py" "$here/gmoe_torch.py" --threads 2 --dispatch "$dispatch" \
    "${compile[@]}" "$@"
}
# One round of MODE (train or eval) with IMAGES images and RUNS timed runs per process: a ttmoe
# process, then a PyTorch one; keeps the round's figures. Evaluation rounds also time both GEMM rates.
round() {
  local mode=$1 images=$2 runs=$3 r=$4 l0 c p cv pv what unit ratio name line
  l0=$(load)
  c=$("$bin" --mode "$mode" --images "$images" --threads 2 --runs "$runs" --warmup "$warmup" 2>"$err") || fail "$bin"
  p=$(torch_run --mode "$mode" --images "$images" --runs "$runs" --warmup "$warmup" 2>"$err") || fail "gmoe_torch.py"
  if [ "$mode" = train ]; then
    what=step_s unit=s name=gmoe_train_step_speedup_vs_pytorch
    cv=$(field ttmoe_gmoe_step_s <<<"$c") pv=$(field torch_gmoe_step_s <<<"$p") ratio=$(div "$pv" "$cv")
  else
    what=eval_images_per_s unit=" img/s" name=gmoe_eval_speedup_vs_pytorch
    cv=$(field ttmoe_gmoe_eval_images_per_s <<<"$c") pv=$(field torch_gmoe_eval_images_per_s <<<"$p") ratio=$(div "$cv" "$pv")
  fi
  keep "$name" "$ratio"
  keep "gmoe_ttmoe_$what" "$cv"; keep "gmoe_torch_$what" "$pv"
  keep "gmoe_ttmoe_${mode}_peak_rss_mb" "$(field peak_rss_mb <<<"$c")"
  keep "gmoe_torch_${mode}_peak_rss_mb" "$(field peak_rss_mb <<<"$p")"
  line="# $mode round $r (load $l0 -> $(load)): ttmoe $cv$unit rss $(field peak_rss_mb <<<"$c")MB"
  line+=" | torch $pv$unit rss $(field peak_rss_mb <<<"$p")MB | speedup $ratio"
  if [ "$mode" = eval ]; then  # the GEMM rate each side's arithmetic rests on, at the evaluation's token rows
    c=$("$bin" --mode gemm --images "$images" --threads 2 --runs 3 --warmup 1 2>"$err") || fail "$bin --mode gemm"
    p=$(torch_run --mode gemm --images "$images" --runs 3 --warmup 1 2>"$err") || fail "gmoe_torch.py --mode gemm"
    keep gmoe_ttmoe_gemm_gflops "$(field ttmoe_gemm_gflops <<<"$c")"; keep gmoe_torch_gemm_gflops "$(field torch_gemm_gflops <<<"$p")"
    line+=" | GEMM rate ttmoe $(field ttmoe_gemm_gflops <<<"$c") torch $(field torch_gemm_gflops <<<"$p") GFLOP/s"
  fi
  echo "$line"
}
echo "# train: $step_images images of 224 px per step, $steps timed step(s) after $warmup warm-up per process, $rounds rounds"
for r in $(seq 1 "$rounds"); do round train "$step_images" "$steps" "$r"; done
echo "# eval: $eval_images images per forward, $eval_runs timed forward(s) after $warmup warm-up per process, $rounds rounds"
for r in $(seq 1 "$rounds"); do round eval "$eval_images" "$eval_runs" "$r"; done
print_medians gmoe_train_step_speedup_vs_pytorch gmoe_eval_speedup_vs_pytorch gmoe_ttmoe_step_s gmoe_torch_step_s \
              gmoe_ttmoe_eval_images_per_s gmoe_torch_eval_images_per_s gmoe_ttmoe_train_peak_rss_mb \
              gmoe_torch_train_peak_rss_mb gmoe_ttmoe_eval_peak_rss_mb gmoe_torch_eval_peak_rss_mb \
              gmoe_ttmoe_gemm_gflops gmoe_torch_gemm_gflops
