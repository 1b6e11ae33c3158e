"""MoE components: MoE-LayerNorm (MoETTA), linear and cosine routers, GMoE/Tutel auxiliary losses,
capacity routing, the MoE FFN, and LoRA."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from common import DT, I64, LN100, Case, normalize, randn, register
from layers import _close


# ---------------------------------------------------------------------------------------------------
# MoE-LayerNorm (MoETTA)
def moe_layernorm_fwd(eps, per_token, frozen_ptop=None):
    def fwd(i, p):
        x = i["x"]                                               # [B, T, D]
        B, T, D = x.shape
        z = x if per_token else x.mean(dim=1)                    # router input: raw tokens / token mean
        probs = torch.softmax(F.linear(z, p["router.weight"], p["router.bias"]), dim=-1)  # [B,(T,)E]
        E = probs.shape[-1]
        top = probs.detach().argmax(dim=-1)                      # top-1 (ties -> lowest index)
        ptop = probs.gather(-1, top.unsqueeze(-1))               # [..., 1]
        den = ptop.detach() if frozen_ptop is None else frozen_ptop
        coef = ptop / den                                        # value 1, gradient to the router
        gamma = p["weight"] + coef * p["experts.weight_delta"][top]
        beta = p["bias"] + coef * p["experts.bias_delta"][top]
        xn = F.layer_norm(x, (D,), eps=eps)                      # no affine, biased variance
        if not per_token:
            gamma, beta = gamma.unsqueeze(1), beta.unsqueeze(1)
        y = xn * gamma + beta
        count = torch.bincount(top.reshape(-1), minlength=E).to(DT)
        balance = E * (probs.reshape(-1, E).mean(0) * (count / count.sum())).sum()
        return {"y": y, "probs": probs, "top_index": top, "balance_loss": balance}
    return fwd


def _moe_ln_cross(eps, per_token):
    def cross(t):
        x = t["in.x"]
        B, T, D = x.shape
        Wd, Bd = t["param.experts.weight_delta"], t["param.experts.bias_delta"]
        E = Wd.shape[0]
        y = torch.empty_like(x)
        tops = []
        probs_all = []
        for b in range(B):
            rows = [x[b, tt] for tt in range(T)] if per_token else [x[b].sum(0) / T]
            for r_i, z in enumerate(rows):
                logit = t["param.router.weight"] @ z + t["param.router.bias"]
                pr = torch.exp(logit - logit.max())
                pr = pr / pr.sum()
                e = int(torch.argmax(pr))
                tops.append(e)
                probs_all.append(pr)
                sl = slice(r_i, r_i + 1) if per_token else slice(0, T)
                y[b, sl] = F.layer_norm(x[b, sl], (D,), t["param.weight"] + Wd[e], t["param.bias"] + Bd[e], eps)
        _close(y, t["out.y"], what="moe_layernorm y")
        assert tops == t["out.top_index"].reshape(-1).tolist()
        P = torch.stack(probs_all).mean(0)
        F_ = torch.tensor([tops.count(e) / len(tops) for e in range(E)], dtype=DT)
        _close(E * (P * F_).sum(), t["out.balance_loss"], what="balance loss")
    return cross


def _moe_ln_case(name, seed, per_token):
    eps = 1e-6
    B, T, D, E = (2, 5, 13, 3) if per_token else (4, 5, 13, 3)
    c = Case(name, seed, eps=eps, num_experts=E, dim=D, top_k=1, routing="per_token" if per_token else "per_sample",
             router_input="raw token" if per_token else "mean over tokens of raw input",
             balance_loss="E*sum_e mean(p[:,e])*count_e/sum(count)")
    if per_token:
        x = randn(B, T, D) * 1.5 + 0.3                  # token-level variety: tokens of a sample differ
    else:
        x = randn(B, T, D) + randn(B, 1, D) * 1.5 + 0.5  # sample-level offsets: sample means differ
    c.input("x", x, grad=True)
    c.param("weight", 1.0 + randn(D, scale=0.1), grad=False)       # frozen shared affine
    c.param("bias", randn(D, scale=0.1), grad=False)
    c.param("experts.weight_delta", randn(E, D, scale=0.3))
    c.param("experts.bias_delta", randn(E, D, scale=0.3))
    c.param("router.weight", randn(E, D, scale=0.6))
    c.param("router.bias", randn(E, scale=0.2))
    c.forward = moe_layernorm_fwd(eps, per_token)

    def gc_forward(inp, prm):
        with torch.no_grad():
            o = c.forward(inp, prm)
        p0 = o["probs"].gather(-1, o["top_index"].unsqueeze(-1))
        return moe_layernorm_fwd(eps, per_token, frozen_ptop=p0)
    c.gradcheck_forward = gc_forward
    c.loss("y", "probs", "balance_loss")
    c.crosscheck = _moe_ln_cross(eps, per_token)
    with torch.no_grad():
        used = c.forward(c.inputs, c.params)["top_index"].unique().numel()
    assert used >= 2, f"{name}: only {used} expert(s) routed; pick other data"
    return c


@register("moe_layernorm", 2001)
def moe_layernorm(seed):
    return _moe_ln_case("moe_layernorm", seed, per_token=False)


@register("moe_layernorm_per_token", 2002)
def moe_layernorm_per_token(seed):
    return _moe_ln_case("moe_layernorm_per_token", seed, per_token=True)


# ---------------------------------------------------------------------------------------------------
# top-k helpers
def topk_desc(scores, k):
    """Top-k along the last axis, descending, ties -> lower index (stable sort)."""
    s = scores.detach()
    idx = torch.sort(-s, dim=-1, stable=True).indices[..., :k]
    return idx


def linear_router_fwd(k, renormalize):
    def fwd(i, p):
        logits = F.linear(i["x"], p["weight"], p.get("bias"))
        probs = torch.softmax(logits, dim=-1)
        idx = topk_desc(probs, k)                                # [N, k]
        vals = probs.gather(-1, idx)
        if renormalize:
            vals = vals / vals.sum(-1, keepdim=True)
        gates = torch.zeros_like(probs).scatter(-1, idx, vals)
        return {"logits": logits, "probs": probs, "gates": gates, "indices": idx}
    return fwd


@register("linear_router", 2003)
def linear_router(seed):
    N, D, E, k = 7, 10, 5, 2
    c = Case("linear_router", seed, num_experts=E, dim=D, top_k=k, renormalize=True, bias=True, noise="none")
    c.input("x", randn(N, D), grad=True)
    c.param("weight", randn(E, D, scale=0.5))
    c.param("bias", randn(E, scale=0.2))
    c.forward = linear_router_fwd(k, True)
    c.loss("logits", "probs", "gates")
    return c


@register("linear_router_top1", 2004)
def linear_router_top1(seed):
    N, D, E, k = 7, 10, 5, 1
    c = Case("linear_router_top1", seed, num_experts=E, dim=D, top_k=k, renormalize=False, bias=False, noise="none")
    c.input("x", randn(N, D), grad=True)
    c.param("weight", randn(E, D, scale=0.5))
    c.forward = linear_router_fwd(k, False)
    c.loss("logits", "probs", "gates")
    return c


# ---------------------------------------------------------------------------------------------------
# cosine router (GMoE / Tutel CosineTopKGate), top-1, gate not renormalised
def cosine_router_fwd(training):
    def fwd(i, p):
        E = p["codebook"].shape[1]
        h = normalize(F.linear(i["x"], p["proj.weight"], p["proj.bias"]), dim=-1)
        cb = normalize(p["codebook"], dim=0)
        scale = torch.exp(torch.clamp(p["log_scale"], max=LN100))
        logits = (h @ cb) * scale
        noisy = logits + i["noise"] * (1.0 / E) if training else logits
        probs = torch.softmax(noisy, dim=-1)
        idx = topk_desc(noisy, 1)
        gates = torch.zeros_like(probs).scatter(-1, idx, probs.gather(-1, idx))
        return {"logits": logits, "probs": probs, "gates": gates, "indices": idx}
    return fwd


def _cos_cross(training):
    def cross(t):
        x = t["in.x"]
        h = x @ t["param.proj.weight"].T + t["param.proj.bias"]
        h = h / h.norm(dim=1, keepdim=True)
        cb = t["param.codebook"] / t["param.codebook"].norm(dim=0, keepdim=True)
        s = math.exp(min(t["param.log_scale"].item(), math.log(100.0)))
        _close(h @ cb * s, t["out.logits"], what="cosine logits")
    return cross


def _cos_case(name, seed, training, log_scale):
    N, D, Pd, E = 7, 10, 8, 4
    c = Case(name, seed, num_experts=E, dim=D, proj_dim=Pd, top_k=1, renormalize=False, training=training,
             gate_noise=1.0 if training else 0.0, noise_std="1/num_experts", clamp_max="ln(100)",
             clamp_max_value=LN100, normalize_eps=1e-12)
    c.input("x", randn(N, D), grad=True)
    if training:
        c.input("noise", randn(N, E))
    c.param("proj.weight", randn(Pd, D, scale=D ** -0.5))
    c.param("proj.bias", randn(Pd, scale=0.1))
    c.param("codebook", randn(Pd, E))
    c.param("log_scale", torch.tensor(log_scale, dtype=DT))
    c.forward = cosine_router_fwd(training)
    c.loss("logits", "probs", "gates")
    c.crosscheck = _cos_cross(training)
    return c


@register("cosine_router", 2005)
def cosine_router(seed):
    return _cos_case("cosine_router", seed, training=True, log_scale=math.log(2.0) + 0.2)


@register("cosine_router_clamp", 2006)
def cosine_router_clamp(seed):
    return _cos_case("cosine_router_clamp", seed, training=False, log_scale=LN100 + 0.5)


# ---------------------------------------------------------------------------------------------------
# GMoE / Tutel importance + load auxiliary losses
def normal_cdf(x, sigma):
    return 0.5 * (1.0 + torch.erf(x / (sigma * math.sqrt(2.0))))


def aux_losses_fwd(k, gate_noise=1.0):
    def fwd(i, p):
        logits = i["logits"]
        E = logits.shape[-1]
        sigma = gate_noise / E
        noisy = logits + i["noise"] * sigma
        scores = torch.softmax(logits, dim=-1)                          # clean
        imp = scores.sum(0)
        l_imp = imp.var(unbiased=True) / (imp.mean() ** 2 + 1e-10)
        thr = noisy.gather(-1, topk_desc(noisy, k)[:, k - 1:k])         # k-th largest NOISY logit, [N, 1]
        load = normal_cdf(scores - thr, sigma).sum(0)
        l_load = load.var(unbiased=True) / (load.mean() ** 2 + 1e-10)
        l_aux = (l_imp + l_load) / 2.0
        return {"noisy_logits": noisy, "threshold": thr.squeeze(-1), "importance": imp, "load": load,
                "l_imp": l_imp, "l_load": l_load, "l_aux": l_aux}
    return fwd


def _aux_case(name, seed, k):
    N, E = 9, 5
    c = Case(name, seed, num_experts=E, top_k=k, gate_noise=1.0, sigma="gate_noise/num_experts", var="unbiased",
             eps=1e-10)
    c.input("logits", randn(N, E, scale=0.5), grad=True)
    c.input("noise", randn(N, E))
    c.forward = aux_losses_fwd(k)
    c.loss("l_aux", unit=True)

    def cross(t):
        z, nz = t["in.logits"], t["in.noise"]
        noisy = z + nz / E
        s = torch.softmax(z, -1)
        imp = s.sum(0)
        l_imp = ((imp - imp.mean()) ** 2).sum() / (E - 1) / (imp.mean() ** 2 + 1e-10)
        thr = torch.tensor([sorted(r.tolist(), reverse=True)[k - 1] for r in noisy], dtype=DT)
        pr = torch.distributions.Normal(torch.tensor(0.0, dtype=DT), torch.tensor(1.0 / E, dtype=DT)).cdf(
            s - thr[:, None])
        load = pr.sum(0)
        l_load = ((load - load.mean()) ** 2).sum() / (E - 1) / (load.mean() ** 2 + 1e-10)
        _close((l_imp + l_load) / 2, t["out.l_aux"], what="l_aux")
    c.crosscheck = cross
    return c


@register("moe_aux_losses", 2007)
def moe_aux_losses(seed):
    return _aux_case("moe_aux_losses", seed, 1)


@register("moe_aux_losses_k2", 2008)
def moe_aux_losses_k2(seed):
    return _aux_case("moe_aux_losses_k2", seed, 2)


# ---------------------------------------------------------------------------------------------------
# capacity routing (batch-prioritised, top-1)
def capacity(num_tokens, num_experts, capacity_factor, k=1):
    return k * int(capacity_factor * ((num_tokens + num_experts - 1) // num_experts))


def capacity_assign(top_index, top_score, num_experts, cap):
    """Priority order = descending top score, ties -> lower token index. A token's slot is the number of
    tokens routed to the same expert that come before it in that order; kept iff slot < cap."""
    order = torch.sort(-top_score.detach(), stable=True).indices
    slot = torch.empty_like(top_index)
    counts = [0] * num_experts
    for tkn in order.tolist():
        e = int(top_index[tkn])
        slot[tkn] = counts[e]
        counts[e] += 1
    kept = (slot < cap).to(I64)
    return order, slot, kept


def _capacity_vectorised(top_index, top_score, num_experts, cap):
    order = torch.sort(-top_score, stable=True).indices
    onehot = F.one_hot(top_index[order], num_experts)
    loc = (onehot.cumsum(0) - 1).gather(1, top_index[order].unsqueeze(1)).squeeze(1)
    slot = torch.empty_like(loc)
    slot[order] = loc
    return slot


@register("capacity_routing", 2009)
def capacity_routing(seed):
    N, E, cf, k = 13, 3, 1.5, 1
    C = capacity(N, E, cf, k)
    c = Case("capacity_routing", seed, num_tokens=N, num_experts=E, top_k=k, capacity_factor=cf, capacity=C,
             capacity_formula="k*int(cf*ceil(N/E))", priority="descending top softmax score, ties lower token index")
    logits = randn(N, E)
    logits[:, 0] += 1.2                       # skew towards expert 0 so that it overflows
    logits[9] = logits[4]                     # an exact tie in top score (token 4 beats token 9)
    c.input("logits", logits)

    def fwd(i, p):
        scores = torch.softmax(i["logits"], dim=-1)
        idx = topk_desc(scores, 1).squeeze(-1)
        top_score = scores.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        order, slot, kept = capacity_assign(idx, top_score, E, C)
        load = torch.bincount(idx[kept.bool()], minlength=E).to(I64)
        return {"scores": scores, "top_index": idx, "top_score": top_score, "order": order, "slot": slot,
                "kept": kept, "gate": top_score * kept.to(DT), "expert_load": load,
                "capacity": torch.tensor(C, dtype=I64)}
    c.forward = fwd

    def cross(t):
        slot = _capacity_vectorised(t["out.top_index"], t["out.top_score"], E, C)
        assert torch.equal(slot, t["out.slot"]), "capacity slot mismatch"
    c.crosscheck = cross
    with torch.no_grad():
        o = fwd(c.inputs, {})
    assert int(o["kept"].sum()) < N, "no overflow in capacity_routing"
    assert int(o["top_index"][4]) == int(o["top_index"][9])
    return c


# ---------------------------------------------------------------------------------------------------
# MoE FFN: linear router, top-1 (not renormalised), capacity 1.5 with dropping, GELU(exact) experts
def moe_ffn_fwd(E, cf):
    def fwd(i, p):
        x = i["x"]
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        N = xf.shape[0]
        probs = torch.softmax(F.linear(xf, p["router.weight"]), dim=-1)
        idx = topk_desc(probs, 1).squeeze(-1)
        score = probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        C = capacity(N, E, cf)
        order, slot, kept = capacity_assign(idx, score, E, C)
        y = torch.zeros_like(xf)
        for e in range(E):
            sel = ((idx == e) & kept.bool()).nonzero().squeeze(-1)
            if sel.numel() == 0:
                continue
            h = F.gelu(F.linear(xf[sel], p[f"experts.{e}.fc1.weight"], p[f"experts.{e}.fc1.bias"]))
            o = F.linear(h, p[f"experts.{e}.fc2.weight"], p[f"experts.{e}.fc2.bias"])
            y = y.index_add(0, sel, score[sel].unsqueeze(-1) * o)
        return {"y": y.reshape(B, T, D), "probs": probs.reshape(B, T, E), "top_index": idx.reshape(B, T),
                "slot": slot.reshape(B, T), "kept": kept.reshape(B, T)}
    return fwd


@register("moe_ffn", 2010)
def moe_ffn(seed):
    B, T, D, H, E, cf = 2, 7, 6, 10, 4, 1.5
    C = capacity(B * T, E, cf)
    c = Case("moe_ffn", seed, num_experts=E, dim=D, hidden=H, top_k=1, renormalize=False, capacity_factor=cf,
             capacity=C, activation="gelu_exact", router="linear, no bias, no noise", residual="not included")
    Wr = randn(E, D)
    x = randn(B, T, D)
    u0 = Wr[0] / Wr[0].norm()
    x.view(-1, D)[:10] += 1.2 * u0            # tokens lean towards expert 0: 9 of 14 pick it (capacity 6)
    c.input("x", x, grad=True)
    c.param("router.weight", Wr)
    for e in range(E):
        c.param(f"experts.{e}.fc1.weight", randn(H, D, scale=D ** -0.5))
        c.param(f"experts.{e}.fc1.bias", randn(H, scale=0.1))
        c.param(f"experts.{e}.fc2.weight", randn(D, H, scale=H ** -0.5))
        c.param(f"experts.{e}.fc2.bias", randn(D, scale=0.1))
    c.forward = moe_ffn_fwd(E, cf)
    c.loss("y")

    def cross(t):  # token-by-token
        x = t["in.x"].reshape(-1, D)
        y = torch.zeros_like(x)
        kept = t["out.kept"].reshape(-1)
        idx = t["out.top_index"].reshape(-1)
        for n in range(x.shape[0]):
            lg = t["param.router.weight"] @ x[n]
            pr = torch.softmax(lg, 0)
            e = int(pr.argmax())
            assert e == int(idx[n])
            if kept[n]:
                h = F.gelu(t[f"param.experts.{e}.fc1.weight"] @ x[n] + t[f"param.experts.{e}.fc1.bias"])
                y[n] = pr[e] * (t[f"param.experts.{e}.fc2.weight"] @ h + t[f"param.experts.{e}.fc2.bias"])
        _close(y.reshape(B, T, D), t["out.y"], what="moe_ffn")
    c.crosscheck = cross
    with torch.no_grad():
        o = c.forward(c.inputs, c.params)
    n_kept = int(o["kept"].sum())
    assert n_kept < B * T, "moe_ffn: expected dropped tokens"
    assert o["top_index"].unique().numel() == E, "moe_ffn: expected every expert in use"
    c.meta["num_dropped"] = B * T - n_kept
    return c


# ---------------------------------------------------------------------------------------------------
# GMoE-configured MoE FFN (Tutel's cosine top-k gate + batch-prioritised capacity + aux losses), with a
# fixed noise tensor so that the "training" forward is deterministic:
#   logits = normalize(proj(x)) @ normalize_columns(codebook) * exp(min(log_scale, ln 100))
#   noisy  = logits + noise * gate_noise / E;  probs = softmax(noisy);  picks = top-k of probs
#   gates  = probs at the picks, divided by their sum when renormalised (before any pick is dropped)
#   C      = k * int(cf * ceil(N / E)); every round j = 0..k-1 visits the tokens by descending top
#            probability (ties -> lower token) and gives pick j the next slot of its expert, counting
#            all earlier picks (dropped ones too); slot >= C -> dropped
#   y_n    = sum over kept picks j of gates[n, j] * fc2(gelu(fc1(x_n)))_{expert e_nj}
#   l_aux  = (cv^2(sum_n softmax(logits)) + cv^2(sum_n Phi((softmax(logits) - thr_n) / sigma))) / 2,
#            thr_n = the k-th largest noisy logit, sigma = gate_noise / E, cv^2 = var_unbiased / (mean^2 + 1e-10)
def capacity_assign_topk(idx, priority, num_experts, cap):
    """idx [N, k] picks (best first), priority [N]. Returns order [N], slot [N, k], kept [N, k]."""
    order = torch.sort(-priority.detach(), stable=True).indices
    N, k = idx.shape
    slot = torch.empty_like(idx)
    counts = [0] * num_experts
    for j in range(k):
        for tkn in order.tolist():
            e = int(idx[tkn, j])
            slot[tkn, j] = counts[e]
            counts[e] += 1
    kept = (slot < cap).to(I64)
    return order, slot, kept


def _capacity_topk_vectorised(idx, priority, num_experts):
    """Tutel's formulation: sorted cumulative sums per round plus the previous rounds' per-expert totals."""
    order = torch.sort(-priority, stable=True).indices
    inv = torch.empty_like(order)
    inv[order] = torch.arange(order.numel())
    base = torch.zeros(num_experts, dtype=I64)
    slots = []
    for j in range(idx.shape[1]):
        mask = F.one_hot(idx[:, j], num_experts)                      # [N, E]
        loc = (mask[order].cumsum(0) - 1)[inv] + base                 # location in token order
        slots.append((loc * mask).sum(1))
        base = base + mask.sum(0)
    return torch.stack(slots, 1)


def moe_ffn_gmoe_fwd(E, k, renormalize, cf, gate_noise):
    def fwd(i, p):
        x = i["x"]
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        N = xf.shape[0]
        h = normalize(F.linear(xf, p["router.proj.weight"], p["router.proj.bias"]), dim=-1)
        cb = normalize(p["router.codebook"], dim=0)
        logits = (h @ cb) * torch.exp(torch.clamp(p["router.log_scale"], max=LN100))
        sigma = gate_noise / E
        noisy = logits + i["noise"] * sigma
        probs = torch.softmax(noisy, dim=-1)
        idx = topk_desc(probs, k)                                      # [N, k]
        top = probs.gather(-1, idx)
        gates = top / top.sum(-1, keepdim=True) if renormalize else top
        C = capacity(N, E, cf, k)
        order, slot, kept = capacity_assign_topk(idx, top[:, 0], E, C)
        y = torch.zeros_like(xf)
        for j in range(k):
            for e in range(E):
                sel = ((idx[:, j] == e) & kept[:, j].bool()).nonzero().squeeze(-1)
                if sel.numel() == 0:
                    continue
                hh = F.gelu(F.linear(xf[sel], p[f"experts.{e}.fc1.weight"], p[f"experts.{e}.fc1.bias"]))
                o = F.linear(hh, p[f"experts.{e}.fc2.weight"], p[f"experts.{e}.fc2.bias"])
                y = y.index_add(0, sel, gates[sel, j:j + 1] * o)
        scores = torch.softmax(logits, dim=-1)                         # clean
        imp = scores.sum(0)
        l_imp = imp.var(unbiased=True) / (imp.mean() ** 2 + 1e-10)
        thr = noisy.gather(-1, idx[:, k - 1:k])                        # k-th largest noisy logit
        load = normal_cdf(scores - thr, sigma).sum(0)
        l_load = load.var(unbiased=True) / (load.mean() ** 2 + 1e-10)
        l_aux = (l_imp + l_load) / 2.0
        return {"y": y.reshape(B, T, D), "logits": logits, "probs": probs, "top_index": idx, "gates": gates,
                "slot": slot, "kept": kept, "l_imp": l_imp, "l_load": l_load, "l_aux": l_aux}
    return fwd


def _moe_ffn_gmoe_case(name, seed, E, k, renormalize, cf, training=True):
    B, T, D, H, Pd, gate_noise = 2, 9, 12, 16, 8, 1.0
    N = B * T
    C = capacity(N, E, cf, k)
    c = Case(name, seed, num_experts=E, dim=D, hidden=H, proj_dim=Pd, top_k=k, renormalize=renormalize,
             capacity_factor=cf, capacity=C, gate_noise=gate_noise, noise_std="gate_noise/num_experts",
             training=training, activation="gelu_exact", router="cosine (Tutel CosineTopKGate)",
             clamp_max="ln(100)", normalize_eps=1e-12, residual="not included",
             capacity_formula="k*int(cf*ceil(N/E))",
             priority="descending top probability, ties lower token; same order every round; rounds j=0..k-1",
             aux="(l_imp + l_load) / 2, threshold = k-th largest noisy logit")
    x = randn(B, T, D)
    c.input("x", x, grad=True)
    noise = randn(N, E)  # drawn either way, so that the other tensors are the training case's
    c.input("noise", noise if training else torch.zeros(N, E, dtype=DT))  # evaluation: no noise at all
    c.param("router.proj.weight", randn(Pd, D, scale=D ** -0.5))
    c.param("router.proj.bias", randn(Pd, scale=0.1))
    c.param("router.codebook", randn(Pd, E))
    c.param("router.log_scale", torch.tensor(math.log(2.0) + 0.3, dtype=DT))
    for e in range(E):
        c.param(f"experts.{e}.fc1.weight", randn(H, D, scale=D ** -0.5))
        c.param(f"experts.{e}.fc1.bias", randn(H, scale=0.1))
        c.param(f"experts.{e}.fc2.weight", randn(D, H, scale=H ** -0.5))
        c.param(f"experts.{e}.fc2.bias", randn(D, scale=0.1))
    c.forward = moe_ffn_gmoe_fwd(E, k, renormalize, cf, gate_noise)
    c.loss("y")
    c.loss("l_aux", unit=True)

    def cross(t):  # token by token, slots by Tutel's vectorised rule
        xf = t["in.x"].reshape(-1, D)
        idx, kept = t["out.top_index"], t["out.kept"]
        probs = t["out.probs"]
        slot = _capacity_topk_vectorised(idx, probs.gather(1, idx[:, :1]).squeeze(1), E)
        assert torch.equal(slot, t["out.slot"]), "moe_ffn_gmoe: slot mismatch (vectorised)"
        assert torch.equal(kept, (slot < C).to(I64))
        y = torch.zeros_like(xf)
        for n in range(N):
            pk = probs[n, idx[n]]
            g = pk / pk.sum() if renormalize else pk
            for j in range(k):
                if kept[n, j]:
                    e = int(idx[n, j])
                    hh = F.gelu(t[f"param.experts.{e}.fc1.weight"] @ xf[n] + t[f"param.experts.{e}.fc1.bias"])
                    y[n] += g[j] * (t[f"param.experts.{e}.fc2.weight"] @ hh + t[f"param.experts.{e}.fc2.bias"])
        _close(y.reshape(B, T, D), t["out.y"], what=name)
        z, nz = t["out.logits"], t["in.noise"]
        noisy = z + nz / E
        s = torch.softmax(z, -1)
        thr = torch.tensor([sorted(r.tolist(), reverse=True)[k - 1] for r in noisy], dtype=DT)
        pr = torch.distributions.Normal(torch.tensor(0.0, dtype=DT), torch.tensor(1.0 / E, dtype=DT)).cdf(
            s - thr[:, None])
        cv2 = lambda v: ((v - v.mean()) ** 2).sum() / (E - 1) / (v.mean() ** 2 + 1e-10)  # noqa: E731
        _close((cv2(s.sum(0)) + cv2(pr.sum(0))) / 2, t["out.l_aux"], what=name + " l_aux")
    c.crosscheck = cross
    with torch.no_grad():
        o = c.forward(c.inputs, c.params)
    kept = o["kept"]
    assert int(kept[:, 0].sum()) < N, f"{name}: expected dropped first picks"
    assert int(kept.sum(1).eq(0).sum()) > 0, f"{name}: expected a token with every pick dropped"
    if k > 1:
        assert int(kept[:, 1].sum()) > 0, f"{name}: expected kept second picks"
        assert int((kept[:, 0].bool() & ~kept[:, 1].bool()).sum()) > 0, f"{name}: expected a partly dropped token"
    assert o["top_index"][:, 0].unique().numel() >= min(E, 3), f"{name}: routing too concentrated"
    c.meta["num_dropped"] = int((1 - kept).sum())
    return c


@register("moe_ffn_gmoe_top1", 2012)
def moe_ffn_gmoe_top1(seed):
    """GMoE's code: 6 experts, top-1, gate not renormalised; capacity factor 1.0 (C = 3) so tokens drop."""
    return _moe_ffn_gmoe_case("moe_ffn_gmoe_top1", seed, E=6, k=1, renormalize=False, cf=1.0)


@register("moe_ffn_gmoe_top1_eval", 2014)
def moe_ffn_gmoe_top1_eval(seed):
    """The top-1 layer in evaluation: no noise (zero here, absent on the C++ side); the load loss keeps
    its CDF scale gate_noise / E and the clean logits as the threshold's source."""
    return _moe_ffn_gmoe_case("moe_ffn_gmoe_top1_eval", seed, E=6, k=1, renormalize=False, cf=1.0, training=False)


@register("moe_ffn_gmoe_top2", 2013)
def moe_ffn_gmoe_top2(seed):
    """GMoE's paper: top-2 with renormalised gates (Tutel); 4 experts, capacity factor 0.5 (C = 2 * int(0.5 * 5)
    = 4) so that first picks overflow, and so do the second picks of the experts that overflowed."""
    return _moe_ffn_gmoe_case("moe_ffn_gmoe_top2", seed, E=4, k=2, renormalize=True, cf=0.5)


# ---------------------------------------------------------------------------------------------------
@register("lora", 2011)
def lora(seed):
    IN, OUT, r, alpha = 12, 10, 4, 8.0
    s = alpha / r
    c = Case("lora", seed, in_features=IN, out_features=OUT, r=r, lora_alpha=alpha, scaling=s, lora_dropout=0.0)
    c.input("x", randn(2, 3, IN), grad=True)
    c.param("weight", randn(OUT, IN, scale=IN ** -0.5), grad=False)
    c.param("bias", randn(OUT, scale=0.1), grad=False)
    bound = 1.0 / math.sqrt(IN)        # kaiming_uniform_(a=sqrt(5)) bound for fan_in = IN
    c.param("lora_A.weight", torch.rand(r, IN, dtype=DT) * 2 * bound - bound)
    c.param("lora_B.weight", randn(OUT, r, scale=0.3))

    def fwd(i, p):
        x = i["x"]
        y = F.linear(x, p["weight"], p["bias"]) + s * F.linear(F.linear(x, p["lora_A.weight"]), p["lora_B.weight"])
        with torch.no_grad():
            merged = p["weight"] + s * (p["lora_B.weight"] @ p["lora_A.weight"])
        return {"y": y, "merged_weight": merged.detach()}
    c.forward = fwd
    c.loss("y")

    def cross(t):
        _close(t["in.x"] @ t["out.merged_weight"].T + t["param.bias"], t["out.y"], what="lora merged")
    c.crosscheck = cross
    return c
