"""Fixtures computed by the real libraries rather than by torch code written here. Run with the pinned
reference environment (TTMOE_REF_PYTHON, ~/.cache/ttmoe/venv: requirements/reference.txt):

  <out>/parity/lora_peft.safetensors       PEFT's LoRA layer (peft.tuners.lora.Linear, made by
                                           get_peft_model on an nn.Linear, float64): the parity
                                           fixture convention of README.md (in./param./out./upstream./
                                           grad.), read by tests/moe/test_parity_ttmm.cpp like `lora`.
  <out>/models/vit_tiny_timm_lib.safetensors  timm's own VisionTransformer (tiny random config: patch 4,
                                           16x16 images, dim 32, 2 blocks, 4 heads, 10 classes), its
                                           state_dict under `model.` with timm's key names (float32),
                                           `in.images` and `out.logits_f64` from the float64 copy of
                                           the same float32 weights; read by tests/models/test_vit_parity.cpp.
A missing library is an error (exit 1), never a skip.
"""
import argparse
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def lora_peft(out_dir):
    import peft
    from peft.tuners.lora import Linear as PeftLoraLinear

    seed, IN, OUT, r, alpha = 2012, 12, 10, 4, 8.0
    torch.manual_seed(seed)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(IN, OUT)

        def forward(self, x):
            return self.proj(x)

    cfg = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=["proj"], bias="none")
    model = peft.get_peft_model(Net().double(), cfg)
    layer = model.base_model.model.proj
    assert isinstance(layer, PeftLoraLinear), type(layer)
    # PEFT starts B at zero (the adapted layer equals the base); a zero B would hide the LoRA path and
    # A's gradient, so draw it.
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(0.0, 0.3)
    x = torch.randn(2, 3, IN, dtype=torch.float64, requires_grad=True)
    y = model(x)
    up = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 7919))
    (y * up).sum().backward()
    base = layer.base_layer
    assert base.weight.grad is None and base.bias.grad is None, "PEFT should freeze the base layer"
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    tensors = {
        "in.x": x.detach(),
        "param.weight": base.weight.detach().clone(),
        "param.bias": base.bias.detach().clone(),
        "param.lora_A.weight": a.detach().clone(),
        "param.lora_B.weight": b.detach().clone(),
        "out.y": y.detach(),
        "upstream.y": up,
        "grad.in.x": x.grad,
        "grad.param.lora_A.weight": a.grad,
        "grad.param.lora_B.weight": b.grad,
    }
    layer.merge()   # PEFT's own merge: W + scaling * B A
    tensors["out.merged_weight"] = base.weight.detach().clone()
    layer.unmerge()
    meta = {"component": "lora_peft", "seed": str(seed), "in_features": str(IN), "out_features": str(OUT),
            "r": str(r), "lora_alpha": str(alpha), "scaling": repr(float(layer.scaling["default"])),
            "lora_dropout": "0.0", "peft_version": peft.__version__, "loss_outputs": "y", "unit_upstream": "",
            "grad_inputs": "x", "grad_params": "lora_A.weight,lora_B.weight", "frozen_params": "weight,bias",
            "dtype": "float64"}
    os.makedirs(os.path.join(out_dir, "parity"), exist_ok=True)
    st.save(os.path.join(out_dir, "parity", "lora_peft.safetensors"), tensors, meta)


def vit_tiny_timm_lib(out_dir):
    import timm
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(5003)
    C, P, S, Dm, depth, H, hidden, classes = 3, 4, 16, 32, 2, 4, 64, 10
    model = VisionTransformer(img_size=S, patch_size=P, in_chans=C, num_classes=classes, embed_dim=Dm, depth=depth,
                              num_heads=H, mlp_ratio=hidden / Dm, qkv_bias=True, class_token=True,
                              global_pool="token").eval()
    # timm initialises biases to zero and LayerNorm to (1, 0): redraw every parameter so each one matters.
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith(("norm1.weight", "norm2.weight", "norm.weight")) else 0.0))
    images = torch.randn(3, C, S, S)
    sd = {"model." + k: v.detach().float().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        logits = model.double()(images.double())
    tensors = dict(sd)
    tensors["in.images"] = images
    tensors["out.logits_f64"] = logits
    meta = {"component": "vit_tiny_timm_lib", "img_size": str(S), "patch_size": str(P), "embed_dim": str(Dm),
            "depth": str(depth), "num_heads": str(H), "mlp_hidden": str(hidden), "num_classes": str(classes),
            "eps": "1e-06", "timm_version": timm.__version__}
    os.makedirs(os.path.join(out_dir, "models"), exist_ok=True)
    st.save(os.path.join(out_dir, "models", "vit_tiny_timm_lib.safetensors"), tensors, meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the test-data folder (fixtures go to its parity/ and models/)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    lora_peft(a.out)
    vit_tiny_timm_lib(a.out)


if __name__ == "__main__":
    main()
