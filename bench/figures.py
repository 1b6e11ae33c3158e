#!/usr/bin/env python3
"""Prints bench/report's `name: value` figures from one Google Benchmark JSON file (--benchmark_out)
of bench_fused* or bench_gemm*.

Usage: figures.py VARIANT FILE.json   VARIANT: the executable's name suffix ("", "_avx2", "_cblas"),
                                      inserted into every figure name as before the port.
Every figure is a median over the file's repetitions (entries with run_type "iteration"; Google
Benchmark's own aggregates are not used, so this also works with a single repetition); a ratio is the
ratio of the two medians (bench/report says why).
"""
import json
import statistics
import sys

SCALE_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def medians(path):
    """{benchmark name: (median ms per iteration, median rate counter)} and the file's context."""
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        rate = b.get("bytes_per_second", b.get("flops"))
        name = b["run_name"].removesuffix("/real_time")
        runs.setdefault(name, []).append((b["real_time"] * SCALE_TO_MS[b["time_unit"]], rate))
    return {k: (statistics.median(t for t, _ in v), statistics.median(r for _, r in v), len(v))
            for k, v in runs.items()}, data["context"]


def figure(name, value, digits=3):
    print(f"{name}: {value:.{digits}f}")


def fused(m, v):
    """Figures of bench_fused: triad and chain bandwidth, and each variant as a fraction of the triad."""
    gbs = {k: rate / 1e9 for k, (_, rate, _) in m.items()}
    figure(f"triad{v}_gbs", gbs["triad"], 2)
    figure(f"fused_chain{v}_gbs", gbs["fused_chain"], 2)
    figure(f"fused_chain{v}_median_ms", m["fused_chain"][0], 2)
    figure(f"triad{v}_median_ms", m["triad"][0], 2)
    for k in ("fused_chain", "fused_chain_new_output", "fused_relu_chain", "fused_mul"):
        figure(f"{k}{v}_fraction_of_triad", gbs[k] / gbs["triad"])


def gemm(m, v):
    """Figures of bench_gemm: GFLOP/s and ms of both libraries per size, ttmoe as a fraction of OpenBLAS."""
    for label in sorted({k.split("/", 1)[1] for k in m}, key=lambda s: [int(x) for x in s.split("x")]):
        ours, blas = m[f"gemm/{label}"], m[f"openblas/{label}"]
        figure(f"gemm{v}_gflops_{label}", ours[1] / 1e9, 1)
        figure(f"openblas{v}_gflops_{label}", blas[1] / 1e9, 1)
        figure(f"gemm{v}_median_ms_{label}", ours[0], 2)
        figure(f"openblas{v}_median_ms_{label}", blas[0], 2)
        figure(f"gemm{v}_fraction_of_openblas_{label}", ours[1] / blas[1])


def main():
    variant, path = sys.argv[1], sys.argv[2]
    m, ctx = medians(path)
    reps = min(n for *_, n in m.values())
    print(f"# {ctx['executable'].rsplit('/', 1)[-1]}: {reps} repetitions per benchmark;"
          f" load {' '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}")
    (fused if "triad" in m else gemm)(m, variant)


if __name__ == "__main__":
    main()
