"""ViT reference checkpoints for the model parity tests.

Writes two fixtures into --out (default: build/test-data/models):
  vit_b16_torchvision.safetensors  torchvision.models.vit_b_16 with a seeded random initialisation
                                   (its head re-drawn: torchvision zero-initialises it, which would make
                                   every logit equal), keys in torchvision's naming under `model.`, a
                                   batch of inputs `in.images` [2, 3, 224, 224] and `out.logits`.
  vit_tiny_timm.safetensors        a tiny timm-layout ViT (patch 4, 16x16 images, dim 32, 2 blocks,
                                   4 heads, 10 classes) written with timm's key names under `model.`
                                   (fused qkv, pos_embed incl. the class token), run by a forward pass
                                   written here from torch primitives the way timm's VisionTransformer
                                   computes it (pre-norm blocks, exact GELU, LayerNorm eps 1e-6, class
                                   token pooling).
All tensors float32 (the checkpoints' real dtype); logits are computed in float64 from the same float32
weights so the C++ side compares against an accurate reference.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def torchvision_vit_b16(out_dir):
    import torchvision
    torch.manual_seed(5001)
    model = torchvision.models.vit_b_16(weights=None).eval()
    with torch.no_grad():
        model.heads.head.weight.normal_(0.0, 0.02)
        model.heads.head.bias.normal_(0.0, 0.02)
    images = torch.randn(2, 3, 224, 224)
    sd = {"model." + k: v.float() for k, v in model.state_dict().items()}
    with torch.no_grad():
        logits = model.double()(images.double())
    tensors = dict(sd)
    tensors["in.images"] = images
    tensors["out.logits"] = logits.float()
    tensors["out.logits_f64"] = logits
    st.save(os.path.join(out_dir, "vit_b16_torchvision.safetensors"), tensors,
            {"component": "vit_b16_torchvision", "format": "pt", "num_classes": "1000", "eps": "1e-06"})


def timm_tiny_vit(out_dir):
    torch.manual_seed(5002)
    C, P, S, Dm, depth, H, hidden, classes = 3, 4, 16, 32, 2, 4, 64, 10
    n = (S // P) ** 2
    g = lambda *s, std=0.1: torch.randn(*s) * std
    p = {
        "cls_token": g(1, 1, Dm), "pos_embed": g(1, n + 1, Dm),
        "patch_embed.proj.weight": g(Dm, C, P, P), "patch_embed.proj.bias": g(Dm),
        "norm.weight": 1 + g(Dm), "norm.bias": g(Dm), "head.weight": g(classes, Dm), "head.bias": g(classes),
    }
    for i in range(depth):
        b = f"blocks.{i}."
        p.update({b + "norm1.weight": 1 + g(Dm), b + "norm1.bias": g(Dm),
                  b + "attn.qkv.weight": g(3 * Dm, Dm), b + "attn.qkv.bias": g(3 * Dm),
                  b + "attn.proj.weight": g(Dm, Dm), b + "attn.proj.bias": g(Dm),
                  b + "norm2.weight": 1 + g(Dm), b + "norm2.bias": g(Dm),
                  b + "mlp.fc1.weight": g(hidden, Dm), b + "mlp.fc1.bias": g(hidden),
                  b + "mlp.fc2.weight": g(Dm, hidden), b + "mlp.fc2.bias": g(Dm)})
    images = torch.randn(3, C, S, S)
    q = {k: v.double() for k, v in p.items()}
    x = F.conv2d(images.double(), q["patch_embed.proj.weight"], q["patch_embed.proj.bias"], stride=P)
    x = x.flatten(2).transpose(1, 2)
    x = torch.cat([q["cls_token"].expand(x.shape[0], -1, -1), x], dim=1) + q["pos_embed"]
    ln = lambda t, pre: F.layer_norm(t, (Dm,), q[pre + ".weight"], q[pre + ".bias"], 1e-6)
    for i in range(depth):
        b = f"blocks.{i}."
        h = ln(x, b + "norm1")
        B, T, _ = h.shape
        qkv = F.linear(h, q[b + "attn.qkv.weight"], q[b + "attn.qkv.bias"]).reshape(B, T, 3, H, Dm // H)
        qq, kk, vv = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        a = torch.softmax(qq @ kk.transpose(-2, -1) * (Dm // H) ** -0.5, dim=-1) @ vv
        a = a.transpose(1, 2).reshape(B, T, Dm)
        x = x + F.linear(a, q[b + "attn.proj.weight"], q[b + "attn.proj.bias"])
        h = ln(x, b + "norm2")
        h = F.linear(F.gelu(F.linear(h, q[b + "mlp.fc1.weight"], q[b + "mlp.fc1.bias"])),
                     q[b + "mlp.fc2.weight"], q[b + "mlp.fc2.bias"])
        x = x + h
    x = ln(x, "norm")
    logits = F.linear(x[:, 0], q["head.weight"], q["head.bias"])
    tensors = {"model." + k: v.float() for k, v in p.items()}
    tensors["in.images"] = images
    tensors["out.logits_f64"] = logits
    meta = {"component": "vit_tiny_timm", "img_size": str(S), "patch_size": str(P), "embed_dim": str(Dm),
            "depth": str(depth), "num_heads": str(H), "mlp_hidden": str(hidden), "num_classes": str(classes),
            "eps": "1e-06"}
    st.save(os.path.join(out_dir, "vit_tiny_timm.safetensors"), tensors, meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", choices=["torchvision", "timm"], default=None)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if a.only in (None, "timm"):
        timm_tiny_vit(a.out)
    if a.only in (None, "torchvision"):
        torchvision_vit_b16(a.out)


if __name__ == "__main__":
    main()
