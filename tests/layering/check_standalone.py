#!/usr/bin/env python3
"""Every public header compiles on its own: one translation unit per header under include/ttmoe that
includes it (twice, so a missing include guard shows too) and nothing else, compiled with
-fsyntax-only, in parallel. A header that needs a missing include, or relies on another header being
included before it, fails here naming the header and the compiler's first errors.

Headers that need a CUDA compiler (kernels, the CUDA runtime, cuBLAS) are not compiled here; they are
listed with the reason, and the nvcc build (`cuda_compile_only`) compiles them. The thrust layer is
compiled with the host compiler under thrust's CPP (and OpenMP) systems, as tests/thrust does.

usage: check_standalone.py --cxx CXX --jobs N --flags "FLAGS" [--thrust-flags "F"] [--omp-flags "F"]
                           [--text-flags "F" | --skip-text] <repo root>
An empty --thrust-flags / --omp-flags, or --skip-text, skips those headers (reported, not silently).
"""
import argparse
import concurrent.futures
import os
import shlex
import subprocess
import sys
import tempfile
import time

# Headers that only a CUDA compiler can parse (__global__ kernels, cuda_runtime.h, cublas_v2.h).
NEEDS_NVCC = {
    "ttmoe/cuda.hpp": "the CUDA umbrella (cuda_runtime, cuBLAS)",
    "ttmoe/backend/cuda/backend.hpp": "Backend<cuda>: cuBLAS and the row kernels",
    "ttmoe/backend/cuda/device.hpp": "the cuda device: cuda_runtime.h",
    "ttmoe/backend/cuda/row_kernels.cuh": "__global__ kernels",
}
THRUST = {"ttmoe/backend/cuda/thrust_backend.hpp", "ttmoe/backend/cuda/thrust_host.hpp"}
THRUST_OMP = {"ttmoe/backend/cuda/thrust_omp.hpp"}


def is_text(rel):
    return rel == "ttmoe/text.hpp" or rel.startswith("ttmoe/text/")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cxx", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--flags", default="")
    ap.add_argument("--thrust-flags", default="")
    ap.add_argument("--omp-flags", default="")
    ap.add_argument("--text-flags", default="")
    ap.add_argument("--skip-text", action="store_true", help="no ttmoe::text target (PCRE2/utf8proc missing)")
    ap.add_argument("root")
    a = ap.parse_args()

    inc = os.path.join(a.root, "include")
    common = ["-std=c++20", "-fsyntax-only", f"-I{inc}"] + shlex.split(a.flags)
    jobs, skipped = [], []
    for dirpath, _, files in os.walk(os.path.join(inc, "ttmoe")):
        for name in sorted(files):
            if not name.endswith((".hpp", ".cuh", ".h")):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), inc).replace(os.sep, "/")
            extra = []
            if rel in NEEDS_NVCC:
                skipped.append(f"{rel}: needs nvcc ({NEEDS_NVCC[rel]}); compiled by cuda_compile_only")
                continue
            if rel in THRUST or rel in THRUST_OMP:
                flags = a.omp_flags if rel in THRUST_OMP else a.thrust_flags
                if not flags:
                    skipped.append(f"{rel}: no thrust configuration given (CCCL headers not found)")
                    continue
                extra = shlex.split(flags)
            if is_text(rel):
                if a.skip_text:
                    skipped.append(f"{rel}: no ttmoe::text configuration (PCRE2/utf8proc not found)")
                    continue
                extra = shlex.split(a.text_flags)
            jobs.append((rel, extra))
    jobs.sort()

    with tempfile.TemporaryDirectory() as tmp:
        def compile_one(job):
            rel, extra = job
            src = os.path.join(tmp, rel.replace("/", "__") + ".cpp")
            with open(src, "w") as f:
                f.write(f'#include "{rel}"\n#include "{rel}"\n')
            t0 = time.monotonic()
            r = subprocess.run([a.cxx] + common + extra + ["-x", "c++", src], capture_output=True, text=True)
            return rel, r.returncode, r.stdout + r.stderr, time.monotonic() - t0

        t0 = time.monotonic()
        failed, slowest = [], []
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            for rel, rc, out, secs in pool.map(compile_one, jobs):
                slowest.append((secs, rel))
                if rc != 0 or out.strip():
                    failed.append(rel)
                    lines = out.strip().splitlines()
                    print(f"FAIL {rel} (exit {rc}{', warnings' if rc == 0 else ''}):")
                    print("\n".join("    " + l for l in lines[:25]) + ("\n    ..." if len(lines) > 25 else ""), flush=True)
        wall = time.monotonic() - t0

    for s in skipped:
        print(f"not compiled here: {s}")
    slowest.sort(reverse=True)
    print("slowest: " + ", ".join(f"{rel} {secs:.1f}s" for secs, rel in slowest[:5]))
    print(f"standalone headers: {len(jobs) - len(failed)}/{len(jobs)} compile on their own "
          f"({len(skipped)} need another compiler or configuration), {wall:.1f}s wall with {a.jobs} jobs, "
          f"{sum(s for s, _ in slowest):.1f}s of compiler time")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
