#!/usr/bin/env python3
"""Write every PyTorch parity fixture of ttmoe as <out>/<name>.safetensors.

    generate_all.py --out DIR [--only NAME[,NAME|GLOB...]] [--selfcheck] [--describe] [--list] [--quiet]

--selfcheck additionally reads every written file back, checks it bit-for-bit against the in-memory
tensors, re-runs each component from the tensors read back (outputs and gradients must reproduce
exactly), runs the component's independent cross-check, and torch.autograd.gradcheck on every
differentiable fixture. Exit status 77 when torch cannot be imported; the CTest steps deliberately
do not map it to SKIP_RETURN_CODE, so a machine without torch fails the parity suites instead of
silently skipping them (tests/reference/CMakeLists.txt)."""
import sys

sys.dont_write_bytecode = True  # keep the source tree clean when CTest runs us

import argparse  # noqa: E402
import fnmatch  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import torch  # noqa: E402
    import st  # noqa: E402  (needs numpy)
except ImportError as e:  # pragma: no cover
    print(f"generate_all.py: skipped, {e} (use the Python that has PyTorch, e.g. /usr/bin/python3)")
    sys.exit(77)

from components import REGISTRY, build, evaluate, gradcheck_case  # noqa: E402


def select(only):
    names = list(REGISTRY)
    if not only:
        return names
    pats = [p.strip() for p in only.split(",") if p.strip()]
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]
    missing = [p for p in pats if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if missing:
        sys.exit(f"unknown fixture(s): {', '.join(missing)}; --list shows the names")
    return chosen


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(torch.nan_to_num(a, nan=1234.5),
                                                                      torch.nan_to_num(b, nan=1234.5)) \
        and torch.equal(torch.isnan(a) if a.is_floating_point() else torch.zeros_like(a, dtype=torch.bool),
                        torch.isnan(b) if b.is_floating_point() else torch.zeros_like(b, dtype=torch.bool))


def selfcheck(name, path, case, tensors, meta):
    problems = []
    loaded, lmeta = st.load_torch(path, strict=True)
    if list(loaded) != list(tensors):
        problems.append("tensor names/order differ after reading back")
    for k, v in tensors.items():
        if k not in loaded or not _same(loaded[k], v):
            problems.append(f"{k}: differs after reading back")
    if dict(lmeta) != dict(meta):
        problems.append("metadata differs after reading back")
    # re-run from the tensors read back
    inputs = {k[3:]: v for k, v in loaded.items() if k.startswith("in.")}
    params = {k[6:]: v for k, v in loaded.items() if k.startswith("param.")}
    ups = {k[9:]: v for k, v in loaded.items() if k.startswith("upstream.")}
    again, _ = evaluate(case, inputs, params, ups if ups else None)
    for k, v in again.items():
        if not _same(v, loaded[k]):
            problems.append(f"{k}: not reproduced from the file's inputs")
    if case.crosscheck is not None:
        try:
            case.crosscheck(loaded)
        except AssertionError as e:
            problems.append(f"crosscheck: {e}")
    gc = "n/a"
    if case.differentiable and case.gradcheck_ok:
        try:
            gradcheck_case(case, inputs, params)
            gc = "ok"
        except Exception as e:  # gradcheck raises GradcheckError (a RuntimeError)
            problems.append(f"gradcheck: {str(e).splitlines()[0]}")
            gc = "FAILED"
    return problems, gc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (created if missing)")
    ap.add_argument("--only", help="comma-separated fixture names or globs (e.g. moe_*)")
    ap.add_argument("--selfcheck", action="store_true", help="read back, re-run, cross-check and gradcheck")
    ap.add_argument("--list", action="store_true", help="list fixture names and exit")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--describe", action="store_true", help="print every fixture's tensors (name dtype shape)")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(REGISTRY))
        return 0
    if not a.out:
        ap.error("--out is required")
    torch.set_num_threads(1)            # fixed reduction order: reproducible bytes
    torch.set_default_dtype(torch.float64)
    os.makedirs(a.out, exist_ok=True)
    names = select(a.only)
    t0 = time.perf_counter()
    failures = 0
    total_bytes = 0
    for name in names:
        t1 = time.perf_counter()
        case = build(name)
        tensors, meta = evaluate(case)
        path = os.path.join(a.out, f"{name}.safetensors")
        st.save(path, tensors, meta)
        size = os.path.getsize(path)
        total_bytes += size
        line = f"{name:28s} {len(tensors):3d} tensors {size / 1024:7.1f} KiB"
        if a.selfcheck:
            problems, gc = selfcheck(name, path, case, tensors, meta)
            failures += bool(problems)
            line += f"  gradcheck {gc:6s} {'OK' if not problems else 'FAIL'}"
            for p in problems:
                line += f"\n    - {p}"
        line += f"  {time.perf_counter() - t1:6.3f}s"
        if not a.quiet or (a.selfcheck and failures):
            print(line, flush=True)
        if a.describe:
            for k, v in tensors.items():
                print(f"    {k:40s} {'F64' if v.is_floating_point() else 'I64'} {list(v.shape)}")
    dt = time.perf_counter() - t0
    print(f"{len(names)} fixture(s), {total_bytes / 1024:.1f} KiB in {a.out}, {dt:.2f}s"
          + (f", {failures} failing self-check(s)" if a.selfcheck else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
