#!/usr/bin/env bash
# MoETTA adaptation step on ViT-B/16 at batch 8, ttmoe vs PyTorch (torchvision vit_b_16 + the MoETTA
# of tests/reference/moetta_torchvision.py), 2 threads each. The two sides alternate process by
# process for ROUNDS rounds (ttmoe, torch, ttmoe, torch, ...) so slow drifts of a shared machine hit
# both alike; each figure is the median of its per-round ratios:
#   moetta_step_over_forward               ttmoe step / ttmoe NoGrad forward (same converted model, batch;
#                                          in-process the two alternate run by run, median of the pairs)
#   moetta_step_speedup_vs_pytorch_moetta  torch step / ttmoe step
#   moetta_step_peak_rss_vs_pytorch_moetta ttmoe VmHWM / torch ru_maxrss (both read right after
#                                          warm-up + timed steps, before any forward timing)
#   vit_b16_forward_speedup_vs_pytorch     torch plain vit_b_16 no_grad forward / ttmoe plain forward
#                                          (the bench/vit figure, here from 2-run medians; PLAIN=0 skips)
# The 1-minute load average is printed with each round and each figure.
#   [STEPS=3] [WARMUP=1] [FWD_RUNS=STEPS] [PLAIN=1] bench/moetta/run_moetta_bench.sh [BUILD_DIR] [ROUNDS]
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
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target bench_moetta_step -j2 >/dev/null
pf=(); [ "$plain" = 1 ] && pf=(--plain-forward)
load() { cut -d' ' -f1 /proc/loadavg; }
field() { awk -v k="$1:" '$1 == k {print $2}'; }
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
div() { python3 -c "print(f'{$1 / $2:.3f}')"; }
sof=(); spd=(); rss=(); vit=(); loads=()
for r in $(seq 1 "$rounds"); do
  l0=$(load)
  c=$("$build/bench_moetta_step" --batch 8 --threads 2 --steps "$steps" --warmup "$warmup" --runs "$fwd" "${pf[@]}" 2>/dev/null)
  p=$(OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$root/tests/reference/moetta_torchvision.py" \
        --bench --batch 8 --steps "$steps" --warmup "$warmup" --forward-runs "$fwd" "${pf[@]}" 2>/dev/null)
  l1=$(load)
  cs=$(field ttmoe_moetta_step_s <<<"$c"); cf=$(field ttmoe_forward_s <<<"$c"); cr=$(field peak_rss_mb <<<"$c")
  ps=$(field torch_moetta_step_s <<<"$p"); pfw=$(field torch_forward_s <<<"$p"); pr=$(field peak_rss_mb <<<"$p")
  sof+=("$(field ttmoe_step_over_forward_paired <<<"$c")"); spd+=("$(div "$ps" "$cs")"); rss+=("$(div "$cr" "$pr")")
  line="round $r (load $l0 -> $l1): ttmoe step ${cs}s forward ${cf}s rss ${cr}MB | torch step ${ps}s forward ${pfw}s rss ${pr}MB"
  line+=" | step/fwd ${sof[-1]} (torch $(div "$ps" "$pfw")) speedup ${spd[-1]} rss ratio ${rss[-1]}"
  if [ "$plain" = 1 ]; then
    cpl=$(field ttmoe_plain_forward_s <<<"$c"); ppl=$(field torch_plain_forward_s <<<"$p")
    vit+=("$(div "$ppl" "$cpl")")
    line+=" | plain fwd ttmoe ${cpl}s torch ${ppl}s ratio ${vit[-1]}"
  fi
  echo "$line"
  loads+=("$l1")
done
la=$(load)
echo "moetta_step_over_forward: $(med "${sof[@]}")   (per round: ${sof[*]}; load now $la)"
echo "moetta_step_speedup_vs_pytorch_moetta: $(med "${spd[@]}")   (per round: ${spd[*]}; load now $la)"
echo "moetta_step_peak_rss_vs_pytorch_moetta: $(med "${rss[@]}")   (per round: ${rss[*]}; load now $la)"
[ "$plain" = 1 ] && echo "vit_b16_forward_speedup_vs_pytorch: $(med "${vit[@]}")   (per round: ${vit[*]}; load now $la)"
exit 0
