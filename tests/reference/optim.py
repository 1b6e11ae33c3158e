"""Optimisers: torch.optim.SGD / Adam / AdamW for three steps on a given gradient sequence."""
from __future__ import annotations

import math

import torch

from common import Case, randn, register
from layers import _close

STEPS = 3


def _run_torch(opt_cls, kw, p0, grads):
    p = torch.nn.Parameter(p0.clone())
    opt = opt_cls([p], **kw)
    params = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        params.append(p.detach().clone())
    return params, opt.state[p]


def _case(name, seed, opt_cls, kw, state_keys, manual):
    c = Case(name, seed, optimizer=opt_cls.__name__, steps=STEPS, **kw)
    p0 = randn(3, 5)
    c.input("param0", p0)
    scales = [1.0, 0.3, 2.0]
    for s in range(STEPS):
        c.input(f"grad.{s}", randn(3, 5, scale=scales[s]))

    def fwd(i, p):
        params, state = _run_torch(opt_cls, kw, i["param0"], [i[f"grad.{s}"] for s in range(STEPS)])
        out = {f"param.{s + 1}": v for s, v in enumerate(params)}
        for k in state_keys:
            out[k] = state[k].detach().clone()
        return out
    c.forward = fwd

    def cross(t):
        ref = manual(t["in.param0"], [t[f"in.grad.{s}"] for s in range(STEPS)])
        for k, v in ref.items():
            _close(v, t["out." + k], tol=1e-15, what=f"{name} {k}")
    c.crosscheck = cross
    return c


# Hand-written update rules (what the C++ side must implement); checked against torch.optim.
def _sgd_manual(lr, momentum, wd):
    def run(p, grads):
        p = p.clone()
        buf = None
        out = {}
        for s, g in enumerate(grads):
            d = g + wd * p
            buf = d.clone() if buf is None else momentum * buf + d          # dampening 0
            p = p - lr * buf
            out[f"param.{s + 1}"] = p
        out["momentum_buffer"] = buf
        return out
    return run


def _adam_manual(lr, b1, b2, eps, wd, decoupled):
    def run(p, grads):
        p = p.clone()
        m = torch.zeros_like(p)
        v = torch.zeros_like(p)
        out = {}
        for s, g in enumerate(grads):
            t = s + 1
            if decoupled:
                p = p * (1 - lr * wd)
            else:
                g = g + wd * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            step_size = lr / (1 - b1 ** t)
            denom = v.sqrt() / math.sqrt(1 - b2 ** t) + eps
            p = p - step_size * (m / denom)
            out[f"param.{s + 1}"] = p
        out["exp_avg"], out["exp_avg_sq"] = m, v
        return out
    return run


@register("sgd", 4001)
def sgd(seed):
    kw = dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=1e-4, nesterov=False)
    return _case("sgd", seed, torch.optim.SGD, kw, ["momentum_buffer"], _sgd_manual(0.1, 0.9, 1e-4))


@register("adam", 4002)
def adam(seed):
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False)
    return _case("adam", seed, torch.optim.Adam, kw, ["exp_avg", "exp_avg_sq"],
                 _adam_manual(1e-3, 0.9, 0.999, 1e-8, 0.01, decoupled=False))


@register("adamw", 4003)
def adamw(seed):
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False)
    return _case("adamw", seed, torch.optim.AdamW, kw, ["exp_avg", "exp_avg_sq"],
                 _adam_manual(1e-3, 0.9, 0.999, 1e-8, 0.01, decoupled=True))
