#!/usr/bin/env bash
# TTMM merge figures, ttmoe vs PEFT in PyTorch, 2 threads each, alternating process by process for
# ROUNDS rounds (bench/rounds.sh; medians over the rounds):
#   ttmm_merge_speedup_vs_peft   PEFT add_weighted_adapter(cat) + merge_and_unload + restore from a clone
#                                / ttmoe DenseMerge + exact restore, same 10 rank-64 experts       (>= 3)
#   ttmm_merge_over_limit        ttmoe merge + restore / max(FLOP time at the measured GEMM peak,
#                                bytes at the measured triad bandwidth)                            (<= 1.3)
#   ttmm_overhead_tokens_3/10    selection + merge-or-apply + restore for 3 / 10 experts, automatic
#                                choice, 100 generated tokens, in base-model decode tokens     (<= 10 / 20)
#                                with dense merges in TTMM_MERGE_ARITHMETIC (default bf16: BF16
#                                products, F32 sums, ttmm::MergeArithmetic::bf16_products, as the
#                                checkpoint is BF16); ttmm_overhead_tokens_f32_3/10 with F32 merges
# and the seconds behind them. ttmoe's base model is saved once as a BF16 checkpoint and loaded back
# mapped (--checkpoint), so its restores copy from the mapping (ttmm/mapped_weights.hpp). Llama-3.2-1B widths with LAYERS layers (default 4 of the 16, so both
# sides fit in memory on a shared machine; the merge scales linearly with the layers).
#   [LAYERS=4] [TTMM_MERGE_BIN=prebuilt bench_ttmm_merge] bench/ttmm/run_merge_bench.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-ttmm-bench}
rounds=${2:-3}
layers=${LAYERS:-4}
# shellcheck source=../openblas_core.sh
. "$here/../openblas_core.sh"
# shellcheck source=../rounds.sh
. "$here/../rounds.sh"
bin=$(bench_binary "${TTMM_MERGE_BIN:-}" "$here" "$build" bench_ttmm_merge)
find_torch_python run_merge_bench
experts=$(mktemp -d)
err=$(mktemp)
trap 'rm -rf "$experts" "$err"' EXIT
fail() { echo "run_merge_bench: $1 failed:" >&2; tail -20 "$err" >&2; exit 1; }
"$bin" --layers "$layers" --write-experts "$experts" --checkpoint "$experts/base" 2>"$err" || fail "writing the experts"
echo "# TTMM merge: Llama-3.2-1B widths, $layers layers, 10 rank-64 experts on all 7 linears, 2 threads per side, $rounds rounds"
for r in $(seq 1 "$rounds"); do
  c=$("$bin" --layers "$layers" --threads 2 --checkpoint "$experts/base" --arithmetic "${TTMM_MERGE_ARITHMETIC:-bf16}" \
        2>"$err") || fail "$bin"
  p=$(OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$torch_py" "$here/merge_peft.py" \
        --experts "$experts" --layers "$layers" --threads 2 2>"$err") || fail "the PEFT peer"
  cs=$(field ttmoe_merge_restore_s <<<"$c"); lim=$(field merge_limit_s <<<"$c"); ps=$(field peft_merge_restore_s <<<"$p")
  keep ttmm_merge_speedup_vs_peft "$(div "$ps" "$cs")"; keep ttmm_merge_over_limit "$(div "$cs" "$lim")"
  keep ttmoe_merge_restore_s "$cs"; keep peft_merge_restore_s "$ps"; keep peft_merge_s "$(field peft_merge_s <<<"$p")"
  for k in merge_limit_s merge_flop_limit_s merge_byte_limit_s gemm_peak_gflops triad_gbs merge_patch_fraction base_token_s \
           ttmm_overhead_tokens_3 ttmm_overhead_tokens_10 ttmm_overhead_3_s ttmm_overhead_10_s ttmm_mode_3 ttmm_mode_10 \
           ttmm_overhead_tokens_f32_3 ttmm_overhead_tokens_f32_10 ttmm_dense_f32_3_s ttmm_dense_f32_10_s \
           ttmm_dense_bf16_3_s ttmm_dense_bf16_10_s ttmm_unmaterialised_3_s ttmm_unmaterialised_10_s \
           ttmm_dense_predicted_3_s ttmm_dense_predicted_10_s ttmm_unmaterialised_predicted_3_s \
           ttmm_unmaterialised_predicted_10_s; do
    keep "$k" "$(field "$k" <<<"$c")"
  done
  echo "# round $r: ttmoe $cs s, PEFT $ps s, limit $lim s (load $(load))"
done
print_medians ttmm_merge_speedup_vs_peft ttmm_merge_over_limit ttmm_overhead_tokens_3 ttmm_overhead_tokens_10 \
  ttmoe_merge_restore_s peft_merge_restore_s peft_merge_s merge_limit_s merge_flop_limit_s merge_byte_limit_s \
  gemm_peak_gflops triad_gbs merge_patch_fraction base_token_s ttmm_overhead_3_s ttmm_overhead_10_s ttmm_mode_3 ttmm_mode_10 \
  ttmm_overhead_tokens_f32_3 ttmm_overhead_tokens_f32_10 ttmm_dense_f32_3_s ttmm_dense_f32_10_s ttmm_dense_bf16_3_s \
  ttmm_dense_bf16_10_s ttmm_unmaterialised_3_s ttmm_unmaterialised_10_s ttmm_dense_predicted_3_s ttmm_dense_predicted_10_s \
  ttmm_unmaterialised_predicted_3_s ttmm_unmaterialised_predicted_10_s
