"""MoETTA on torchvision's vit_b_16 (PyTorch reference for the bench/moetta step benchmark).

Written from the MoETTA paper (Algorithms 1-2) and /work/shared/papers/IMPLEMENTATION_FACTS.md, with the
same semantics as tests/reference/moetta_reference.py (which it mirrors in float32 on the real model;
that module is not imported because it switches torch's default dtype to float64 at import):

* LayerNorms counted in module order: encoder_layer_i.ln_1 = 2i, encoder_layer_i.ln_2 = 2i+1,
  encoder.ln = 24. Index 0 stays the plain (frozen) LayerNorm; indices 1..24 become MoELayerNorm:
  frozen shared affine (the LN's weight/bias, kept as buffers), expert deltas weight_delta/bias_delta
  [E, D] zero-initialised, router Linear(D -> E) (Xavier-normal weight drawn in module order from one
  seeded generator, zero bias) on the token mean (CLS included) of the LN's input, softmax, top-1,
  c = p_top / p_top.detach(), per-sample gamma = w + c * dgamma[e], beta = b + c * dbeta[e];
  balance loss per layer E * sum_e mean_b(p[b, e]) * count_e / sum(count), summed over layers;
* everything else frozen; SGD(momentum 0.9, lr = 1e-3 * B / 64) over routers + experts only;
* step(images): forward (eval mode), H over all logits, running mean m_t of batch-mean entropies
  INCLUDING this batch (= Algorithm 1's threshold recurrence, telescoped), threshold = m_t,
  alpha = lambda * m_t (lambda 0.2), keep H <= threshold, loss = mean_kept(exp(E0 - H.detach()) * H)
  + alpha * sum LB (entropy term omitted when nothing is kept), backward, SGD step; returns the
  logits of the forward made before the update.

CLI:
  --bench --batch 8 --steps N [--warmup W] [--forward-runs R] [--plain-forward]
      prints each timed step's seconds, `torch_moetta_step_s: median`, `peak_rss_mb` (ru_maxrss read
      right after warm-up + timed steps), then (R > 0) `torch_forward_s` (no_grad forward of the same
      converted model) and with --plain-forward `torch_plain_forward_s` (a fresh plain vit_b_16).
  --bench-gpu --batch 64 --steps N [--warmup W]
      on CUDA (float32, TF32 off for cuBLAS and cuDNN, like ttmoe's FP32 cuBLAS GEMMs): alternates a
      no_grad forward of a plain vit_b_16 with a MoETTA step of a converted one, run by run, each
      timed to torch.cuda.synchronize(); prints torch_gpu_forward_s, torch_gpu_forward_images_per_s,
      torch_gpu_moetta_step_s, torch_gpu_step_over_forward (median of paired ratios) and
      torch_gpu_step_peak_mb (torch.cuda.max_memory_allocated over the timed steps).
  --check   small self-checks: a converted model computes the plain model's logits at init; the
      MoELayerNorm equals moetta_reference.MoELayerNorm (float64, same inputs and parameters) in value
      and router/expert gradients; a step moves only routers/experts.
Threads: OMP_NUM_THREADS (forced with torch.set_num_threads).
"""
import argparse
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

NUM_EXPERTS, FIRST_MOE = 9, 1
LAMBDA, E0_FACTOR, MOMENTUM, LR_AT_64 = 0.2, 0.4, 0.9, 1e-3


class MoELayerNorm(torch.nn.Module):
    """MoE-LayerNorm (Algorithm 2, k = 1, per-sample routing on the token mean of the input)."""

    def __init__(self, ln: torch.nn.LayerNorm, num_experts: int, gen: torch.Generator):
        super().__init__()
        d = ln.normalized_shape[0]
        self.eps = ln.eps
        self.register_buffer("weight", ln.weight.detach().clone())  # shared affine, frozen
        self.register_buffer("bias", ln.bias.detach().clone())
        dtype = ln.weight.dtype
        self.weight_delta = torch.nn.Parameter(torch.zeros(num_experts, d, dtype=dtype))
        self.bias_delta = torch.nn.Parameter(torch.zeros(num_experts, d, dtype=dtype))
        std = math.sqrt(2.0 / (d + num_experts))  # Xavier normal for a [E, D] weight
        self.router = torch.nn.Linear(d, num_experts, dtype=dtype)
        with torch.no_grad():
            self.router.weight.copy_(torch.randn(num_experts, d, generator=gen, dtype=dtype) * std)
            self.router.bias.zero_()
        self.aux_loss = None

    def forward(self, x):  # x [B, T, D]
        p = torch.softmax(self.router(x.mean(dim=1)), dim=-1)  # [B, E]
        top_p, top_idx = p.max(dim=-1)
        e = p.shape[1]
        count = torch.bincount(top_idx, minlength=e).to(p.dtype)
        self.aux_loss = e * torch.sum(p.mean(dim=0) * (count / count.sum()))
        c = (top_p / top_p.detach()).unsqueeze(-1)  # value 1, gradient to the router
        gamma = self.weight + c * self.weight_delta[top_idx]  # [B, D]
        beta = self.bias + c * self.bias_delta[top_idx]
        xn = F.layer_norm(x, (x.shape[-1],), None, None, self.eps)
        return xn * gamma[:, None, :] + beta[:, None, :]


def layernorm_slots(model):
    """(parent module, attribute name) of every LayerNorm in module order (2i, 2i+1, ..., 24)."""
    slots = []
    for i in range(len(model.encoder.layers)):
        blk = getattr(model.encoder.layers, f"encoder_layer_{i}")
        slots += [(blk, "ln_1"), (blk, "ln_2")]
    slots.append((model.encoder, "ln"))
    return slots


def convert_to_moetta(model, num_experts=NUM_EXPERTS, first_index=FIRST_MOE, seed=0):
    """Freezes `model`, replaces LayerNorms with index >= first_index by MoELayerNorm; returns them."""
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    layers = []
    for k, (parent, name) in enumerate(layernorm_slots(model)):
        if k >= first_index:
            m = MoELayerNorm(getattr(parent, name), num_experts, gen)
            setattr(parent, name, m)
            layers.append(m)
    return layers


def softmax_entropy(logits):
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


class MoETTA:
    """The adaptation loop around a converted torchvision ViT (eval mode throughout)."""

    def __init__(self, model, batch_size, num_experts=NUM_EXPERTS, seed=0):
        self.model = model.eval()
        self.layers = convert_to_moetta(model, num_experts, FIRST_MOE, seed)
        self.params = [p for m in self.layers for p in (m.weight_delta, m.bias_delta, m.router.weight, m.router.bias)]
        self.opt = torch.optim.SGD(self.params, lr=LR_AT_64 * batch_size / 64, momentum=MOMENTUM)
        self.entropy_sum, self.entropy_count = 0.0, 0
        self.last = {}

    def balance_loss(self):
        return sum(m.aux_loss for m in self.layers)

    def step(self, images):
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(images)
        ent = softmax_entropy(logits)
        batch_mean = ent.mean().item()
        running = (self.entropy_sum + batch_mean) / (self.entropy_count + 1)  # includes this batch
        threshold, alpha = running, LAMBDA * running
        e0 = E0_FACTOR * math.log(logits.shape[1])
        keep = ent.detach() <= threshold
        kept = int(keep.sum())
        loss = alpha * self.balance_loss()
        if kept > 0:
            loss = loss + (torch.exp(e0 - ent.detach()) * ent)[keep].mean()
        if math.isfinite(loss.item()):
            self.entropy_sum += batch_mean
            self.entropy_count += 1
            loss.backward()
            self.opt.step()
        self.last = dict(kept=kept, threshold=threshold, alpha=alpha, loss=loss.item())
        return logits.detach()


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss is KiB on Linux


def bench(a):
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(weights=None)
    # torchvision zero-initialises the head, which makes every entropy exactly ln 1000 and the filter
    # drop all samples; use the default nn.Linear (Kaiming-uniform) init, as ttmoe's random ViT does.
    model.heads.head.reset_parameters()
    tta = MoETTA(model, a.batch)
    x = torch.rand(a.batch, 3, 224, 224)
    for _ in range(a.warmup):
        tta.step(x)
    times = []
    for i in range(a.steps):
        t0 = time.perf_counter()
        tta.step(x)
        times.append(time.perf_counter() - t0)
        print(f"step {i}: {times[-1]:.4f} s (kept {tta.last['kept']}/{a.batch}, loss {tta.last['loss']:.4f})",
              file=sys.stderr)
    print(f"torch_moetta_step_s: {statistics.median(times):.4f}")
    print(f"peak_rss_mb: {peak_rss_mb():.1f}")
    if a.forward_runs > 0:
        ft = []
        with torch.no_grad():
            model(x)
            for _ in range(a.forward_runs):
                t0 = time.perf_counter()
                model(x)
                ft.append(time.perf_counter() - t0)
        print(f"torch_forward_s: {statistics.median(ft):.4f}")
        if a.plain_forward:
            plain = torchvision.models.vit_b_16(weights=None).eval()
            ft = []
            with torch.no_grad():
                plain(x)
                for _ in range(a.forward_runs):
                    t0 = time.perf_counter()
                    plain(x)
                    ft.append(time.perf_counter() - t0)
            print(f"torch_plain_forward_s: {statistics.median(ft):.4f}")


def bench_gpu(a):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    torch.manual_seed(0)
    plain = torchvision.models.vit_b_16(weights=None).eval().to(dev)
    model = torchvision.models.vit_b_16(weights=None)
    model.heads.head.reset_parameters()  # see bench(): a zero head makes every entropy ln 1000
    tta = MoETTA(model, a.batch)
    model.to(dev)  # moves the parameters in place: the optimiser keeps the same objects
    x = torch.rand(a.batch, 3, 224, 224, device=dev)

    def timed(f):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def forward():
        with torch.no_grad():
            plain(x)

    for _ in range(a.warmup):
        timed(forward), timed(lambda: tta.step(x))
    torch.cuda.reset_peak_memory_stats()
    fwd, stp = [], []
    for _ in range(a.steps):
        fwd.append(timed(forward))
        stp.append(timed(lambda: tta.step(x)))
    f, s = statistics.median(fwd), statistics.median(stp)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, batch {a.batch}, runs {a.steps}")
    print(f"torch_gpu_forward_s: {f:.5f}")
    print(f"torch_gpu_forward_images_per_s: {a.batch / f:.1f}")
    print(f"torch_gpu_moetta_step_s: {s:.5f}")
    print(f"torch_gpu_step_over_forward: {statistics.median([b / c for b, c in zip(stp, fwd)]):.3f}")
    print(f"torch_gpu_step_peak_mb: {torch.cuda.max_memory_allocated() / 2**20:.0f}")


def check():
    torch.manual_seed(1)
    # 1. conversion keeps the function at init (zero deltas, c = 1).
    model = torchvision.models.vit_b_16(weights=None).eval()
    x = torch.rand(2, 3, 224, 224)
    with torch.no_grad():
        ref = model(x)
    tta = MoETTA(model, 2)
    assert len(tta.layers) == 24 and isinstance(model.encoder.layers.encoder_layer_0.ln_1, torch.nn.LayerNorm)
    with torch.no_grad():
        out = model(x)
    err = (out - ref).abs().max().item()
    print(f"check conversion: max |logits - plain logits| = {err:.2e}")
    assert err < 1e-4
    # 2. MoELayerNorm == moetta_reference.MoELayerNorm (float64; that module sets the default dtype).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    prev = torch.get_default_dtype()
    import moetta_reference as R  # noqa: E402
    torch.set_default_dtype(prev)
    d, e = 16, 4
    ln = torch.nn.LayerNorm(d, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        ln.weight.normal_(1, 0.1), ln.bias.normal_(0, 0.1)
    ours = MoELayerNorm(ln, e, torch.Generator().manual_seed(5))
    torch.set_default_dtype(torch.float64)  # the reference builds its tensors in the default dtype
    theirs = R.MoELayerNorm(ln.weight.detach(), ln.bias.detach(), e, 1e-6, torch.Generator().manual_seed(5))
    torch.set_default_dtype(prev)
    with torch.no_grad():
        for t in (ours.weight_delta, ours.bias_delta):
            t.normal_(0, 0.1)
        theirs.weight_delta.copy_(ours.weight_delta), theirs.bias_delta.copy_(ours.bias_delta)
    xin = torch.randn(5, 7, d, dtype=torch.float64)
    ya, yb = ours(xin), theirs(xin)
    ((ya ** 2).sum() + ours.aux_loss).backward()
    ((yb ** 2).sum() + theirs.aux_loss).backward()
    diffs = [(ya - yb).abs().max(), (ours.router.weight.grad - theirs.router_weight.grad).abs().max(),
             (ours.router.bias.grad - theirs.router_bias.grad).abs().max(),
             (ours.weight_delta.grad - theirs.weight_delta.grad).abs().max()]
    print(f"check vs moetta_reference.MoELayerNorm: max diffs {[f'{float(v):.1e}' for v in diffs]}")
    assert max(float(v) for v in diffs) < 1e-12
    # 3. a step moves only routers / experts.
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    before = [p.detach().clone() for p in tta.params]
    tta.step(x)
    moved = max((p - b).abs().max().item() for p, b in zip(tta.params, before))
    still = all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    print(f"check step: kept {tta.last['kept']}/2 loss {tta.last['loss']:.4f} max |router/expert change| "
          f"{moved:.2e} frozen unchanged {still}")
    assert moved > 0 and still
    print("check: OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-gpu", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--forward-runs", type=int, default=0)
    ap.add_argument("--plain-forward", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    if a.check:
        check()
    if a.bench:
        bench(a)
    if a.bench_gpu:
        bench_gpu(a)
    if not (a.check or a.bench or a.bench_gpu):
        ap.print_help()


if __name__ == "__main__":
    main()
