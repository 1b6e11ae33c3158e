#!/usr/bin/env python3
"""PyTorch side of bench/gmoe/run_gmoe_bench.sh: GMoE-S/16 training step and evaluation throughput,
the same model and step as bench/gmoe/gmoe_step.cpp, written to be as fast as PyTorch allows on a CPU.

The model is timm's VisionTransformer (ViT-S/16: 384 wide, 12 blocks, 6 heads, MLP 1536, drop-path
0.1 linear over depth, timm's fused scaled_dot_product_attention) whose blocks 8 and 10 carry a GMoE
MoE layer with the math of tests/reference/gmoe_reference.py (itself checked against ttmoe by the
parity tests): cosine router (projection to 256, normalised codebook, temperature clamped at ln 100),
training noise N(0, 1) / E on the logits, top-1 with the gate (the noisy softmax at the pick) not
renormalised, capacity C = int(1.5 * ceil(N / E)) over all N tokens of the batch with
batch-prioritised slots (tokens ordered by descending max score), overflow tokens output 0 (residual
only), experts fc2(dropout(gelu(fc1 x))) with expert dropout 0.1, and l_aux = (cv2(importance) +
cv2(load)) / 2 weighted 0.01. Tutel's dense [N, E, C] dispatch einsums are replaced by index-based
formulations (--dispatch; padded, the default, measured faster here: --mode dispatch):
  segments  tokens sorted by (expert, priority) (one argsort), overflow cut, one index_select of the
            kept tokens, then per expert one addmm / GELU / dropout / addmm on its contiguous segment
            (no padding: exactly the kept tokens' FLOPs), combine by one index_select of the expert
            outputs with a zero row for dropped tokens, times the gate
  padded    the same slots scattered into an [E, C, D] buffer (empty slots zero), two baddbmm calls
            over all E * C slots (Tutel's batched expert GEMMs; 1.5x the kept tokens' FLOPs at
            capacity factor 1.5), combine by index_select from the flattened [E * C + 1, D] output
A training step: forward on all images (DomainBed concatenates the domains' minibatches),
cross_entropy + 0.01 * sum l_aux, backward, torch.optim.Adam(lr 5e-5) step (fused=True where this
torch supports it on CPU, else foreach), zero_grad(set_to_none=True). Evaluation: eval mode,
torch.inference_mode, no noise, no dropout.
--mode dispatch times one MoE layer's forward + backward in both formulations, alternating (which
one wins: docs/design.md "GMoE"). --mode gemm times torch.mm at a ViT-S/16 block's four linear shapes (torch_gemm_gflops), the rate
PyTorch's side rests on. Prints torch_gmoe_step_s or torch_gmoe_eval_images_per_s (and torch_gmoe_eval_s), peak_rss_mb
(ru_maxrss at the end), and every timed run on stderr. --compile wraps the model in torch.compile
(inductor); --check compares both dispatch formulations with the dense reference layer and exits.
"""
import argparse
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer


class CosineGate(torch.nn.Module):
    """Tutel's CosineTopKGate: normalize(proj(x)) @ normalize_columns(sim) * exp(clamp(temperature))."""

    def __init__(self, dim, num_experts, proj_dim=256):
        super().__init__()
        self.temperature = torch.nn.Parameter(torch.log(torch.full([1], 1.0 / 0.5)))
        self.cosine_projector = torch.nn.Linear(dim, proj_dim)
        self.sim_matrix = torch.nn.Parameter(torch.empty(proj_dim, num_experts).normal_(0, 0.01))
        self.clamp_max = math.log(100.0)

    def forward(self, x):
        logits = F.normalize(self.cosine_projector(x), dim=1) @ F.normalize(self.sim_matrix, dim=0)
        return logits * torch.clamp(self.temperature, max=self.clamp_max).exp()


class FastGMoE(torch.nn.Module):
    """GMoE MoE-FFN (top-1, capacity, batch priority, expert dropout, l_aux) with index dispatch."""

    def __init__(self, mlp, dim, num_experts=6, capacity_factor=1.5, gate_noise=1.0, expert_dropout=0.1,
                 dispatch="padded"):
        super().__init__()
        E = num_experts
        self.gate = CosineGate(dim, E)
        # fc1 as [D, H] and fc2 as [H, D]: x @ w without a transpose in addmm / baddbmm. Segments keep
        # one parameter per expert: slicing a batched [E, ...] parameter would make every expert's
        # backward fill and add a whole [E, ...] gradient (measured: ~10% of the layer's time).
        w1, w2 = mlp.fc1.weight.detach().t().contiguous(), mlp.fc2.weight.detach().t().contiguous()
        b1, b2 = mlp.fc1.bias.detach(), mlp.fc2.bias.detach()
        if dispatch == "segments":
            per_expert = lambda t: torch.nn.ParameterList([t.clone() for _ in range(E)])  # noqa: E731
        else:
            per_expert = lambda t: torch.nn.Parameter(t.unsqueeze(0).repeat(E, *[1] * t.dim()))  # noqa: E731
        self.fc1_w, self.fc1_b, self.fc2_w, self.fc2_b = per_expert(w1), per_expert(b1), per_expert(w2), per_expert(b2)
        self.E, self.cf, self.gate_noise, self.p = E, capacity_factor, gate_noise, expert_dropout
        self.dispatch = dispatch
        self.noise = None  # a fixed [N, E] standard-normal tensor (--check), else drawn in training
        self.l_aux = None
        self.dropped = 0

    def expert(self, e, xe):
        h = F.gelu(torch.addmm(self.fc1_b[e], xe, self.fc1_w[e]))
        return torch.addmm(self.fc2_b[e], F.dropout(h, self.p, self.training), self.fc2_w[e])

    def forward(self, x):
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        N, E = xf.shape[0], self.E
        logits = self.gate(xf)
        if self.training or self.noise is not None:
            z = self.noise if self.noise is not None else torch.randn_like(logits)
            noisy = logits + z * (self.gate_noise / E)
        else:
            noisy = logits
        scores = torch.softmax(noisy, dim=1)
        prio, idx = scores.max(dim=1)  # top-1 of the softmax = top-1 of the noisy logits
        gate = scores.gather(1, idx[:, None])  # [N, 1], not renormalised (the authors' top-1)
        C = int(self.cf * ((N + E - 1) // E))
        with torch.no_grad():
            # Batch priority: rank of each token in descending-priority order (stable), then one argsort
            # of (expert, rank) groups the tokens per expert in priority order.
            order = torch.sort(-prio, stable=True).indices
            rank = torch.empty_like(order)
            rank[order] = torch.arange(N)
            grouped = torch.argsort(idx * N + rank)
            counts = torch.bincount(idx, minlength=E)
            starts = torch.cumsum(counts, 0) - counts
            loc = torch.empty_like(idx)
            loc[grouped] = torch.arange(N) - starts.repeat_interleave(counts)
            keep = loc < C
            kept_counts = torch.clamp(counts, max=C).tolist()
            self.dropped = N - sum(kept_counts)
        if self.dispatch == "segments":
            with torch.no_grad():
                kept_sorted = grouped[keep[grouped]]  # kept tokens, per expert, priority order
                # Row of each token in the concatenated expert output; dropped tokens read the zero row.
                src = torch.full((N,), len(kept_sorted), dtype=torch.int64)
                src[kept_sorted] = torch.arange(len(kept_sorted))
            xs = xf.index_select(0, kept_sorted)
            outs, at = [], 0
            for e in range(E):
                n = kept_counts[e]
                if n:
                    outs.append(self.expert(e, xs[at:at + n]))
                at += n
            outs.append(xf.new_zeros(1, D))
            y = torch.cat(outs).index_select(0, src)
        else:  # padded [E, C, D] slots and two baddbmm
            with torch.no_grad():
                slot = torch.where(keep, idx * C + loc, torch.full_like(idx, E * C))
                tok = torch.full((E * C + 1,), N, dtype=torch.int64)
                tok[slot] = torch.arange(N)
            xin = torch.cat([xf, xf.new_zeros(1, D)]).index_select(0, tok[:E * C]).view(E, C, D)
            h = F.gelu(torch.baddbmm(self.fc1_b.unsqueeze(1), xin, self.fc1_w))
            out = torch.baddbmm(self.fc2_b.unsqueeze(1), F.dropout(h, self.p, self.training), self.fc2_w)
            y = torch.cat([out.reshape(E * C, D), xf.new_zeros(1, D)]).index_select(0, slot)
        y = y * gate
        if self.training or self.noise is not None:  # l_aux (Tutel's importance + load losses)
            clean = torch.softmax(logits, dim=1)
            sigma = self.gate_noise / E
            thr = noisy.gather(1, idx[:, None])
            load = torch.special.ndtr((clean - thr) / sigma).sum(0)
            cv2 = lambda v: v.var() / (v.mean() ** 2 + 1e-10)  # noqa: E731 (unbiased variance, as Tutel)
            self.l_aux = (cv2(clean.sum(0)) + cv2(load)) / 2.0
        return y.reshape(B, T, D)


def build(classes, dispatch, seed=1):
    torch.manual_seed(seed)
    model = VisionTransformer(img_size=224, patch_size=16, num_classes=classes, embed_dim=384, depth=12, num_heads=6,
                              mlp_ratio=4.0, qkv_bias=True, drop_path_rate=0.1)
    layers = []
    for b in (8, 10):
        layer = FastGMoE(model.blocks[b].mlp, 384, dispatch=dispatch)
        model.blocks[b].mlp = layer
        layers.append(layer)
    return model, layers


def check():
    """Both dispatch formulations against the dense reference layer of the parity tests (float64): output,
    l_aux and the input gradient, with a capacity that drops tokens."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
    from gmoe_reference import GMoELayer  # noqa: E402
    torch.manual_seed(3)
    D, H, E, B, T = 16, 32, 6, 3, 50
    mlp = torch.nn.Module()
    mlp.fc1, mlp.fc2 = torch.nn.Linear(D, H), torch.nn.Linear(H, D)
    ref = GMoELayer(mlp, D, E, 8, 1, False, 0.75).double()  # 0.75: some tokens drop
    x = torch.randn(B, T, D, dtype=torch.float64, requires_grad=True)
    z = torch.randn(B * T, E, dtype=torch.float64)
    with torch.no_grad():
        ref.gates[0].sim_matrix.normal_(0, 1.0)
        for p in ref.experts.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ref.noise = z
    y_ref = ref(x)
    up = torch.randn_like(y_ref)
    gx_ref, = torch.autograd.grad((y_ref * up).sum() + ref.l_aux, x)
    for dispatch in ("segments", "padded"):
        f = FastGMoE(mlp, D, E, capacity_factor=0.75, expert_dropout=0.0, dispatch=dispatch).double()
        f.gate.cosine_projector = torch.nn.Linear(D, 8).double()
        with torch.no_grad():
            g = ref.gates[0]
            f.gate.cosine_projector.load_state_dict(g.cosine_projector.state_dict())
            f.gate.sim_matrix = torch.nn.Parameter(g.sim_matrix.detach().clone())
            f.gate.temperature.copy_(g.temperature)
            for e in range(E):
                f.fc1_w[e].copy_(ref.experts.batched_fc1_w[e].t())
                f.fc1_b[e].copy_(ref.experts.batched_fc1_bias[e])
                f.fc2_w[e].copy_(ref.experts.batched_fc2_w[e])
                f.fc2_b[e].copy_(ref.experts.batched_fc2_bias[e])
        f.noise = z
        f.eval()  # no dropout; the fixed noise still applies
        y = f(x)
        gx, = torch.autograd.grad((y * up).sum() + f.l_aux, x)
        err = float((y - y_ref).detach().abs().max())
        aerr = abs(float(f.l_aux.detach()) - float(ref.l_aux.detach()))
        gerr = float((gx - gx_ref).abs().max())
        ok = max(err, aerr, gerr) < 1e-10 and f.dropped == ref.dropped and f.dropped > 0
        print(f"check {dispatch}: max |y - ref| {err:.3g}, |l_aux - ref| {aerr:.3g}, max |dx - ref| {gerr:.3g}, "
              f"dropped {f.dropped} "
              f"(reference {ref.dropped}): {'ok' if ok else 'FAILED'}")
        if not ok:
            sys.exit(1)


def gemm_rate(rows, runs, warmup):
    """--mode gemm: torch.mm at a ViT-S/16 block's linear shapes (qkv, proj, fc1, fc2), as bench_gmoe_step."""
    flops = seconds = 0.0
    for k, n in ((384, 1152), (384, 384), (384, 1536), (1536, 384)):
        a, b = torch.randn(rows, k), torch.randn(k, n)
        t = []
        for i in range(warmup + runs):
            t0 = time.perf_counter()
            torch.mm(a, b)
            if i >= warmup:
                t.append(time.perf_counter() - t0)
        f = 2.0 * rows * k * n
        print(f"(gemm [{rows}, {k}] x [{k}, {n}]: {f / statistics.median(t) / 1e9:.1f} GFLOP/s)", file=sys.stderr)
        flops, seconds = flops + f, seconds + statistics.median(t)
    print(f"torch_gemm_gflops: {flops / seconds / 1e9:.1f}")


def compare_dispatch(images, runs, warmup):
    """--mode dispatch: forward + backward of one MoE layer (training: noise, expert dropout, l_aux) on
    images x 197 tokens, the two formulations alternating run by run; prints each one's median seconds."""
    mlp = torch.nn.Module()
    mlp.fc1, mlp.fc2 = torch.nn.Linear(384, 1536), torch.nn.Linear(1536, 384)
    layers = {d: FastGMoE(mlp, 384, dispatch=d).train() for d in ("segments", "padded")}
    x = torch.randn(images, 197, 384, requires_grad=True)
    up = torch.randn(images, 197, 384)
    times = {d: [] for d in layers}
    for i in range(warmup + runs):
        for d, layer in layers.items():
            t0 = time.perf_counter()
            loss = (layer(x) * up).sum() + 0.01 * layer.l_aux
            loss.backward()
            if i >= warmup:
                times[d].append(time.perf_counter() - t0)
    for d, t in times.items():
        print(f"torch_moe_layer_{d}_fwd_bwd_s: {statistics.median(t):.4f}")
        print(f"({d} runs s: {' '.join(f'{v:.3f}' for v in t)})", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["train", "eval", "gemm", "dispatch"], default="train")
    ap.add_argument("--images", type=int, default=None, help="batch (default 96 train, 64 eval)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--classes", type=int, default=7)
    ap.add_argument("--dispatch", choices=["segments", "padded"], default="padded")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.check:
        check()
        return
    images = a.images or (96 if a.mode == "train" else 64)
    if a.mode == "gemm":
        gemm_rate(images * 197, a.runs, a.warmup)
        return
    if a.mode == "dispatch":
        compare_dispatch(images, a.runs, a.warmup)
        return
    model, layers = build(a.classes, a.dispatch)
    g = torch.Generator().manual_seed(99)
    x = torch.randn(images, 3, 224, 224, generator=g)
    labels = torch.randint(0, a.classes, (images,), generator=g)
    fwd = torch.compile(model) if a.compile else model
    times = []
    if a.mode == "eval":
        model.eval()
        with torch.inference_mode():
            for i in range(a.warmup + a.runs):
                t0 = time.perf_counter()
                y = fwd(x)
                s = time.perf_counter() - t0
                if i >= a.warmup:
                    times.append(s)
        med = statistics.median(times)
        print(f"torch_gmoe_eval_images_per_s: {images / med:.2f}")
        print(f"torch_gmoe_eval_s: {med:.4f}")
    else:
        model.train()
        try:
            opt = torch.optim.Adam(model.parameters(), lr=5e-5, fused=True)
        except (RuntimeError, TypeError):  # no fused CPU Adam in this torch
            opt = torch.optim.Adam(model.parameters(), lr=5e-5, foreach=True)
        for i in range(a.warmup + a.runs):
            t0 = time.perf_counter()
            y = fwd(x)
            loss = F.cross_entropy(y, labels) + 0.01 * sum(layer.l_aux for layer in layers)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            s = time.perf_counter() - t0
            if i >= a.warmup:
                times.append(s)
        med = statistics.median(times)
        print(f"torch_gmoe_step_s: {med:.4f}")
        print(f"(last loss {float(loss):.4f}, dropped {[layer.dropped for layer in layers]})", file=sys.stderr)
    print(f"peak_rss_mb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")
    print(f"({a.mode} runs s: {' '.join(f'{t:.3f}' for t in times)}; dispatch {a.dispatch}, compile {a.compile}, "
          f"torch {torch.__version__})", file=sys.stderr)


if __name__ == "__main__":
    main()
