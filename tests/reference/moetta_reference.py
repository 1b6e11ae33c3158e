"""PyTorch reference for MoETTA test-time adaptation (parity fixture for tests/tta).

Written from the MoETTA paper (Algorithm 1, Algorithm 2, Eqs. 1, 3, 8-10) and the implementation facts
in /work/shared/papers/IMPLEMENTATION_FACTS.md, not from the C++ code:

* a tiny timm-layout ViT (img 16, patch 4, dim 32, depth 2, heads 4, MLP 64, 10 classes, LayerNorm
  eps 1e-6), float64 throughout, weights drawn from a seed;
* LayerNorms counted in module order (blocks.i.norm1 = 2i, blocks.i.norm2 = 2i+1, norm = 2*depth);
  index 0 stays a plain frozen LayerNorm, indices >= 1 become MoE-LayerNorms with E = 3 experts:
  router = Linear(D -> E) with bias on the token mean of the LayerNorm's raw input (CLS included),
  p = softmax, top-1, c = p_top / p_top.detach(); gamma = gamma_shared + c * dgamma[e], likewise beta;
  expert deltas zero-initialised, router weights seeded (Xavier normal, bias zero);
* balance loss per layer E * sum_e mean_b(p[b, e]) * count_e / sum(count), summed over layers;
* per batch: entropy H over all logits, threshold / alpha by Algorithm 1's recurrence
  (threshold_1 = mean H of batch 1, then threshold *= new_avg / old_avg with the running average of
  batch-mean entropies after appending the batch; alpha likewise from lambda * mean H of batch 1),
  keep H <= threshold (facts: the code's comparison), loss = mean_kept(exp(E0 - H.detach()) * H)
  + alpha * sum_layers LB, the entropy term omitted when nothing is kept; SGD momentum 0.9;
* logits returned for a batch are those of the forward before its update.

Output (float64, safetensors via st.py): model weights `model.<timm name>` (pre-conversion, so
blocks.i.normX.weight/bias are the shared affine), `init.param.<name>` for each router/expert tensor
(`blocks.0.norm2.router.weight`, `...experts.weight_delta`, ...), the batches `in.images.{t}`, per step
`out.logits.{t}`, `out.kept.{t}`, `out.threshold.{t}`, `out.alpha.{t}`, `out.loss.{t}`, and the
router/expert params after the last step `out.param.<name>`. Metadata: config, lr, lambda, E0 factor.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

torch.set_default_dtype(torch.float64)

CFG = dict(img=16, patch=4, chans=3, dim=32, depth=2, heads=4, hidden=64, classes=10, eps=1e-6)
EXPERTS, FIRST_MOE, STEPS, BATCH = 3, 1, 3, 8
LAMBDA, E0_FACTOR, MOMENTUM = 0.2, 0.4, 0.9
# The test uses a larger rate than 1e-3 * 8 / 64 so that three steps move the routers and experts
# visibly (parity of a barely-moving state would prove little); the rate is stored in the metadata.
LR = 0.05


class MoELayerNorm(torch.nn.Module):
    """Algorithm 2 of the paper with k = 1 (per-sample routing on the token mean)."""

    def __init__(self, weight, bias, num_experts, eps, gen):
        super().__init__()
        d = weight.numel()
        self.weight = weight.clone()  # shared, frozen (plain tensors: not parameters)
        self.bias = bias.clone()
        self.eps = eps
        self.weight_delta = torch.nn.Parameter(torch.zeros(num_experts, d))
        self.bias_delta = torch.nn.Parameter(torch.zeros(num_experts, d))
        std = math.sqrt(2.0 / (d + num_experts))  # Xavier normal for a [E, D] weight
        self.router_weight = torch.nn.Parameter(torch.randn(num_experts, d, generator=gen) * std)
        self.router_bias = torch.nn.Parameter(torch.zeros(num_experts))
        self.aux_loss = None

    def forward(self, x):
        z = x.mean(dim=1)                                    # [B, D]
        p = torch.softmax(F.linear(z, self.router_weight, self.router_bias), dim=-1)  # [B, E]
        top_p, top_idx = p.max(dim=-1)                       # top-1
        e = p.shape[1]
        count = torch.bincount(top_idx, minlength=e).to(p.dtype)
        self.aux_loss = e * torch.sum(p.mean(dim=0) * (count / count.sum()))
        c = (top_p / top_p.detach()).unsqueeze(-1)           # value 1, gradient to the router
        gamma = self.weight + c * self.weight_delta[top_idx]  # [B, D]
        beta = self.bias + c * self.bias_delta[top_idx]
        xn = F.layer_norm(x, (x.shape[-1],), None, None, self.eps)
        return xn * gamma[:, None, :] + beta[:, None, :]


class PlainLN(torch.nn.Module):
    def __init__(self, weight, bias, eps):
        super().__init__()
        self.weight, self.bias, self.eps = weight.clone(), bias.clone(), eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def make_weights(seed):
    g = torch.Generator().manual_seed(seed)
    c = CFG
    r = lambda *s, std=0.1: torch.randn(*s, generator=g) * std
    n = (c["img"] // c["patch"]) ** 2
    D, H = c["dim"], c["hidden"]
    p = {"cls_token": r(1, 1, D), "pos_embed": r(1, n + 1, D),
         "patch_embed.proj.weight": r(D, c["chans"], c["patch"], c["patch"], std=0.3), "patch_embed.proj.bias": r(D)}
    for i in range(c["depth"]):
        b = f"blocks.{i}."
        p.update({b + "norm1.weight": 1 + r(D), b + "norm1.bias": r(D),
                  b + "attn.qkv.weight": r(3 * D, D, std=0.2), b + "attn.qkv.bias": r(3 * D),
                  b + "attn.proj.weight": r(D, D, std=0.2), b + "attn.proj.bias": r(D),
                  b + "norm2.weight": 1 + r(D), b + "norm2.bias": r(D),
                  b + "mlp.fc1.weight": r(H, D, std=0.2), b + "mlp.fc1.bias": r(H),
                  b + "mlp.fc2.weight": r(D, H, std=0.2), b + "mlp.fc2.bias": r(D)})
    p["norm.weight"], p["norm.bias"] = 1 + r(D), r(D)
    # A head with larger weights so that the 10-way predictions are neither uniform nor one-hot.
    p["head.weight"], p["head.bias"] = r(c["classes"], D, std=0.6), r(c["classes"])
    return p


def ln_names(depth):
    return [f"blocks.{i}.norm{j}" for i in range(depth) for j in (1, 2)] + ["norm"]


class TinyMoEViT(torch.nn.Module):
    """timm VisionTransformer forward (pre-norm blocks, class-token pooling) with MoE-LayerNorms."""

    def __init__(self, w, router_seed):
        super().__init__()
        self.w = w
        gen = torch.Generator().manual_seed(router_seed)
        self.norms = {}
        self.moe = torch.nn.ModuleDict()
        for k, name in enumerate(ln_names(CFG["depth"])):
            if k >= FIRST_MOE:
                m = MoELayerNorm(w[name + ".weight"], w[name + ".bias"], EXPERTS, CFG["eps"], gen)
                self.moe[name.replace(".", "_")] = m
                self.norms[name] = m
            else:
                self.norms[name] = PlainLN(w[name + ".weight"], w[name + ".bias"], CFG["eps"])
        self.moe_names = [n for k, n in enumerate(ln_names(CFG["depth"])) if k >= FIRST_MOE]

    def forward(self, images):
        w, c = self.w, CFG
        D, nh = c["dim"], c["heads"]
        x = F.conv2d(images, w["patch_embed.proj.weight"], w["patch_embed.proj.bias"], stride=c["patch"])
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat([w["cls_token"].expand(x.shape[0], -1, -1), x], dim=1) + w["pos_embed"]
        for i in range(c["depth"]):
            b = f"blocks.{i}."
            h = self.norms[b + "norm1"](x)
            B, T, _ = h.shape
            qkv = F.linear(h, w[b + "attn.qkv.weight"], w[b + "attn.qkv.bias"]).reshape(B, T, 3, nh, D // nh)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            a = torch.softmax(q @ k.transpose(-2, -1) * (D // nh) ** -0.5, dim=-1) @ v
            x = x + F.linear(a.transpose(1, 2).reshape(B, T, D), w[b + "attn.proj.weight"], w[b + "attn.proj.bias"])
            h = self.norms[b + "norm2"](x)
            h = F.linear(F.gelu(F.linear(h, w[b + "mlp.fc1.weight"], w[b + "mlp.fc1.bias"])),
                         w[b + "mlp.fc2.weight"], w[b + "mlp.fc2.bias"])
            x = x + h
        x = self.norms["norm"](x)  # every token: the MoE router reads the whole sequence's mean
        return F.linear(x[:, 0], w["head.weight"], w["head.bias"])

    def balance_loss(self):
        return sum(self.norms[n].aux_loss for n in self.moe_names)

    def named_moe_params(self):
        """(C++ dotted name, parameter) for every router / expert tensor, module order."""
        out = []
        for n in self.moe_names:
            m = self.norms[n]
            out += [(n + ".experts.weight_delta", m.weight_delta), (n + ".experts.bias_delta", m.bias_delta),
                    (n + ".router.weight", m.router_weight), (n + ".router.bias", m.router_bias)]
        return out


def softmax_entropy(logits):
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def generate(out_dir, seed=7070):
    torch.manual_seed(seed)
    w = make_weights(seed)
    model = TinyMoEViT(w, router_seed=seed + 1)
    g = torch.Generator().manual_seed(seed + 2)
    batches = [torch.randn(BATCH, CFG["chans"], CFG["img"], CFG["img"], generator=g) for _ in range(STEPS)]
    tensors = {"model." + k: v for k, v in w.items()}
    params = model.named_moe_params()
    for name, p in params:
        tensors["init.param." + name] = p.detach().clone()
    opt = torch.optim.SGD([p for _, p in params], lr=LR, momentum=MOMENTUM)
    e0 = E0_FACTOR * math.log(CFG["classes"])
    entropys, threshold, alpha = [], None, None
    for t, x in enumerate(batches):
        tensors[f"in.images.{t}"] = x
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        tensors[f"out.logits.{t}"] = logits.detach().clone()  # prediction before the update
        ent = softmax_entropy(logits)
        mean_entropy = ent.mean().item()
        if t == 0:  # Algorithm 1, lines 8-10
            entropys.append(mean_entropy)
            threshold = mean_entropy
            alpha = LAMBDA * mean_entropy
        else:       # lines 12-16
            old_avg = sum(entropys) / len(entropys)
            entropys.append(mean_entropy)
            new_avg = sum(entropys) / len(entropys)
            threshold = threshold * new_avg / old_avg
            alpha = alpha * new_avg / old_avg
        keep = ent <= threshold
        kept = int(keep.sum())
        lb = model.balance_loss()
        loss = alpha * lb
        if kept > 0:
            loss = (torch.exp(e0 - ent.detach()) * ent)[keep].mean() + loss
        loss.backward()
        opt.step()
        tensors[f"out.kept.{t}"] = torch.tensor(kept, dtype=torch.int64)
        tensors[f"out.threshold.{t}"] = torch.tensor(threshold)
        tensors[f"out.alpha.{t}"] = torch.tensor(alpha)
        tensors[f"out.loss.{t}"] = loss.detach().clone()
        tensors[f"out.balance_loss.{t}"] = lb.detach().clone()
    for name, p in params:
        tensors["out.param." + name] = p.detach().clone()
    meta = {"component": "moetta_tiny_vit", "steps": str(STEPS), "batch": str(BATCH), "num_experts": str(EXPERTS),
            "first_moe_index": str(FIRST_MOE), "lr": repr(LR), "momentum": repr(MOMENTUM), "lambda": repr(LAMBDA),
            "e0_factor": repr(E0_FACTOR), "img_size": str(CFG["img"]), "patch_size": str(CFG["patch"]),
            "embed_dim": str(CFG["dim"]), "depth": str(CFG["depth"]), "num_heads": str(CFG["heads"]),
            "mlp_hidden": str(CFG["hidden"]), "num_classes": str(CFG["classes"]), "eps": repr(CFG["eps"])}
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "moetta_tiny_vit.safetensors")
    st.save(path, tensors, meta)
    return path, tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    path, t = generate(a.out)
    if not a.quiet:
        for s in range(STEPS):
            print(f"step {s}: kept {int(t[f'out.kept.{s}'])}/{BATCH} threshold {float(t[f'out.threshold.{s}']):.6f} "
                  f"alpha {float(t[f'out.alpha.{s}']):.6f} loss {float(t[f'out.loss.{s}']):.6f} "
                  f"LB {float(t[f'out.balance_loss.{s}']):.6f}")
        moved = max(float((t["out.param." + n] - t["init.param." + n]).abs().max())
                    for n in [k[len("init.param."):] for k in t if k.startswith("init.param.")])
        print(f"wrote {path}; max |param change| = {moved:.3e}")


if __name__ == "__main__":
    main()
