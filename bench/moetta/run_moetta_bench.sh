#!/usr/bin/env bash
# MoETTA adaptation step on ViT-B/16 at batch 8, ttmoe vs PyTorch (torchvision vit_b_16 + the MoETTA
# of tests/reference/moetta_torchvision.py), 2 threads each; bench/report runs it after the core
# benchmarks. PyTorch runs at its best: the current release pinned in requirements/reference.txt (the
# reference environment's Python; TTMOE_BENCH_TORCH_PYTHON=/usr/bin/python3 takes Debian's torch 1.13
# instead), OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE and OpenBLAS's kernels for
# this CPU (openblas_core.sh; they matter to Debian's torch, which uses the system OpenBLAS).
# The two sides alternate process by process for ROUNDS rounds (ttmoe, torch, ttmoe, torch, ...) so
# slow drifts of a shared machine hit both alike; each ratio figure is the median of its per-round
# ratios, each absolute figure the median of its per-round values:
#   moetta_step_over_forward               ttmoe step / ttmoe's own no-adapt forward of the same batch
#                                          (tta::NoAdapt on the plain, unconverted model; in-process the
#                                          two alternate run by run, the round's value is the median of
#                                          the pairs)
#   moetta_step_speedup_vs_pytorch_moetta  torch step / ttmoe step
#   moetta_step_peak_rss_vs_pytorch_moetta ttmoe VmHWM / torch ru_maxrss (both read right after
#                                          warm-up + timed steps, before any unpaired forward)
#   vit_b16_forward_speedup_vs_pytorch     torch plain vit_b_16 no_grad forward / ttmoe plain forward
#                                          (static-shape entry, as bench/vit; PLAIN=0 skips)
# and behind them moetta_{ttmoe,torch}_step_s, moetta_ttmoe_noadapt_forward_s, moetta_*_peak_rss_mb,
# vit_b16_{ttmoe,torch}_forward_s, plus moetta_{ttmoe,torch}_converted_forward_s: a NoGrad forward of
# the MoE-converted model (what MoE-LayerNorms add to a forward; not a denominator of any ratio).
# The 1-minute load average is printed with each round and each figure.
#   [STEPS=3] [WARMUP=1] [FWD_RUNS=STEPS] [PLAIN=1] [MOETTA_STEP_BIN=prebuilt bench_moetta_step]
#     bench/moetta/run_moetta_bench.sh [BUILD_DIR] [ROUNDS]      (default build-moetta-bench, 3 rounds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-moetta-bench}
rounds=${2:-3}
steps=${STEPS:-3}
warmup=${WARMUP:-1}
fwd=${FWD_RUNS:-$steps}
plain=${PLAIN:-1}
# shellcheck source=../openblas_core.sh
. "$here/../openblas_core.sh"
bin=${MOETTA_STEP_BIN:-}
if [ -z "$bin" ]; then  # stand-alone build of this folder
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target bench_moetta_step -j2 >/dev/null
  bin=$build/bench_moetta_step
fi
# shellcheck source=../rounds.sh
. "$here/../rounds.sh"
find_torch_python run_moetta_bench
echo "# PyTorch side: $torch_py, torch $("$torch_py" -c 'import torch; print(torch.__version__)')"
pf=(); [ "$plain" = 1 ] && pf=(--plain-forward)
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "run_moetta_bench: $1 failed:" >&2; tail -20 "$err" >&2; exit 1; }
for r in $(seq 1 "$rounds"); do
  l0=$(load)
  c=$("$bin" --batch 8 --threads 2 --steps "$steps" --warmup "$warmup" --runs "$fwd" "${pf[@]}" 2>"$err") || fail "$bin"
  p=$(OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$torch_py" "$root/tests/reference/moetta_torchvision.py" \
        --bench --batch 8 --steps "$steps" --warmup "$warmup" --forward-runs "$fwd" "${pf[@]}" 2>"$err") || fail "the PyTorch MoETTA"
  l1=$(load)
  cs=$(field ttmoe_moetta_step_s <<<"$c"); cn=$(field ttmoe_noadapt_forward_s <<<"$c"); cr=$(field peak_rss_mb <<<"$c")
  ps=$(field torch_moetta_step_s <<<"$p"); pr=$(field peak_rss_mb <<<"$p")
  sof=$(field ttmoe_step_over_noadapt_forward_paired <<<"$c"); spd=$(div "$ps" "$cs"); rss=$(div "$cr" "$pr")
  keep moetta_step_over_forward "$sof"; keep moetta_step_speedup_vs_pytorch_moetta "$spd"
  keep moetta_step_peak_rss_vs_pytorch_moetta "$rss"
  keep moetta_ttmoe_step_s "$cs"; keep moetta_ttmoe_noadapt_forward_s "$cn"; keep moetta_torch_step_s "$ps"
  keep moetta_ttmoe_peak_rss_mb "$cr"; keep moetta_torch_peak_rss_mb "$pr"
  keep moetta_ttmoe_converted_forward_s "$(field ttmoe_converted_forward_s <<<"$c")"
  keep moetta_torch_converted_forward_s "$(field torch_forward_s <<<"$p")"
  line="round $r (load $l0 -> $l1): ttmoe step ${cs}s no-adapt fwd ${cn}s rss ${cr}MB | torch step ${ps}s rss ${pr}MB"
  line+=" | step/fwd $sof speedup $spd rss ratio $rss"
  if [ "$plain" = 1 ]; then
    cpl=$(field ttmoe_plain_forward_s <<<"$c"); ppl=$(field torch_plain_forward_s <<<"$p")
    keep vit_b16_forward_speedup_vs_pytorch "$(div "$ppl" "$cpl")"
    keep vit_b16_ttmoe_forward_s "$cpl"; keep vit_b16_torch_forward_s "$ppl"
    line+=" (torch step/plain fwd $(div "$ps" "$ppl")) | plain fwd ttmoe ${cpl}s torch ${ppl}s ratio $(div "$ppl" "$cpl")"
  fi
  echo "$line"
done
print_medians moetta_step_over_forward moetta_step_speedup_vs_pytorch_moetta moetta_step_peak_rss_vs_pytorch_moetta \
              vit_b16_forward_speedup_vs_pytorch moetta_ttmoe_step_s moetta_ttmoe_noadapt_forward_s moetta_torch_step_s \
              moetta_ttmoe_peak_rss_mb moetta_torch_peak_rss_mb vit_b16_ttmoe_forward_s vit_b16_torch_forward_s \
              moetta_ttmoe_converted_forward_s moetta_torch_converted_forward_s
