"""Dense layers: linear, norms, activations, SwiGLU MLP, embedding, RoPE, patch embedding, attention
(timm ViT and Hugging Face Llama GQA), cross-entropy, softmax entropy."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from common import DT, I64, Case, randn, register


def _close(a, b, tol=1e-12, what=""):
    if a.shape != b.shape:
        raise AssertionError(f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
    err = (a - b).abs().max().item() if a.numel() else 0.0
    scale = max(1.0, b.abs().max().item() if b.numel() else 0.0)
    if not err <= tol * scale:
        raise AssertionError(f"{what}: max abs err {err:.3e} > {tol:.1e}*{scale:.3g}")


# ---------------------------------------------------------------------------------------------------
# linear
def _linear_fwd(i, p):
    return {"y": F.linear(i["x"], p["weight"], p.get("bias"))}


def _linear_cross(t):
    y = t["in.x"] @ t["param.weight"].T
    if "param.bias" in t:
        y = y + t["param.bias"]
    _close(y, t["out.y"], what="linear")


@register("linear", 1001)
def linear(seed):
    c = Case("linear", seed, in_features=13, out_features=7, bias=True)
    c.input("x", randn(2, 3, 13), grad=True)           # leading dims broadcast: [B, T, in]
    c.param("weight", randn(7, 13, scale=0.3))
    c.param("bias", randn(7))
    c.forward = _linear_fwd
    c.loss("y")
    c.crosscheck = _linear_cross
    return c


@register("linear_nobias", 1002)
def linear_nobias(seed):
    c = Case("linear_nobias", seed, in_features=9, out_features=5, bias=False)
    c.input("x", randn(4, 9), grad=True)
    c.param("weight", randn(5, 9, scale=0.3))
    c.forward = _linear_fwd
    c.loss("y")
    c.crosscheck = _linear_cross
    return c


# ---------------------------------------------------------------------------------------------------
# norms
@register("layernorm", 1003)
def layernorm(seed):
    eps = 1e-6
    c = Case("layernorm", seed, eps=eps, normalized_shape=13)
    x = randn(2, 3, 13) * 2.0 + randn(2, 3, 1) * 3.0   # per-row offsets: mean subtraction matters
    c.input("x", x, grad=True)
    c.param("weight", 1.0 + randn(13, scale=0.2))
    c.param("bias", randn(13, scale=0.2))
    c.forward = lambda i, p: {"y": F.layer_norm(i["x"], (13,), p["weight"], p["bias"], eps)}
    c.loss("y")

    def cross(t):
        x = t["in.x"]
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        _close((x - mu) / torch.sqrt(var + eps) * t["param.weight"] + t["param.bias"], t["out.y"], what="layernorm")
    c.crosscheck = cross
    return c


def rmsnorm_ref(x, weight, eps):
    """Llama RMSNorm: x * rsqrt(mean(x^2) + eps) * weight, in the input dtype."""
    var = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(var + eps))


@register("rmsnorm", 1004)
def rmsnorm(seed):
    eps = 1e-6
    c = Case("rmsnorm", seed, eps=eps, hidden_size=11)
    c.input("x", randn(2, 3, 11) * 1.5, grad=True)
    c.param("weight", 1.0 + randn(11, scale=0.2))
    c.forward = lambda i, p: {"y": rmsnorm_ref(i["x"], p["weight"], eps)}
    c.loss("y")

    def cross(t):
        x = t["in.x"]
        rms = torch.sqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps)
        _close(x / rms * t["param.weight"], t["out.y"], what="rmsnorm")
    c.crosscheck = cross
    return c


# ---------------------------------------------------------------------------------------------------
# activations: x covers [-8, 8] plus random values; 3 x 17 (odd width)
def _act_input():
    x = torch.linspace(-8.0, 8.0, 17, dtype=DT).unsqueeze(0)
    return torch.cat([x, randn(2, 17) * 2.0], 0)


@register("gelu_exact", 1005)
def gelu_exact(seed):
    c = Case("gelu_exact", seed, approximate="none")
    c.input("x", _act_input(), grad=True)
    c.forward = lambda i, p: {"y": F.gelu(i["x"], approximate="none")}
    c.loss("y")

    def cross(t):
        x = t["in.x"]
        _close(0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))), t["out.y"], what="gelu")
    c.crosscheck = cross
    return c


@register("gelu_tanh", 1006)
def gelu_tanh(seed):
    c = Case("gelu_tanh", seed, approximate="tanh")
    c.input("x", _act_input(), grad=True)
    c.forward = lambda i, p: {"y": F.gelu(i["x"], approximate="tanh")}
    c.loss("y")

    def cross(t):
        x = t["in.x"]
        y = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        _close(y, t["out.y"], what="gelu_tanh")
    c.crosscheck = cross
    return c


@register("silu", 1007)
def silu(seed):
    c = Case("silu", seed)
    c.input("x", _act_input(), grad=True)
    c.forward = lambda i, p: {"y": F.silu(i["x"])}
    c.loss("y")
    c.crosscheck = lambda t: _close(t["in.x"] * torch.sigmoid(t["in.x"]), t["out.y"], what="silu")
    return c


# ---------------------------------------------------------------------------------------------------
@register("swiglu_mlp", 1008)
def swiglu_mlp(seed):
    D, H = 12, 20
    c = Case("swiglu_mlp", seed, hidden_size=D, intermediate_size=H, hidden_act="silu", bias=False)
    c.input("x", randn(2, 3, D), grad=True)
    c.param("gate_proj.weight", randn(H, D, scale=D ** -0.5))
    c.param("up_proj.weight", randn(H, D, scale=D ** -0.5))
    c.param("down_proj.weight", randn(D, H, scale=H ** -0.5))

    def fwd(i, p):
        x = i["x"]
        return {"y": F.linear(F.silu(F.linear(x, p["gate_proj.weight"])) * F.linear(x, p["up_proj.weight"]),
                              p["down_proj.weight"])}
    c.forward = fwd
    c.loss("y")
    return c


@register("vit_residual_branches", 1017)
def vit_residual_branches(seed):
    """The two GEMM-closed residual branches of a timm ViT block: r + proj(x) and r + fc2(gelu(fc1(x))).
    Sizes large enough (80 rows, D 192, hidden 768) that ttmoe's float run takes its packed AVX-512
    GEMM, whose store adds the residual and applies GELU (forward) and GELU's VJP (backward)."""
    D, H = 192, 768
    c = Case("vit_residual_branches", seed, dim=D, hidden=H, act="gelu")
    c.input("x", randn(2, 40, D), grad=True)
    c.input("r", randn(2, 40, D), grad=True)
    c.param("proj.weight", randn(D, D, scale=D ** -0.5))
    c.param("proj.bias", randn(D, scale=0.1))
    c.param("mlp.fc1.weight", randn(H, D, scale=D ** -0.5))
    c.param("mlp.fc1.bias", randn(H, scale=0.1))
    c.param("mlp.fc2.weight", randn(D, H, scale=H ** -0.5))
    c.param("mlp.fc2.bias", randn(D, scale=0.1))

    def fwd(i, p):
        x, r = i["x"], i["r"]
        hidden = F.gelu(F.linear(x, p["mlp.fc1.weight"], p["mlp.fc1.bias"]))
        return {"proj": r + F.linear(x, p["proj.weight"], p["proj.bias"]),
                "mlp": r + F.linear(hidden, p["mlp.fc2.weight"], p["mlp.fc2.bias"])}

    def cross(t):
        x, r = t["in.x"], t["in.r"]
        pre = x @ t["param.mlp.fc1.weight"].T + t["param.mlp.fc1.bias"]
        hidden = 0.5 * pre * (1 + torch.erf(pre / math.sqrt(2)))
        _close(hidden @ t["param.mlp.fc2.weight"].T + t["param.mlp.fc2.bias"] + r, t["out.mlp"], what="mlp")
        _close(x @ t["param.proj.weight"].T + t["param.proj.bias"] + r, t["out.proj"], what="proj")

    c.forward = fwd
    c.loss("proj", "mlp")
    c.crosscheck = cross
    return c


@register("embedding", 1009)
def embedding(seed):
    V, D = 11, 6
    c = Case("embedding", seed, num_embeddings=V, embedding_dim=D)
    ids = torch.tensor([[3, 0, 10, 3, 7], [7, 7, 1, 0, 5]], dtype=I64)  # repeats: gradient accumulates
    c.input("ids", ids)
    c.param("weight", randn(V, D))
    c.forward = lambda i, p: {"y": F.embedding(i["ids"], p["weight"])}
    c.loss("y")
    c.crosscheck = lambda t: _close(t["param.weight"][t["in.ids"]], t["out.y"], what="embedding")
    return c


# ---------------------------------------------------------------------------------------------------
# RoPE (Hugging Face Llama, rotate_half convention)
def rope_cos_sin(positions, head_dim, theta=10000.0):
    """positions: I64 [..., T] -> cos, sin of shape [..., T, head_dim] (float64 throughout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=DT) / head_dim))
    ang = positions.to(DT).unsqueeze(-1) * inv_freq           # [..., T, hd/2]
    emb = torch.cat([ang, ang], dim=-1)                         # [..., T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, T, hd]; cos/sin [B, T, hd] (or [T, hd]) broadcast over heads."""
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


@register("rope", 1010)
def rope(seed):
    B, H, Hkv, T, hd, theta = 2, 4, 2, 5, 8, 10000.0
    c = Case("rope", seed, theta=theta, head_dim=hd, num_heads=H, num_kv_heads=Hkv, convention="rotate_half")
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 130, 2047]], dtype=I64)
    c.input("q", randn(B, H, T, hd), grad=True)
    c.input("k", randn(B, Hkv, T, hd), grad=True)
    c.input("positions", pos)

    def fwd(i, p):
        cos, sin = rope_cos_sin(i["positions"], hd, theta)
        return {"q_rot": apply_rope(i["q"], cos, sin), "k_rot": apply_rope(i["k"], cos, sin),
                "cos": cos, "sin": sin}
    c.forward = fwd
    c.loss("q_rot", "k_rot")

    def cross(t):  # explicit pairwise rotation of (x_j, x_{j+hd/2}) by angle pos * theta^(-2j/hd)
        q, pos = t["in.q"], t["in.positions"]
        out = torch.empty_like(q)
        for b in range(B):
            for tt in range(T):
                for j in range(hd // 2):
                    a = pos[b, tt].item() * theta ** (-2.0 * j / hd)
                    x1, x2 = q[b, :, tt, j], q[b, :, tt, j + hd // 2]
                    out[b, :, tt, j] = x1 * math.cos(a) - x2 * math.sin(a)
                    out[b, :, tt, j + hd // 2] = x2 * math.cos(a) + x1 * math.sin(a)
        _close(out, t["out.q_rot"], tol=1e-12, what="rope")
    c.crosscheck = cross
    return c


# ---------------------------------------------------------------------------------------------------
def _patch_fwd(P):
    def fwd(i, p):
        y = F.conv2d(i["x"], p["proj.weight"], p["proj.bias"], stride=P)   # [B, D, gh, gw]
        return {"y": y.flatten(2).transpose(1, 2)}                           # [B, gh*gw, D]
    return fwd


def _patch_cross(P):
    def cross(t):
        x, w, b = t["in.x"], t["param.proj.weight"], t["param.proj.bias"]
        B, C, Hh, W = x.shape
        gh, gw = Hh // P, W // P
        patches = x.reshape(B, C, gh, P, gw, P).permute(0, 2, 4, 1, 3, 5).reshape(B, gh * gw, C * P * P)
        _close(patches @ w.reshape(w.shape[0], -1).T + b, t["out.y"], what="patch_embed")
    return cross


@register("patch_embed", 1011)
def patch_embed(seed):
    B, C, S, P, D = 1, 3, 32, 16, 5
    c = Case("patch_embed", seed, img_size=S, patch_size=P, in_chans=C, embed_dim=D, num_patches=(S // P) ** 2)
    c.input("x", randn(B, C, S, S), grad=True)
    c.param("proj.weight", randn(D, C, P, P, scale=(C * P * P) ** -0.5))
    c.param("proj.bias", randn(D, scale=0.1))
    c.forward = _patch_fwd(P)
    c.loss("y")
    c.crosscheck = _patch_cross(P)
    return c


@register("patch_embed_p4", 1012)
def patch_embed_p4(seed):
    B, C, S, P, D = 2, 3, 12, 4, 5
    c = Case("patch_embed_p4", seed, img_size=S, patch_size=P, in_chans=C, embed_dim=D, num_patches=(S // P) ** 2)
    c.input("x", randn(B, C, S, S), grad=True)
    c.param("proj.weight", randn(D, C, P, P, scale=(C * P * P) ** -0.5))
    c.param("proj.bias", randn(D, scale=0.1))
    c.forward = _patch_fwd(P)
    c.loss("y")
    c.crosscheck = _patch_cross(P)
    return c


# ---------------------------------------------------------------------------------------------------
# timm ViT Attention
def vit_attention(x, qkv_w, qkv_b, proj_w, proj_b, num_heads):
    B, T, D = x.shape
    hd = D // num_heads
    qkv = F.linear(x, qkv_w, qkv_b).reshape(B, T, 3, num_heads, hd).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]                        # [B, H, T, hd]
    attn = (q * hd ** -0.5) @ k.transpose(-2, -1)
    attn = attn.softmax(dim=-1)
    o = (attn @ v).transpose(1, 2).reshape(B, T, D)
    return F.linear(o, proj_w, proj_b)


@register("attention", 1013)
def attention(seed):
    B, T, D, H = 2, 5, 16, 4
    c = Case("attention", seed, dim=D, num_heads=H, head_dim=D // H, scale=(D // H) ** -0.5, qkv_bias=True,
             mask="none")
    c.input("x", randn(B, T, D), grad=True)
    c.param("qkv.weight", randn(3 * D, D, scale=D ** -0.5))
    c.param("qkv.bias", randn(3 * D, scale=0.1))
    c.param("proj.weight", randn(D, D, scale=D ** -0.5))
    c.param("proj.bias", randn(D, scale=0.1))
    c.forward = lambda i, p: {"y": vit_attention(i["x"], p["qkv.weight"], p["qkv.bias"], p["proj.weight"],
                                                 p["proj.bias"], H)}
    c.loss("y")

    def cross(t):  # torch.nn.MultiheadAttention with the fused in-projection is the same computation
        mha = torch.nn.MultiheadAttention(D, H, bias=True, batch_first=True, dtype=DT)
        with torch.no_grad():
            mha.in_proj_weight.copy_(t["param.qkv.weight"])
            mha.in_proj_bias.copy_(t["param.qkv.bias"])
            mha.out_proj.weight.copy_(t["param.proj.weight"])
            mha.out_proj.bias.copy_(t["param.proj.bias"])
            y, _ = mha(t["in.x"], t["in.x"], t["in.x"], need_weights=False)
        _close(y, t["out.y"], what="attention vs nn.MultiheadAttention")
    c.crosscheck = cross
    return c


# Hugging Face Llama attention with grouped-query heads, causal mask and RoPE
def llama_attention(x, wq, wk, wv, wo, num_heads, num_kv_heads, positions, theta=10000.0):
    B, T, D = x.shape
    hd = wq.shape[0] // num_heads
    q = F.linear(x, wq).view(B, T, num_heads, hd).transpose(1, 2)
    k = F.linear(x, wk).view(B, T, num_kv_heads, hd).transpose(1, 2)
    v = F.linear(x, wv).view(B, T, num_kv_heads, hd).transpose(1, 2)
    cos, sin = rope_cos_sin(positions, hd, theta)            # [T, hd]
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    rep = num_heads // num_kv_heads
    k = k.repeat_interleave(rep, dim=1)                       # query head h uses kv head h // rep
    v = v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-2, -1)) * hd ** -0.5
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)        # key j > query i is masked
    scores = scores.masked_fill(mask, float("-inf"))
    o = scores.softmax(-1) @ v                                # [B, H, T, hd]
    return F.linear(o.transpose(1, 2).reshape(B, T, num_heads * hd), wo)


@register("attention_gqa", 1014)
def attention_gqa(seed):
    B, T, D, H, Hkv, theta = 2, 5, 16, 4, 2, 10000.0
    hd = D // H
    c = Case("attention_gqa", seed, hidden_size=D, num_heads=H, num_kv_heads=Hkv, head_dim=hd, rope_theta=theta,
             scale=hd ** -0.5, mask="causal", bias=False)
    c.input("x", randn(B, T, D), grad=True)
    c.input("positions", torch.arange(T, dtype=I64))
    c.param("q_proj.weight", randn(H * hd, D, scale=D ** -0.5 * 1.5))
    c.param("k_proj.weight", randn(Hkv * hd, D, scale=D ** -0.5 * 1.5))
    c.param("v_proj.weight", randn(Hkv * hd, D, scale=D ** -0.5))
    c.param("o_proj.weight", randn(D, H * hd, scale=(H * hd) ** -0.5))
    c.forward = lambda i, p: {"y": llama_attention(i["x"], p["q_proj.weight"], p["k_proj.weight"],
                                                   p["v_proj.weight"], p["o_proj.weight"], H, Hkv,
                                                   i["positions"], theta)}
    c.loss("y")

    def cross(t):  # per (batch, head, query) loop over visible keys
        x = t["in.x"]
        wq, wk, wv, wo = (t[f"param.{n}_proj.weight"] for n in "qkvo")
        cos, sin = rope_cos_sin(t["in.positions"], hd, theta)
        out = torch.zeros(B, T, H * hd, dtype=DT)
        for b in range(B):
            for h in range(H):
                g = h // (H // Hkv)
                q = x[b] @ wq[h * hd:(h + 1) * hd].T
                k = x[b] @ wk[g * hd:(g + 1) * hd].T
                v = x[b] @ wv[g * hd:(g + 1) * hd].T
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
                for i in range(T):
                    s = torch.stack([q[i] @ k[j] / math.sqrt(hd) for j in range(i + 1)])
                    w = torch.exp(s - s.max())
                    w = w / w.sum()
                    out[b, i, h * hd:(h + 1) * hd] = (w[:, None] * v[: i + 1]).sum(0)
        _close(out @ wo.T, t["out.y"], what="attention_gqa loop")
    c.crosscheck = cross
    return c


# ---------------------------------------------------------------------------------------------------
@register("cross_entropy", 1015)
def cross_entropy(seed):
    B, C = 5, 7
    c = Case("cross_entropy", seed, num_classes=C, reduction="mean", label_smoothing=0.0)
    logits = randn(B, C) * 2.0
    logits[3] += 60.0                                   # large logits: needs a stable log-sum-exp
    logits[3, 2] += 5.0
    c.input("logits", logits, grad=True)
    c.input("target", torch.tensor([0, 6, 3, 2, 3], dtype=I64))
    c.forward = lambda i, p: {"loss": F.cross_entropy(i["logits"], i["target"])}
    c.loss("loss", unit=True)

    def cross(t):
        z, y = t["in.logits"], t["in.target"]
        m = z.max(1, keepdim=True).values
        lse = (m + torch.log(torch.exp(z - m).sum(1, keepdim=True))).squeeze(1)
        _close((lse - z[torch.arange(B), y]).mean(), t["out.loss"], what="cross_entropy")
    c.crosscheck = cross
    return c


def softmax_entropy_ref(logits):
    return -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)


@register("softmax_entropy", 1016)
def softmax_entropy(seed):
    B, C = 4, 9
    c = Case("softmax_entropy", seed, num_classes=C, log="natural")
    logits = randn(B, C) * 2.0
    logits[1] = logits[1] * 0.01                         # nearly uniform: H close to ln 9
    logits[2] += 80.0                                     # large offset
    logits[3, 4] += 25.0                                  # nearly one-hot: H close to 0
    c.input("logits", logits, grad=True)
    c.forward = lambda i, p: {"entropy": softmax_entropy_ref(i["logits"])}
    c.loss("entropy")

    def cross(t):
        p = torch.softmax(t["in.logits"], -1)
        _close(-(p * torch.log(p)).sum(-1), t["out.entropy"], tol=1e-9, what="entropy")
    c.crosscheck = cross
    return c
