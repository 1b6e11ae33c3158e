"""Shared machinery for the parity fixtures: the Case description, evaluation (forward, seeded upstream
gradients, backward), metadata formatting, and the registry that generate_all.py walks.

A Case is built by a registered builder function. Building re-seeds torch's global RNG with the
builder's constant seed, so any single fixture is reproducible on its own (`--only NAME`).
"""
from __future__ import annotations

import json
import math
from collections import OrderedDict
from typing import Callable

import torch

DT = torch.float64
I64 = torch.int64

# name -> (seed, builder); filled by @register
REGISTRY: "OrderedDict[str, tuple[int, Callable[[int], 'Case']]]" = OrderedDict()


def register(name: str, seed: int):
    def deco(fn):
        if name in REGISTRY:
            raise KeyError(f"duplicate fixture {name}")
        REGISTRY[name] = (seed, fn)
        return fn
    return deco


def build(name: str) -> "Case":
    seed, fn = REGISTRY[name]
    torch.manual_seed(seed)
    case = fn(seed)
    assert case.name == name, (case.name, name)
    return case


def fmt(v) -> str:
    """Metadata value -> string: floats via repr (1e-06), ints via str, bools true/false, lists as JSON."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return v
    if v is None:
        return "none"
    if isinstance(v, (list, tuple)):
        return json.dumps([x if isinstance(x, (int, float, str, bool)) else fmt(x) for x in v])
    raise TypeError(f"cannot format metadata value {v!r}")


def randn(*shape, scale=1.0):
    return torch.randn(*shape, dtype=DT) * scale


def rand(*shape, lo=0.0, hi=1.0):
    return torch.rand(*shape, dtype=DT) * (hi - lo) + lo


class Case:
    """One fixture file.

    inputs / params: name -> tensor. grad_inputs / grad_params: names whose gradients are exported.
    forward(inp, prm) -> dict of outputs (float outputs may carry autograd history; integer outputs are
    plain I64 tensors). loss_outputs: outputs that receive an `upstream.<name>` tensor; the scalar loss is
    sum over those of sum(out * upstream). unit_upstream: outputs whose upstream is exactly 1.0 (scalar
    losses); the others draw N(0, 1) from a generator seeded with seed + 7919.
    crosscheck(tensors) (optional): an independent re-implementation used by --selfcheck.
    """

    def __init__(self, name: str, seed: int, **meta):
        self.name = name
        self.seed = seed
        self.meta = OrderedDict(component=name, seed=seed)
        self.meta.update(meta)
        self.inputs: "OrderedDict[str, torch.Tensor]" = OrderedDict()
        self.params: "OrderedDict[str, torch.Tensor]" = OrderedDict()
        self.grad_inputs: list[str] = []
        self.grad_params: list[str] = []
        self.loss_outputs: list[str] = []
        self.unit_upstream: set[str] = set()
        self.forward: Callable | None = None
        self.crosscheck: Callable | None = None
        self.gradcheck_ok = True  # set False where finite differences are meaningless
        # optional factory(base_inputs, base_params) -> forward used by gradcheck instead of `forward`
        # (e.g. MoE-LayerNorm: p / p.detach() is replaced by p / p0 with p0 frozen at the base point, a
        # function whose true derivative equals the straight-through gradient autograd reports)
        self.gradcheck_forward: Callable | None = None

    def input(self, name, t, grad=False):
        self.inputs[name] = t.detach().clone()
        if grad:
            self.grad_inputs.append(name)

    def param(self, name, t, grad=True):
        self.params[name] = t.detach().clone()
        if grad:
            self.grad_params.append(name)

    def loss(self, *names, unit=False):
        for n in names:
            self.loss_outputs.append(n)
            if unit:
                self.unit_upstream.add(n)

    @property
    def differentiable(self) -> bool:
        return bool(self.loss_outputs) and bool(self.grad_inputs or self.grad_params)


def _leaves(case: Case, inputs, params):
    inp = OrderedDict()
    for k, v in inputs.items():
        v = v.detach().clone()
        inp[k] = v.requires_grad_(True) if k in case.grad_inputs else v
    prm = OrderedDict()
    for k, v in params.items():
        v = v.detach().clone()
        prm[k] = v.requires_grad_(True) if k in case.grad_params else v
    return inp, prm


def make_upstream(case: Case, outs) -> "OrderedDict[str, torch.Tensor]":
    g = torch.Generator().manual_seed(case.seed + 7919)
    ups = OrderedDict()
    for n in case.loss_outputs:
        o = outs[n]
        if n in case.unit_upstream:
            ups[n] = torch.ones_like(o, dtype=DT)
        else:
            ups[n] = torch.randn(o.shape, generator=g, dtype=DT)
    return ups


def evaluate(case: Case, inputs=None, params=None, upstream=None):
    """Run forward + backward. Returns the ordered tensor dict written to the file and the metadata."""
    inputs = case.inputs if inputs is None else inputs
    params = case.params if params is None else params
    inp, prm = _leaves(case, inputs, params)
    with torch.enable_grad():
        outs = case.forward(inp, prm)
    ups = make_upstream(case, outs) if upstream is None else upstream
    grads = OrderedDict()
    if case.differentiable:
        loss = sum((outs[n].to(DT) * ups[n]).sum() for n in case.loss_outputs)
        wrt = [("in." + k, inp[k]) for k in case.grad_inputs] + [("param." + k, prm[k]) for k in case.grad_params]
        gs = torch.autograd.grad(loss, [t for _, t in wrt], allow_unused=True)
        for (n, t), g in zip(wrt, gs):
            grads["grad." + n] = torch.zeros_like(t) if g is None else g
    tensors = OrderedDict()
    for k, v in inputs.items():
        tensors["in." + k] = v.detach()
    for k, v in params.items():
        tensors["param." + k] = v.detach()
    for k, v in outs.items():
        tensors["out." + k] = v.detach()
    for k, v in ups.items():
        tensors["upstream." + k] = v.detach()
    for k, v in grads.items():
        tensors[k] = v.detach()
    for k, v in tensors.items():
        if v.dtype not in (DT, I64):
            raise TypeError(f"{case.name}: {k} has dtype {v.dtype}; fixtures hold only float64 / int64")
        tensors[k] = v.contiguous()
    meta = OrderedDict((k, fmt(v)) for k, v in case.meta.items())
    meta["loss_outputs"] = ",".join(case.loss_outputs)
    meta["unit_upstream"] = ",".join(n for n in case.loss_outputs if n in case.unit_upstream)
    meta["grad_inputs"] = ",".join(case.grad_inputs)
    meta["grad_params"] = ",".join(case.grad_params)
    meta["frozen_params"] = ",".join(k for k in case.params if k not in case.grad_params)
    meta["dtype"] = "float64"
    return tensors, meta


def gradcheck_case(case: Case, inputs=None, params=None) -> bool:
    """torch.autograd.gradcheck of every loss output w.r.t. every exported-gradient tensor."""
    inputs = case.inputs if inputs is None else inputs
    params = case.params if params is None else params
    names = [("in", k) for k in case.grad_inputs] + [("param", k) for k in case.grad_params]
    leaves = [(inputs[k] if kind == "in" else params[k]).detach().clone().requires_grad_(True) for kind, k in names]

    forward = case.forward if case.gradcheck_forward is None else case.gradcheck_forward(inputs, params)

    def fn(*ts):
        inp = OrderedDict((k, v) for k, v in inputs.items())
        prm = OrderedDict((k, v) for k, v in params.items())
        for (kind, k), t in zip(names, ts):
            (inp if kind == "in" else prm)[k] = t
        outs = forward(inp, prm)
        return tuple(outs[n] for n in case.loss_outputs)

    numel = sum(t.numel() for t in leaves)
    return torch.autograd.gradcheck(fn, tuple(leaves), eps=1e-6, atol=1e-6, rtol=1e-5,
                                    fast_mode=numel > 1500)


def normalize(x, dim=-1, eps=1e-12):
    """x / max(||x||_2, eps) along dim (torch.nn.functional.normalize semantics)."""
    return x / x.norm(dim=dim, keepdim=True).clamp_min(eps)


LN100 = math.log(100.0)
