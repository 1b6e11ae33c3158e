#!/usr/bin/env python3
"""PyTorch reference of a tiny GMoE vision transformer for ttmoe's parity tests (tests/models).

The model is timm's own VisionTransformer whose chosen blocks' `mlp` is replaced by a GMoE MoE layer
written here from the paper and the authors' code facts (IMPLEMENTATION_FACTS.md, "GMoE" and "GMoE
checkpoints and Tutel"), in Tutel's dense formulation, independent of ttmoe's gather-per-expert one:
  gates.0 (CosineTopKGate): logits = normalize(cosine_projector(x)) @ normalize_columns(sim_matrix)
                            * exp(clamp(temperature, max=ln 100))
  noisy = logits + noise * gate_noise / E (the noise is a fixed standard-normal tensor given to the
  model, so the training forward is deterministic); scores = softmax(noisy); picks = top-k of noisy
  gates = scores at the picks (divided by their sum when renormalised)
  capacity C = k * int(cf * ceil(N / E)) over all N = B * T tokens; locations from the cumulative sum
  of each round's one-hot mask over tokens ordered by descending max score (batch-prioritised), plus
  the earlier rounds' per-expert totals; location >= C -> dropped
  dispatch [N, E, C] -> expert inputs [E, C, D] -> batched fc1 / GELU / fc2 (Tutel's
  FusedExpertsNetwork: y = gelu(x @ fc1_w^T + b1) @ fc2_w + b2, fc2_w stored [E, H, D]) -> combine
  l_aux = (cv2(sum softmax(logits)) + cv2(sum Phi((softmax(logits) - kth noisy logit) / (gate_noise/E)))) / 2
The state dict therefore has the authors' key names (blocks.{i}.mlp.gates.0.*, ...experts.batched_*,
..._num_global_experts). For each case <out>/gmoe/<case>.ckpt.safetensors is the model's state dict under
DomainBed's `model.` prefix, <case>.grads.safetensors the gradients of
  loss = cross_entropy(logits, labels) + 0.01 * sum over MoE blocks of l_aux
under the same key names, and <case>.safetensors the inputs (images, labels, noise.{m}) and outputs
(logits with the noise, logits_eval without it, aux = 0.01 * sum l_aux, loss, dropped.{m}).
Everything is float64. Needs the pinned reference environment (TTMOE_REF_PYTHON): torch, timm, safetensors.
"""
import argparse
import math
import os
import sys

try:
    import torch
    import torch.nn.functional as F
    import timm
    from timm.models.vision_transformer import VisionTransformer
    from safetensors.torch import save_file
except ImportError as e:  # a missing reference is a failure, never a skip
    print(f"gmoe_reference.py: the reference environment lacks {e.name}: {e}", file=sys.stderr)
    sys.exit(1)

AUX_WEIGHT = 0.01


class CosineTopKGate(torch.nn.Module):
    def __init__(self, dim, num_experts, proj_dim):
        super().__init__()
        self.temperature = torch.nn.Parameter(torch.log(torch.full([1], 1.0 / 0.5)))
        self.cosine_projector = torch.nn.Linear(dim, proj_dim)
        self.sim_matrix = torch.nn.Parameter(torch.empty(proj_dim, num_experts))
        torch.nn.init.normal_(self.sim_matrix, 0, 0.01)
        self.clamp_max = math.log(100.0)

    def forward(self, x):
        logits = F.normalize(self.cosine_projector(x), dim=1) @ F.normalize(self.sim_matrix, dim=0)
        return logits * torch.clamp(self.temperature, max=self.clamp_max).exp()


class FusedExperts(torch.nn.Module):
    def __init__(self, fc1, fc2, num_experts):
        super().__init__()
        E = num_experts
        self.batched_fc1_w = torch.nn.Parameter(fc1.weight.detach().clone().unsqueeze(0).repeat(E, 1, 1))
        self.batched_fc2_w = torch.nn.Parameter(fc2.weight.detach().t().clone().unsqueeze(0).repeat(E, 1, 1))
        self.batched_fc1_bias = torch.nn.Parameter(fc1.bias.detach().clone().unsqueeze(0).repeat(E, 1))
        self.batched_fc2_bias = torch.nn.Parameter(fc2.bias.detach().clone().unsqueeze(0).repeat(E, 1))

    def forward(self, x):  # [E, C, D]
        h = F.gelu(torch.matmul(x, self.batched_fc1_w.permute(0, 2, 1)) + self.batched_fc1_bias.unsqueeze(1))
        return torch.matmul(h, self.batched_fc2_w) + self.batched_fc2_bias.unsqueeze(1)


class GMoELayer(torch.nn.Module):
    def __init__(self, mlp, dim, num_experts, proj_dim, k, renormalize, capacity_factor, gate_noise=1.0):
        super().__init__()
        self.gates = torch.nn.ModuleList([CosineTopKGate(dim, num_experts, proj_dim)])
        self.experts = FusedExperts(mlp.fc1, mlp.fc2, num_experts)
        self.register_buffer("_num_global_experts", torch.tensor(num_experts))
        self.E, self.k, self.renormalize, self.cf, self.gate_noise = num_experts, k, renormalize, capacity_factor, gate_noise
        self.noise = None  # [N, E] standard normal, or None (no noise)
        self.l_aux = None
        self.dropped = None

    def forward(self, x):
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        N, E, k = xf.shape[0], self.E, self.k
        logits = self.gates[0](xf)
        noisy = logits + self.noise * (self.gate_noise / E) if self.noise is not None else logits
        scores = torch.softmax(noisy, dim=1)
        idx = torch.topk(noisy, k, dim=1).indices
        masks = [F.one_hot(idx[:, j], E).to(xf.dtype) for j in range(k)]
        gates = [(scores * m).sum(1) for m in masks]
        if self.renormalize:
            denom = torch.clamp(sum(gates), min=torch.finfo(xf.dtype).eps)
            gates = [g / denom for g in gates]
        order = torch.sort(-scores.max(dim=1).values.detach(), stable=True).indices
        inv = order.argsort()
        C = k * int(self.cf * ((N + E - 1) // E))
        combine = torch.zeros(N, E, C, dtype=xf.dtype)
        base = torch.zeros(E, dtype=torch.int64)
        dropped = 0
        for j in range(k):
            m = masks[j].to(torch.int64)
            loc = ((m[order].cumsum(0) - 1)[inv] + base)
            loc = (loc * m).sum(1)  # [N]
            base = base + m.sum(0)
            keep = loc < C
            dropped += int((~keep).sum())
            slot = F.one_hot(torch.where(keep, loc, 0), C).to(xf.dtype) * keep.unsqueeze(1).to(xf.dtype)
            combine = combine + gates[j][:, None, None] * masks[j][:, :, None] * slot[:, None, :]
        dispatch = (combine != 0).to(xf.dtype).detach()
        expert_in = torch.einsum("nec,nd->ecd", dispatch, xf)
        expert_out = self.experts(expert_in)
        y = torch.einsum("nec,ecd->nd", combine, expert_out)
        clean = torch.softmax(logits, dim=1)
        cv2 = lambda v: v.var() / (v.mean() ** 2 + 1e-10)  # noqa: E731 (unbiased variance, as Tutel)
        sigma = self.gate_noise / E
        thr = noisy.gather(1, idx[:, k - 1:k])
        load = torch.distributions.Normal(torch.tensor(0.0, dtype=xf.dtype), torch.tensor(sigma, dtype=xf.dtype)).cdf(
            clean - thr).sum(0)
        self.l_aux = (cv2(clean.sum(0)) + cv2(load)) / 2.0
        self.dropped = dropped
        return y.reshape(B, T, D)


def crosscheck_layer(layer, x):
    """The dense Tutel formulation against a token-by-token loop (slots handed out one pick at a time
    in priority order, rounds j = 0..k-1): the reference checks itself before anything is written."""
    with torch.no_grad():
        y = layer(x).reshape(-1, x.shape[-1])
        xf = x.reshape(-1, x.shape[-1])
        N, E, k = xf.shape[0], layer.E, layer.k
        logits = layer.gates[0](xf)
        noisy = logits + layer.noise * (layer.gate_noise / E) if layer.noise is not None else logits
        p = torch.softmax(noisy, 1)
        C = k * int(layer.cf * ((N + E - 1) // E))
        order = sorted(range(N), key=lambda n: -float(p[n].max()))
        fill, ref = [0] * E, torch.zeros_like(xf)
        ex = layer.experts
        for j in range(k):
            for n in order:
                picks = sorted(range(E), key=lambda e: -float(p[n, e]))[:k]
                e = picks[j]
                slot, fill[e] = fill[e], fill[e] + 1
                if slot >= C:
                    continue
                g = p[n, e] / sum(p[n, q] for q in picks) if layer.renormalize else p[n, e]
                h = F.gelu(ex.batched_fc1_w[e] @ xf[n] + ex.batched_fc1_bias[e])
                ref[n] += g * (h @ ex.batched_fc2_w[e] + ex.batched_fc2_bias[e])
        err = float((ref - y).abs().max())
        assert err < 1e-10, f"GMoE layer: dense dispatch vs token loop differ by {err}"


def build(seed, moe_blocks, E, k, renormalize, cf):
    torch.manual_seed(seed)
    C, P, S, Dm, depth, H, hidden, classes, R = 3, 4, 16, 32, 5, 4, 64, 5, 8
    model = VisionTransformer(img_size=S, patch_size=P, in_chans=C, num_classes=classes, embed_dim=Dm, depth=depth,
                              num_heads=H, mlp_ratio=hidden / Dm, qkv_bias=True, class_token=True,
                              global_pool="token", drop_path_rate=0.0)
    with torch.no_grad():  # timm's zero biases and unit norms would hide mistakes: redraw everything
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith(("norm1.weight", "norm2.weight", "norm.weight")) else 0.0))
    layers = []
    for b in moe_blocks:
        layer = GMoELayer(model.blocks[b].mlp, Dm, E, R, k, renormalize, cf)
        with torch.no_grad():  # experts start as copies; perturb them so each one's gradient is its own
            for p in layer.experts.parameters():
                p.add_(torch.randn_like(p) * 0.05)
            layer.gates[0].sim_matrix.normal_(0, 1.0)  # spread the routing (0.01 routes nearly uniformly)
            layer.gates[0].temperature.fill_(math.log(2.0) + 0.5)
        model.blocks[b].mlp = layer
        layers.append(layer)
    model = model.double()
    meta = dict(img_size=S, patch_size=P, embed_dim=Dm, depth=depth, num_heads=H, mlp_hidden=hidden,
                num_classes=classes, router_dim=R, num_experts=E, top_k=k, renormalize=int(renormalize),
                capacity_factor=cf, gate_noise=1.0, aux_weight=AUX_WEIGHT, moe_blocks=",".join(map(str, moe_blocks)))
    return model, layers, meta


def case(out_dir, name, seed, moe_blocks, E, k, renormalize, cf):
    model, layers, meta = build(seed, moe_blocks, E, k, renormalize, cf)
    B = 3
    g = torch.Generator().manual_seed(seed + 1)
    images = torch.randn(B, 3, meta["img_size"], meta["img_size"], generator=g, dtype=torch.float64)
    labels = torch.randint(0, meta["num_classes"], (B,), generator=g)
    N = B * ((meta["img_size"] // meta["patch_size"]) ** 2 + 1)
    noise = [torch.randn(N, E, generator=g, dtype=torch.float64) for _ in layers]
    state = {"model." + kk: v.detach().clone().contiguous() for kk, v in model.state_dict().items()}

    for layer, z in zip(layers, noise):
        layer.noise = z
        crosscheck_layer(layer, torch.randn(B, N // B, meta["embed_dim"], generator=g, dtype=torch.float64))
    logits = model(images)
    aux = AUX_WEIGHT * sum(layer.l_aux for layer in layers)
    loss = F.cross_entropy(logits, labels) + aux
    loss.backward()
    dropped = [layer.dropped for layer in layers]
    assert sum(dropped) > 0, f"{name}: the capacity should drop tokens ({dropped})"
    grads = {kk: p.grad.detach().clone().contiguous() for kk, p in model.named_parameters()}
    for b, layer in zip(moe_blocks, layers):
        grads[f"blocks.{b}.mlp._num_global_experts"] = layer._num_global_experts.clone()
    with torch.no_grad():
        for layer in layers:
            layer.noise = None
        logits_eval = model(images)

    refs = {"images": images, "labels": labels, "logits": logits.detach(), "logits_eval": logits_eval,
            "aux": aux.detach().reshape(()), "loss": loss.detach().reshape(())}
    for m, z in enumerate(noise):
        refs[f"noise.{m}"] = z
        refs[f"dropped.{m}"] = torch.tensor(dropped[m], dtype=torch.int64)
    md = {kk: str(v) for kk, v in meta.items()}
    md["timm_version"] = timm.__version__
    os.makedirs(out_dir, exist_ok=True)
    save_file(state, os.path.join(out_dir, name + ".ckpt.safetensors"), metadata={"format": "pt"})
    save_file(grads, os.path.join(out_dir, name + ".grads.safetensors"), metadata={"format": "pt"})
    save_file(refs, os.path.join(out_dir, name + ".safetensors"), metadata=md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for the fixtures (the test-data/gmoe folder)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    # The authors' code: top-1, gate not renormalised, capacity factor 1.5.
    case(a.out, "gmoe_tiny_top1", 7101, [1, 3], E=6, k=1, renormalize=False, cf=1.5)
    # The paper: top-2 with renormalised gates; capacity factor 1.0 so that second picks drop too.
    case(a.out, "gmoe_tiny_top2", 7102, [1, 3], E=4, k=2, renormalize=True, cf=1.0)


if __name__ == "__main__":
    main()
