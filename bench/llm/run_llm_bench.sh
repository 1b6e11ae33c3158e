#!/usr/bin/env bash
# Llama-3.2-1B shapes (random weights, bench/llm/make_models.py) decoded by ttmoe, llama.cpp
# (llama-cpp-python's vendored build) and prefilled by PyTorch + transformers, 2 threads each, process
# by process, alternating, for ROUNDS rounds: ttmoe f32, llama.cpp f32, ttmoe bf16, llama.cpp bf16,
# transformers bf16. Each ratio is the median of its per-round ratios, each absolute figure the median
# of its per-round values (rounds.sh):
#   llm_decode_speedup_vs_llamacpp_{bf16,f32}    ttmoe decode tokens/s / llama.cpp's   (>= 1.0)
#   llm_decode_fraction_of_bandwidth_bf16        ttmoe bf16: weight bytes read per token x tokens/s /
#                                                triad bandwidth measured in the same minutes (>= 0.85):
#                                                bench_llm_decode's decode_fraction_of_triad, a triad
#                                                every 16 decoded tokens (its time off the decode clock),
#                                                each 16-token window's weight bytes/s over the mean of
#                                                the two triads around it, median over the windows
#                                                (an LLM_BIN without that line: bytes x tok/s over its
#                                                one triad, taken before the load)
#   llm_prefill_speedup_vs_llamacpp_{bf16,f32}   llama.cpp prefill s / ttmoe's, 512 tokens (>= 1.0);
#                                                every side's prefill is the median of 3 timed ones
#                                                after one untimed full-size warm-up (--prefill-runs)
#   llm_prefill_speedup_vs_transformers_bf16     transformers prefill s / ttmoe bf16's     (>= 1.5)
#   llm_peak_rss_over_weights                    ttmoe bf16 peak RSS / its safetensors bytes, KV cache
#                                                of 2048 positions                          (<= 1.15)
# and llm_{ttmoe,llamacpp}_{f32,bf16}_{decode_tokens_per_s,prefill_s}, llm_transformers_bf16_prefill_s,
# llm_ttmoe_bf16_{peak_rss_mb,weight_bytes,weight_bytes_per_token}, llm_triad_gbs (the median of the
# decode's triads) and llm_triad_gbs_{min,max} behind them.
# ttmoe bf16 runs with --arithmetic $LLM_BF16_ARITHMETIC (default bf16: activations rounded to BF16,
# the numerics of llama.cpp's and transformers' BF16 runs; `exact` keeps them F32).
#   [LLM_LAYERS=16] [LLM_MODELS=~/.cache/ttmoe/bench-llm] [LLM_BIN=prebuilt bench_llm_decode]
#   [LLM_BF16_ARITHMETIC=bf16|exact]
#     bench/llm/run_llm_bench.sh [BUILD_DIR] [ROUNDS]     (default build-llm-bench, 1 round)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${2:-1}
layers=${LLM_LAYERS:-16}
models=${LLM_MODELS:-$HOME/.cache/ttmoe/bench-llm}/l$layers
# shellcheck source=../rounds.sh
. "$here/../rounds.sh"
find_torch_python run_llm_bench
bin=$(bench_binary "${LLM_BIN:-}" "$here" "${1:-$root/build-llm-bench}" bench_llm_decode)
"$torch_py" -c 'import llama_cpp' 2>/dev/null ||
  { echo "run_llm_bench: llama-cpp-python is missing from $torch_py (scripts/install-deps.sh --bench)" >&2; exit 1; }
"$torch_py" "$here/make_models.py" "$models" --layers "$layers"
echo "# Llama-3.2-1B widths, $layers layers (1B: 16), random weights; prompt 512 ids, 128 greedy tokens, KV cache 2048"
echo "# ttmoe bf16 arithmetic: ${LLM_BF16_ARITHMETIC:-bf16}"
echo "# llama-cpp-python $("$torch_py" -c 'import llama_cpp; print(llama_cpp.__version__)'), torch $("$torch_py" -c 'import torch; print(torch.__version__)')"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "run_llm_bench: $1 failed:" >&2; tail -20 "$err" >&2; exit 1; }
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE
# ttmoe maps its BF16 weights with 2 MiB page-table entries where the page cache holds the file in
# 2 MiB folios (io::detail::advise_huge_pages), which it does for pages first read through that
# mapping; pages cached earlier (make_models.py's write, another reader) stay 4 KiB. So the BF16
# checkpoint leaves the page cache once here, written back first, and round 1's ttmoe bf16 load reads
# it from disk (its load_s includes that read). Pages another process has mapped stay cached.
"$torch_py" -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$models"/hf-bf16/*.safetensors
for r in $(seq 1 "$rounds"); do
  l0=$(load)
  line="round $r (load $l0"
  for p in f32 bf16; do
    # Only a non-default arithmetic is passed, so LLM_BF16_ARITHMETIC=exact also runs an older LLM_BIN.
    arith=()
    if [ "$p" = bf16 ] && [ "${LLM_BF16_ARITHMETIC:-bf16}" != exact ]; then arith=(--arithmetic "${LLM_BF16_ARITHMETIC:-bf16}"); fi
    c=$("$bin" "$models/hf-$p" --precision "$p" "${arith[@]}" --threads 2 2>"$err") || fail "ttmoe $p"
    g=$("$torch_py" "$here/llm_peers.py" llamacpp "$models/llama-$p.gguf" 2>"$err") || fail "llama.cpp $p"
    ct=$(field decode_tokens_per_s <<<"$c"); cp=$(field prefill_s <<<"$c")
    gt=$(field decode_tokens_per_s <<<"$g"); gp=$(field prefill_s <<<"$g")
    keep "llm_decode_speedup_vs_llamacpp_$p" "$(div "$ct" "$gt")"
    keep "llm_prefill_speedup_vs_llamacpp_$p" "$(div "$gp" "$cp")"
    keep "llm_ttmoe_${p}_decode_tokens_per_s" "$ct"; keep "llm_ttmoe_${p}_prefill_s" "$cp"
    keep "llm_llamacpp_${p}_decode_tokens_per_s" "$gt"; keep "llm_llamacpp_${p}_prefill_s" "$gp"
    line+=" | $p ttmoe ${ct} tok/s prefill ${cp}s, llama.cpp ${gt} tok/s prefill ${gp}s"
  done
  # $c is ttmoe bf16's output now.
  t=$("$torch_py" "$here/llm_peers.py" transformers "$models/hf-bf16" 2>"$err") || fail "transformers"
  tp=$(field prefill_s <<<"$t"); cp=$(field prefill_s <<<"$c")
  bpt=$(field weight_bytes_per_token <<<"$c"); triad=$(field triad_gbs <<<"$c")
  rss=$(field peak_rss_mb <<<"$c"); wb=$(field weight_bytes <<<"$c")
  keep llm_prefill_speedup_vs_transformers_bf16 "$(div "$tp" "$cp")"
  frac=$(field decode_fraction_of_triad <<<"$c")
  [ -n "$frac" ] || frac=$(div "($bpt * $ct)" "($triad * 1e9)")
  keep llm_decode_fraction_of_bandwidth_bf16 "$frac"
  keep llm_triad_gbs_min "$(field triad_gbs_min <<<"$c")"; keep llm_triad_gbs_max "$(field triad_gbs_max <<<"$c")"
  keep llm_peak_rss_over_weights "$(div "$rss * 1048576" "$wb")"
  keep llm_transformers_bf16_prefill_s "$tp"; keep llm_triad_gbs "$triad"
  keep llm_ttmoe_bf16_peak_rss_mb "$rss"; keep llm_ttmoe_bf16_weight_bytes "$wb"
  keep llm_ttmoe_bf16_weight_bytes_per_token "$bpt"
  echo "$line | transformers bf16 prefill ${tp}s | triad ${triad} GB/s, fraction ${frac}, ttmoe bf16 rss ${rss} MB; load -> $(load))"
done
print_medians llm_decode_speedup_vs_llamacpp_bf16 llm_decode_speedup_vs_llamacpp_f32 llm_decode_fraction_of_bandwidth_bf16 \
  llm_prefill_speedup_vs_llamacpp_bf16 llm_prefill_speedup_vs_llamacpp_f32 llm_prefill_speedup_vs_transformers_bf16 \
  llm_peak_rss_over_weights llm_ttmoe_bf16_decode_tokens_per_s llm_llamacpp_bf16_decode_tokens_per_s \
  llm_ttmoe_f32_decode_tokens_per_s llm_llamacpp_f32_decode_tokens_per_s llm_ttmoe_bf16_prefill_s llm_llamacpp_bf16_prefill_s \
  llm_ttmoe_f32_prefill_s llm_llamacpp_f32_prefill_s llm_transformers_bf16_prefill_s llm_triad_gbs llm_triad_gbs_min llm_triad_gbs_max \
  llm_ttmoe_bf16_peak_rss_mb llm_ttmoe_bf16_weight_bytes llm_ttmoe_bf16_weight_bytes_per_token
