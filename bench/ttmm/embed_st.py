"""φ throughput, sentence-transformers' side of bench/ttmm/run_embed_bench.sh, and the corpus maker.

    embed_st.py --make-corpus FILE [--sentences 2000]
        writes FILE: sentences (one a line) from the docstrings of Python's standard library, a
        deterministic pick of realistic lengths (a few words to a few hundred tokens)
    embed_st.py --model DIR --corpus FILE [--runs 3] [--warmup 1] [--batch 32]
        embeds the corpus with SentenceTransformer at its best on the CPU: torch.inference_mode, the
        library's own batching by length (encode sorts by length), convert_to_numpy; the thread count
        comes from the caller (torch.set_num_threads from OMP_NUM_THREADS). Prints
        `torch_sentences_per_s: X` (median over runs) and `torch_embed_peak_rss_mb: Y`.
"""
from __future__ import annotations

import argparse
import ast
import os
import random
import re
import resource
import statistics
import sys
import sysconfig
import time


def make_corpus(path: str, count: int) -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    pool: list[str] = []
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in ("test", "tests", "idlelib", "site-packages", "__pycache__"))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                tree = ast.parse(open(os.path.join(root, name), encoding="utf-8").read())
            except (SyntaxError, UnicodeDecodeError, OSError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if not doc:
                        continue
                    # paragraphs as "documents": real prose of varied length
                    for para in re.split(r"\n\s*\n", doc):
                        text = " ".join(para.split())
                        if len(text) >= 20:
                            pool.append(text)
    rng = random.Random(15)
    rng.shuffle(pool)
    picked = pool[:count]
    with open(path, "w", encoding="utf-8") as f:
        for s in picked:
            f.write(s + "\n")
    lens = sorted(len(s.split()) for s in picked)
    print(f"# corpus: {len(picked)} paragraphs of Python stdlib docstrings, words median {lens[len(lens) // 2]}, "
          f"max {lens[-1]}", file=sys.stderr)


def bench(model_dir: str, corpus: str, runs: int, warmup: int, batch: int) -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    sentences = open(corpus, encoding="utf-8").read().split("\n")
    if sentences and sentences[-1] == "":
        sentences.pop()
    model = SentenceTransformer(model_dir, device="cpu")
    rates = []
    with torch.inference_mode():
        for _ in range(warmup):
            model.encode(sentences, batch_size=batch, convert_to_numpy=True)
        for _ in range(runs):
            t0 = time.perf_counter()
            e = model.encode(sentences, batch_size=batch, convert_to_numpy=True)
            rates.append(len(sentences) / (time.perf_counter() - t0))
            assert e.shape[0] == len(sentences)
    print(f"torch_sentences_per_s: {statistics.median(rates):.1f}")
    print(f"torch_embed_peak_rss_mb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-corpus")
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--model")
    ap.add_argument("--corpus")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    if a.make_corpus:
        make_corpus(a.make_corpus, a.sentences)
    elif a.model and a.corpus:
        bench(a.model, a.corpus, a.runs, a.warmup, a.batch)
    else:
        ap.error("--make-corpus FILE, or --model DIR --corpus FILE")


if __name__ == "__main__":
    main()
