"""ttmm::cluster_embeddings against an independent NumPy bisecting 2-means on fixed data.

The reference follows the TTMM paper's recipe as the library documents it: L2-normalise the rows;
while fewer than K clusters, split the cluster of largest (squared) diameter by spherical 2-means
(seeds: the member farthest from the cluster mean and the member farthest from that one; assign by
cosine, ties to the first centre; centres = normalised means; stop when the labels repeat);
centroids = normalise(mean of the normalised members). The data are well separated Gaussian blobs
on the sphere, seeded, so no tie decides anything. Also checked: K above the number of rows fails
with the documented message.

  clustering_numpy_check.py --tool ttmm_cluster_tool --out DIR
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        dtype = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}[arr.dtype]
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, m in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "I64": np.int64}[m["dtype"]]
        a, b = m["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt).reshape(m["shape"])
    return out


def normalise(v):
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def bisecting_2means(X, K, max_iter=100):
    X = normalise(X.astype(np.float64))
    assign = np.zeros(len(X), dtype=np.int64)
    for nc in range(1, K):
        best, best_diam = -1, -1.0
        for c in range(nc):
            P = X[assign == c]
            if len(P) < 2:
                continue
            diam = ((P[:, None, :] - P[None, :, :]) ** 2).sum(-1).max()
            if diam > best_diam:
                best, best_diam = c, diam
        idx = np.nonzero(assign == best)[0]
        P = X[idx]
        a = int(np.argmax(((P - P.mean(0)) ** 2).sum(-1)))
        b = int(np.argmax(((P - P[a]) ** 2).sum(-1)))
        cent = np.stack([P[a], P[b]])
        prev = None
        for _ in range(max_iter):
            sims = P @ cent.T
            lab = (sims[:, 1] > sims[:, 0]).astype(np.int64)
            if prev is not None and np.array_equal(lab, prev):
                break
            prev = lab
            for j in range(2):
                if (lab == j).any():
                    cent[j] = normalise(P[lab == j].mean(0))
        assign[idx[lab == 1]] = nc
    cents = np.stack([normalise(X[assign == c].mean(0)) for c in range(K)])
    return assign, cents


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(2024)
    N, d, blobs, K = 90, 16, 6, 6
    centres = normalise(rng.normal(size=(blobs, d)))
    X = (np.repeat(centres, N // blobs, axis=0) * rng.uniform(0.5, 3.0, size=(N, 1))
         + rng.normal(scale=0.08, size=(N, d))).astype(np.float32)
    X = X[rng.permutation(N)]
    inp, out = os.path.join(args.out, "in.safetensors"), os.path.join(args.out, "out.safetensors")
    write_safetensors(inp, {"embeddings": X})
    failures = []
    for k in (2, 4, K):
        subprocess.run([args.tool, inp, str(k), out], check=True)
        got = read_safetensors(out)
        ref_assign, ref_cents = bisecting_2means(X, k)
        if not np.array_equal(got["assignment"], ref_assign):
            failures.append(f"K={k}: assignments differ at {np.nonzero(got['assignment'] != ref_assign)[0][:10]}")
        err = np.abs(got["centroids"] - ref_cents).max()
        if err > 1e-6:
            failures.append(f"K={k}: centroids differ by {err:.3g}")
        if not np.array_equal(got["sizes"], np.bincount(ref_assign, minlength=k)):
            failures.append(f"K={k}: sizes {got['sizes']} vs {np.bincount(ref_assign, minlength=k)}")
        print(f"K={k}: sizes {got['sizes'].tolist()}, centroid max |diff| {err:.2e}")
    r = subprocess.run([args.tool, inp, str(N + 1), out], capture_output=True, text=True)
    if r.returncode != 1 or f"K = {N + 1} clusters for {N} documents" not in r.stderr:
        failures.append(f"K > N: status {r.returncode}, stderr {r.stderr!r}")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    print("ttmm clustering matches the NumPy bisecting 2-means")
    return 0


if __name__ == "__main__":
    sys.exit(main())
