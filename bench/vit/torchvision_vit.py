"""torchvision vit_b_16 eval forward throughput at batch 8 under torch.no_grad() (random weights).

Prints `torchvision_vit_b16_images_per_s: X`, the median over the timed runs after warm-up. Thread
count comes from OMP_NUM_THREADS (run_vit_bench.sh sets 2) and is also forced with torch.set_num_threads.
"""
import argparse
import os
import statistics
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(weights=None).eval()
    x = torch.rand(a.batch, 3, 224, 224)
    ips = []
    with torch.no_grad():
        for _ in range(a.warmup):
            model(x)
        for _ in range(a.runs):
            t0 = time.perf_counter()
            model(x)
            ips.append(a.batch / (time.perf_counter() - t0))
    print(f"torchvision_vit_b16_images_per_s: {statistics.median(ips):.3f}")


if __name__ == "__main__":
    main()
