"""TTMM components: sparse cross-attention merging weights, multi-LoRA merge, bisecting k-means."""
from __future__ import annotations

import torch

from common import DT, I64, Case, normalize, randn, register
from layers import _close
from moe import topk_desc

STATUS_OK, STATUS_BASE_MODEL, STATUS_NAN_FALLBACK = 0, 1, 2


# ---------------------------------------------------------------------------------------------------
# sparse softmax (reference-code form)
def sparse_merge_weights(query, centroids, beta, tau, max_experts):
    """query [Q, d] or [d], centroids [K, d]; both already L2-normalised (not re-normalised here)."""
    one = query.dim() == 1
    q = query.reshape(1, -1) if one else query
    Q, K = q.shape[0], centroids.shape[0]
    sim = q @ centroids.T                                        # [Q, K]
    kernel = torch.exp(-((1.0 - sim) / beta ** 2))              # = softmax(sim / beta^2) after normalising
    w = kernel / kernel.sum(-1, keepdim=True)
    weights = torch.zeros(Q, K, dtype=DT)
    selected = torch.zeros(Q, K, dtype=I64)
    status = torch.zeros(Q, dtype=I64)
    for r in range(Q):
        mask = w[r] > tau                                        # NaN > tau is False
        if int(mask.sum()) == 0:
            if bool(torch.isnan(w[r]).any()):
                s = torch.where(torch.isnan(sim[r]), torch.full_like(sim[r], float("-inf")), sim[r])
                j = int(topk_desc(s, 1)[0])                      # nearest non-NaN centroid, ties -> lower
                weights[r, j] = 1.0
                selected[r, j] = 1
                status[r] = STATUS_NAN_FALLBACK
            else:
                status[r] = STATUS_BASE_MODEL                    # all-zero weights: base model
            continue
        if int(mask.sum()) > max_experts:
            top = topk_desc(kernel[r], max_experts)
            mask = torch.zeros(K, dtype=torch.bool)
            mask[top] = True
        sel = w[r][mask]
        weights[r, mask] = sel / sel.sum()
        selected[r, mask] = 1
    out = {"similarity": sim, "kernel_weights": w, "weights": weights, "selected": selected,
           "num_selected": selected.sum(-1), "status": status}
    if one:
        out = {k: v.squeeze(0) for k, v in out.items()}
    return out


def paper_sparse_softmax(w, tau):
    """Paper form: ReLU(softmax - tau) / sum ReLU(softmax - tau) (no cap); all-zero rows stay zero."""
    r = torch.relu(w - tau)
    den = r.sum(-1, keepdim=True)
    return torch.where(den > 0, r / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(r))


def _sparse_case(name, seed, q, cents, beta, tau, max_experts, paper=True, **extra):
    c = Case(name, seed, beta=beta, temperature=beta ** 2, tau=tau, max_experts=max_experts,
             num_experts=cents.shape[0], dim=cents.shape[1],
             kernel="exp(-(1 - q.phi)/beta^2) normalised over experts",
             status_codes="0=ok,1=none above tau (base model, all-zero weights),2=NaN weights (nearest expert)",
             **extra)
    c.input("query", q)
    c.input("centroids", cents)

    def fwd(i, p):
        o = sparse_merge_weights(i["query"], i["centroids"], beta, tau, max_experts)
        if paper:
            o["weights_paper"] = paper_sparse_softmax(o["kernel_weights"], tau)
        return o
    c.forward = fwd

    def cross(t):  # softmax(q.phi / beta^2) form, then threshold + cap + renormalise
        qq = t["in.query"].reshape(-1, cents.shape[1])
        z = qq @ t["in.centroids"].T / beta ** 2
        w = torch.softmax(z, -1)
        W = t["out.weights"].reshape(qq.shape[0], -1)
        st = t["out.status"].reshape(-1)
        for r in range(qq.shape[0]):
            if st[r] != STATUS_OK:
                continue
            keep = [j for j in range(w.shape[1]) if w[r, j] > tau]
            keep = sorted(keep, key=lambda j: -w[r, j].item())[:max_experts]
            ref = torch.zeros(w.shape[1], dtype=DT)
            ref[keep] = w[r, keep] / w[r, keep].sum()
            _close(ref, W[r], tol=1e-12, what="sparse weights")
    c.crosscheck = cross
    return c


def _near(u, n, noise):
    return normalize(u.unsqueeze(0) + noise * randn(n, u.shape[0]), dim=-1)


@register("sparse_softmax", 3001)
def sparse_softmax(seed):
    d = 8
    a, b = normalize(randn(d), dim=0), normalize(randn(d), dim=0)
    cents = torch.cat([_near(a, 4, 0.05), _near(b, 3, 0.12), normalize(randn(3, d), dim=-1)])
    q = torch.stack([normalize(a + 0.02 * randn(d), dim=0), normalize(b + 0.05 * randn(d), dim=0),
                     normalize(a + b, dim=0), cents[9].clone()])        # last: exactly a lone centroid
    c = _sparse_case("sparse_softmax", seed, q, cents, 0.2, 0.01, 3)
    with torch.no_grad():
        o = sparse_merge_weights(q, cents, 0.2, 0.01, 3)
    above = (o["kernel_weights"] > 0.01).sum(-1)
    assert int(above.max()) > 3 and int(above.min()) < 3, above
    c.meta["num_above_tau"] = [int(v) for v in above]
    return c


@register("sparse_softmax_max50", 3002)
def sparse_softmax_max50(seed):
    d = 8
    u = normalize(randn(d), dim=0)
    cents = torch.cat([_near(u, 56, 0.02), normalize(randn(8, d), dim=-1)])
    q = torch.stack([u, normalize(randn(d), dim=0)])
    c = _sparse_case("sparse_softmax_max50", seed, q, cents, 0.2, 0.01, 50)
    with torch.no_grad():
        o = sparse_merge_weights(q, cents, 0.2, 0.01, 50)
    above = (o["kernel_weights"] > 0.01).sum(-1)
    assert int(above[0]) > 50, above
    c.meta["num_above_tau"] = [int(v) for v in above]
    return c


@register("sparse_softmax_none_kept", 3003)
def sparse_softmax_none_kept(seed):
    d = 8
    u = normalize(randn(d), dim=0)
    cents = _near(u, 120, 0.02)                           # 120 near-identical centroids: every weight < 0.01
    q = torch.stack([u, -u])
    c = _sparse_case("sparse_softmax_none_kept", seed, q, cents, 0.2, 0.01, 50, paper=False)
    with torch.no_grad():
        o = sparse_merge_weights(q, cents, 0.2, 0.01, 50)
    assert (o["status"] == STATUS_BASE_MODEL).all() and float(o["kernel_weights"].max()) < 0.01
    return c


@register("sparse_softmax_nan", 3004)
def sparse_softmax_nan(seed):
    d, K = 8, 6
    cents = normalize(randn(K, d), dim=-1)
    cents[2, 5] = float("nan")                           # centroid 2 is corrupt -> its similarity is NaN
    q = normalize(cents[4] + 0.3 * randn(d), dim=0)      # 1-D query [d]
    torch_argmax = int(torch.argmax(q @ cents.T))        # what the reference code's torch.argmax returns
    c = _sparse_case("sparse_softmax_nan", seed, q, cents, 0.2, 0.01, 50, paper=False,
                     nan_fallback="argmax over the non-NaN similarities, ties -> lower index",
                     reference_code_torch_argmax=torch_argmax)
    with torch.no_grad():
        o = sparse_merge_weights(q, cents, 0.2, 0.01, 50)
    assert int(o["status"]) == STATUS_NAN_FALLBACK and int(o["num_selected"]) == 1
    return c


# ---------------------------------------------------------------------------------------------------
@register("lora_merge", 3005)
def lora_merge(seed):
    K, IN, OUT, r = 3, 12, 10, 4
    alphas = [8.0, 16.0, 4.0]
    scal = [a / r for a in alphas]
    c = Case("lora_merge", seed, num_adapters=K, in_features=IN, out_features=OUT, r=r, lora_alpha=alphas,
             scalings=scal)
    c.input("x", randn(5, IN))
    c.input("weights", torch.tensor([0.5, 0.3, 0.2], dtype=DT))
    c.input("scalings", torch.tensor(scal, dtype=DT))
    c.param("weight", randn(OUT, IN, scale=IN ** -0.5), grad=False)
    for k in range(K):
        c.param(f"experts.{k}.lora_A.weight", randn(r, IN, scale=IN ** -0.5), grad=False)
        c.param(f"experts.{k}.lora_B.weight", randn(OUT, r, scale=0.3), grad=False)

    def fwd(i, p):
        w, s = i["weights"], i["scalings"]
        As = torch.stack([p[f"experts.{k}.lora_A.weight"] for k in range(K)])      # [K, r, IN]
        Bs = torch.stack([p[f"experts.{k}.lora_B.weight"] for k in range(K)])      # [K, OUT, r]
        As_w = As * (w * s)[:, None, None]
        delta = torch.einsum("kor,kri->oi", Bs, As_w)
        A_cat = As_w.reshape(K * r, IN)                                            # [K r, IN]
        B_cat = Bs.permute(1, 0, 2).reshape(OUT, K * r)                            # [OUT, K r]
        x, W = i["x"], p["weight"]
        return {"delta_w": delta, "A_cat": A_cat, "B_cat": B_cat,
                "y_unmerged": x @ W.T + (x @ A_cat.T) @ B_cat.T, "y_merged": x @ (W + delta).T}
    c.forward = fwd

    def cross(t):
        d = sum(t["in.weights"][k] * t["in.scalings"][k] * t[f"param.experts.{k}.lora_B.weight"]
                @ t[f"param.experts.{k}.lora_A.weight"] for k in range(K))
        _close(d, t["out.delta_w"], what="delta_w")
        _close(t["out.y_unmerged"], t["out.y_merged"], tol=1e-12, what="merged vs unmerged")
    c.crosscheck = cross
    return c


# ---------------------------------------------------------------------------------------------------
# bisecting k-means (deterministic definition; see README)
def _sqdist_to(P, v):
    return ((P - v) ** 2).sum(-1)


def _first_argmax(values):
    """Index of the first maximum (ties -> lowest index), values a 1-D float tensor without NaN."""
    best, bi = None, -1
    for j, v in enumerate(values.tolist()):
        if best is None or v > best:
            best, bi = v, j
    return bi


def _sq_diameter(P):
    n = P.shape[0]
    best = 0.0
    for i in range(n):
        if i + 1 < n:
            best = max(best, float(_sqdist_to(P[i + 1:], P[i]).max()))
    return best


def bisecting_kmeans(X, K, split="diameter", max_iter=100, eps=1e-12):
    Xn = normalize(X, dim=-1, eps=eps)
    N = Xn.shape[0]
    assign = torch.zeros(N, dtype=I64)
    split_order, iters = [], []
    nc = 1
    while nc < K:
        best_c, best_key = -1, None
        for cid in range(nc):
            m = (assign == cid).nonzero().squeeze(1)
            if m.numel() < 2:
                continue
            diam2 = _sq_diameter(Xn[m])
            if diam2 == 0.0:
                continue                                      # identical members: cannot be split
            key = diam2 if split == "diameter" else float(m.numel())
            if best_key is None or key > best_key:
                best_c, best_key = cid, key
        if best_c < 0:
            break
        m = (assign == best_c).nonzero().squeeze(1)               # ascending global indices
        P = Xn[m]
        mean = P.mean(0)
        a = _first_argmax(_sqdist_to(P, mean))
        b = _first_argmax(_sqdist_to(P, P[a]))
        cent = torch.stack([P[a], P[b]])
        prev = None
        it = 0
        for it in range(1, max_iter + 1):
            sims = P @ cent.T                                     # [n, 2]
            lab = (sims[:, 1] > sims[:, 0]).to(I64)               # ties -> centre 0
            if prev is not None and torch.equal(lab, prev):
                break
            prev = lab
            for j in range(2):
                if bool((lab == j).any()):
                    cent[j] = normalize(P[lab == j].mean(0), dim=0, eps=eps)
        assign[m[lab == 1]] = nc
        split_order.append(best_c)
        iters.append(it)
        nc += 1
    cents = torch.stack([normalize(Xn[assign == cid].mean(0), dim=0, eps=eps) for cid in range(nc)])
    sizes = torch.bincount(assign, minlength=nc)
    return {"assignments": assign, "centroids": cents, "sizes": sizes.to(I64),
            "split_order": torch.tensor(split_order, dtype=I64), "lloyd_iterations": torch.tensor(iters, dtype=I64)}


def _kmeans_case(name, seed, split):
    N, d, K, G = 60, 8, 5, 5
    c = Case(name, seed, num_clusters=K, split=split, max_iter=100, num_points=N, dim=d, normalize_eps=1e-12,
             similarity="cosine (dot product of normalised vectors)", distance="squared Euclidean")
    basis = torch.linalg.qr(randn(d, d))[0][:, :G].T              # G orthonormal directions
    labels = torch.arange(N) % G
    X = basis[labels] + 0.15 * randn(N, d)
    X = X * (0.5 + 2.5 * torch.rand(N, 1, dtype=DT))               # random norms: normalisation matters
    perm = torch.randperm(N)
    X, labels = X[perm], labels[perm]
    c.input("embeddings", X)
    c.forward = lambda i, p: bisecting_kmeans(i["embeddings"], K, split)

    def cross(t):
        again = bisecting_kmeans(t["in.embeddings"], K, split)
        assert torch.equal(again["assignments"], t["out.assignments"])
        a = t["out.assignments"]
        Xn = normalize(t["in.embeddings"], dim=-1)
        for cid in range(K):
            _close(normalize(Xn[a == cid].mean(0), dim=0), t["out.centroids"][cid], what="centroid")
    c.crosscheck = cross
    with torch.no_grad():
        o = bisecting_kmeans(X, K, split)
    pure = all(labels[o["assignments"] == cid].unique().numel() == 1 for cid in range(K))
    c.meta["recovers_generating_groups"] = pure
    return c


@register("bisecting_kmeans", 3006)
def bisecting_kmeans_diameter(seed):
    return _kmeans_case("bisecting_kmeans", seed, "diameter")


@register("bisecting_kmeans_largest", 3007)
def bisecting_kmeans_largest(seed):
    return _kmeans_case("bisecting_kmeans_largest", seed, "largest")
