#!/usr/bin/env python3
"""Writes tests/ops/math_more.safetensors: PyTorch's values and gradients for brrr's newer
elementwise, logic, loss, scan and sort ops (tests/ops/test_math_more.cpp, test_losses_more.cpp
test_scan_sort.cpp and test_shape_linalg.cpp replay it; the other cases are in
make_loss_fixtures.py, make_scan_sort_fixtures.py and make_shape_linalg_fixtures.py, run
from here). Run on a developer's machine with torch from PyPI (never a dependency of the build or
of ctest); deterministic (seeded). For each case NAME it stores NAME/x0, NAME/x1, ... (the
inputs, f64), NAME/out (the output), and, for differentiable cases, NAME/up (the upstream
gradient) and NAME/g0, NAME/g1, ... (d<out, up>/d x_i; zeros where PyTorch gives none).
    python3 tests/ops/make_math_fixtures.py
"""
import math
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "math_more.safetensors")
torch.manual_seed(17)
D = torch.float64
T = {}


def case(name, fn, inputs, grad=True):
    xs = [x.clone().to(D if x.is_floating_point() else x.dtype) for x in inputs]
    for i, x in enumerate(xs):
        T[f"{name}/x{i}"] = x.contiguous()
    leaves = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in xs]
    out = fn(*leaves)
    T[f"{name}/out"] = out.detach().contiguous()
    if grad:
        up = torch.randn_like(out, dtype=D)
        T[f"{name}/up"] = up
        diff = [l for l in leaves if l.requires_grad]
        gs = torch.autograd.grad(out, diff, up, allow_unused=True)
        gi = iter(gs)
        for i, l in enumerate(leaves):
            if l.requires_grad:
                g = next(gi)
                T[f"{name}/g{i}"] = (torch.zeros_like(l) if g is None else g).detach().contiguous()


def randn(*s):
    return torch.randn(*s, dtype=D)


def pos(*s):
    return torch.rand(*s, dtype=D) * 3 + 0.2


def unit(*s):  # in (-0.9, 0.9)
    return torch.tanh(randn(*s)) * 0.9


# --- elementwise math: values and gradients -------------------------------------------------
for name, fn, gen in [
    ("tan", torch.tan, unit), ("asin", torch.asin, unit), ("acos", torch.acos, unit),
    ("atan", torch.atan, randn), ("sinh", torch.sinh, randn), ("cosh", torch.cosh, randn),
    ("expm1", torch.expm1, randn), ("log2", torch.log2, pos), ("log10", torch.log10, pos),
    ("exp2", torch.exp2, randn), ("erfc", torch.erfc, randn), ("erfinv", torch.erfinv, unit),
    ("lgamma", torch.lgamma, pos), ("digamma", torch.digamma, pos),
    ("reciprocal", torch.reciprocal, pos), ("square", torch.square, randn),
    ("frac", torch.frac, lambda *s: randn(*s) * 3), ("floor", torch.floor, lambda *s: randn(*s) * 3),
    ("ceil", torch.ceil, lambda *s: randn(*s) * 3), ("trunc", torch.trunc, lambda *s: randn(*s) * 3),
    ("round", torch.round, lambda *s: randn(*s) * 3),
]:
    case(name, fn, [gen(3, 4)])
case("polygamma1", lambda x: torch.polygamma(1, x), [pos(5)], grad=False)
case("digamma_neg", torch.digamma, [torch.tensor([-0.5, -1.25, -3.75, 0.001, 25.0, 1.0, 0.5], dtype=D)])
case("round_dec2", lambda x: torch.round(x, decimals=2), [randn(6) * 10])
case("round_decm1", lambda x: torch.round(x, decimals=-1), [randn(6) * 100])
case("round_half_even", torch.round, [torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994], dtype=D)],
     grad=False)

special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5, -2.0, 1e308], dtype=D)
case("nan_to_num", torch.nan_to_num, [special])
case("nan_to_num_custom", lambda x: torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0), [special])
case("isnan", torch.isnan, [special], grad=False)
case("isinf", torch.isinf, [special], grad=False)
case("isfinite", torch.isfinite, [special], grad=False)
case("erfinv_edges", torch.erfinv, [torch.tensor([-1.0, 1.0, 1.5, -2.0, 0.0, 0.999999, -0.9999999999], dtype=D)],
     grad=False)
case("lgamma_edges", torch.lgamma, [torch.tensor([0.0, -1.0, -0.5, -2.5, 100.0, 1e-300, 0.5], dtype=D)], grad=False)
case("digamma_edges", torch.digamma, [torch.tensor([0.0, -0.0, -1.0, -2.0, 1e-8, 1e8], dtype=D)], grad=False)

# --- binary ---------------------------------------------------------------------------------
case("atan2", torch.atan2, [randn(3, 4), randn(4)])
case("hypot", torch.hypot, [randn(3, 4), randn(3, 1)])
case("logaddexp", torch.logaddexp, [randn(3, 4), randn(3, 4)])
case("xlogy", torch.xlogy, [torch.tensor([0.0, 1.0, -2.0, 0.0, 3.0, 0.5], dtype=D), pos(6)])
case("copysign", torch.copysign, [randn(3, 4), randn(3, 4)])
case("lerp", torch.lerp, [randn(3, 4), randn(3, 4), torch.rand(4, dtype=D)])
case("lerp_scalar", lambda a, b: torch.lerp(a, b, 0.3), [randn(3, 4), randn(1, 4)])
inf, nan = float("inf"), float("nan")
case("logaddexp_edges", torch.logaddexp,
     [torch.tensor([inf, -inf, -inf, 1.0, nan, 1000.0], dtype=D), torch.tensor([inf, -inf, 2.0, inf, 0.0, 999.0], dtype=D)],
     grad=False)
case("xlogy_edges", torch.xlogy, [torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0], dtype=D),
                                  torch.tensor([0.0, nan, inf, 0.0, -1.0], dtype=D)], grad=False)
case("copysign_zero", torch.copysign, [torch.tensor([1.0, 2.0, -3.0, 0.0], dtype=D),
                                       torch.tensor([-0.0, 0.0, inf, -1.0], dtype=D)], grad=False)
case("atan2_zeros", torch.atan2, [torch.tensor([0.0, -0.0, 0.0, -0.0, 1.0], dtype=D),
                                  torch.tensor([0.0, 0.0, -0.0, -0.0, 0.0], dtype=D)], grad=False)
# clamp with tensor bounds (x values away from the bounds so the kinks are not sampled).
cx = torch.tensor([[-2.0, -0.5, 0.25, 0.75, 2.0], [0.1, -3.0, 3.0, 0.6, -0.2]], dtype=D)
case("clamp_tensor", lambda x, lo, hi: torch.clamp(x, lo, hi),
     [cx, torch.tensor([-1.0, -0.6, 0.0, 0.7, 0.5], dtype=D), torch.tensor([[1.0], [0.5]], dtype=D)])
case("clamp_min_tensor", lambda x, lo: torch.clamp_min(x, lo), [cx, torch.tensor([-1.0, -0.6, 0.0, 0.7, 0.5], dtype=D)])
case("clamp_max_tensor", lambda x, hi: torch.clamp_max(x, hi), [cx, torch.tensor([[1.0], [0.5]], dtype=D)])
case("clamp_crossed", lambda x, lo, hi: torch.clamp(x, lo, hi),
     [cx, torch.full((5,), 1.0, dtype=D), torch.full((5,), -1.0, dtype=D)])
tie = torch.tensor([-1.0, 1.0, 0.0, float("nan"), -2.0, 3.0], dtype=D)
case("clamp_ties", lambda x, lo, hi: torch.clamp(x, lo, hi), [tie, torch.full((6,), -1.0, dtype=D), torch.ones(6, dtype=D)])
case("clamp_min_ties", lambda x, lo: torch.clamp_min(x, lo), [tie, torch.full((6,), -1.0, dtype=D)])
case("clamp_max_ties", lambda x, hi: torch.clamp_max(x, hi), [tie, torch.ones(6, dtype=D)])

# --- integers and logic ---------------------------------------------------------------------
ia = torch.tensor([5, -7, 0, 123456789, -1, 2**40], dtype=torch.int64)
ib = torch.tensor([3, 2, -1, 70, 63, 65], dtype=torch.int64)
for name, fn in [("bitwise_and", torch.bitwise_and), ("bitwise_or", torch.bitwise_or),
                 ("bitwise_xor", torch.bitwise_xor), ("bitwise_left_shift", torch.bitwise_left_shift),
                 ("bitwise_right_shift", torch.bitwise_right_shift)]:
    case(name, fn, [ia, ib], grad=False)
    case(name + "_i32", fn, [ia.to(torch.int32).clamp(-1000, 1000), ib.to(torch.int32)], grad=False)
case("bitwise_not", torch.bitwise_not, [ia], grad=False)
la = torch.tensor([0.0, 1.0, -2.0, 0.0, nan, 0.5], dtype=D)
lb = torch.tensor([0.0, 0.0, 3.0, 4.0, 0.0, nan], dtype=D)
for name, fn in [("logical_and", torch.logical_and), ("logical_or", torch.logical_or),
                 ("logical_xor", torch.logical_xor)]:
    case(name, fn, [la, lb], grad=False)
case("logical_not", torch.logical_not, [la], grad=False)
aa = torch.tensor([[1.0, 0.0, 2.0], [3.0, 4.0, 5.0], [0.0, 0.0, 0.0], [nan, 1.0, -1.0]], dtype=D)
case("all", torch.all, [aa], grad=False)
case("any", torch.any, [aa], grad=False)
case("all_dim1", lambda x: torch.all(x, 1), [aa], grad=False)
case("any_dim1", lambda x: torch.any(x, 1), [aa], grad=False)
case("all_dim0_keep", lambda x: torch.all(x, 0, keepdim=True), [aa], grad=False)
case("any_dim0_keep", lambda x: torch.any(x, 0, keepdim=True), [aa], grad=False)

if __name__ == "__main__":
    import sys
    for extra in ["make_loss_fixtures.py", "make_scan_sort_fixtures.py", "make_shape_linalg_fixtures.py"]:
        exec(open(os.path.join(HERE, extra)).read())
    save_file({k: v.contiguous().clone() for k, v in T.items()}, OUT)
    print(f"wrote {len(T)} tensors to {OUT}")
