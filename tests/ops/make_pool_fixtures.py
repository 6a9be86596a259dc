#!/usr/bin/env python3
"""Writes tests/ops/pool.safetensors: PyTorch's outputs, argmax indices and input gradients for
the pools (tests/ops/test_pool.cpp replays them on the CPU, contiguous and channels-last).
Run on a developer's machine with torch from PyPI (never a dependency of the build or of
ctest); deterministic (seeded). For each case NAME: NAME/x (the input, f64), NAME/out, NAME/idx
(i64, the max pools' indices), NAME/up (the upstream gradient) and NAME/gx (d<out, up>/dx). The
max_unpool2d cases add NAME/i (the indices input).
    python3 tests/ops/make_pool_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "pool.safetensors")
torch.manual_seed(18)
D = torch.float64
T = {}
nan, inf = float("nan"), float("inf")


def case(name, fn, x, extra=None):
    """fn(x) returns the output or (output, indices)."""
    T[f"{name}/x"] = x.clone().contiguous()
    if extra is not None:
        T[f"{name}/i"] = extra.clone().contiguous()
    leaf = x.clone().requires_grad_()
    r = fn(leaf)
    out, idx = (r if isinstance(r, tuple) else (r, None))
    T[f"{name}/out"] = out.detach().contiguous()
    if idx is not None:
        T[f"{name}/idx"] = idx.contiguous()
    up = torch.randn_like(out, dtype=D)
    T[f"{name}/up"] = up
    (g,) = torch.autograd.grad(out, leaf, up)
    T[f"{name}/gx"] = g.contiguous()


def randn(*s):
    return torch.randn(*s, dtype=D)


def mp(**kw):
    return lambda x: F.max_pool2d(x, return_indices=True, **kw)


# --- max_pool2d (with indices) ---------------------------------------------------------------
case("mp_k2", mp(kernel_size=2), randn(2, 3, 6, 7))
case("mp_k3_s2_p1", mp(kernel_size=3, stride=2, padding=1), randn(2, 3, 7, 6))
case("mp_dilation", mp(kernel_size=(2, 3), stride=(2, 1), padding=(1, 1), dilation=(3, 2)), randn(2, 2, 9, 10))
case("mp_ceil", mp(kernel_size=3, stride=2, padding=1, ceil_mode=True), randn(1, 2, 6, 6))
case("mp_ceil_k2", mp(kernel_size=2, stride=2, ceil_mode=True), randn(1, 2, 5, 7))
case("mp_overlap", mp(kernel_size=3, stride=1), randn(1, 2, 5, 5))
case("mp_rect", mp(kernel_size=(1, 3), stride=(2, 2), padding=(0, 1)), randn(2, 1, 5, 8))
case("mp_unbatched", mp(kernel_size=2), randn(3, 6, 6))
# ties (small integers) with overlapping padded windows: the first max wins
case("mp_ties", mp(kernel_size=3, stride=1, padding=1), torch.randint(0, 3, (1, 2, 6, 6)).to(D))
# NaN is the max (the window's last NaN); -inf everywhere picks the first cell
xn = randn(1, 2, 6, 6)
xn[0, 0, 0, 1] = nan
xn[0, 0, 1, 0] = nan
xn[0, 0, 3, 3] = nan
xn[0, 1, 2:4, 2:4] = -inf
case("mp_nan", mp(kernel_size=2, stride=2), xn)
case("mp_nan_overlap", mp(kernel_size=3, stride=1, padding=1), xn)

# --- adaptive_max_pool2d ---------------------------------------------------------------------
case("amp_3x2", lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True), randn(2, 3, 7, 5))
case("amp_uniform", lambda x: F.adaptive_max_pool2d(x, 4, return_indices=True), randn(2, 3, 8, 8))
case("amp_up", lambda x: F.adaptive_max_pool2d(x, (5, 7), return_indices=True), randn(2, 2, 3, 5))
case("amp_unbatched", lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True), randn(3, 5, 7))
case("amp_nan", lambda x: F.adaptive_max_pool2d(x, (3, 3), return_indices=True), xn)

# --- avg_pool2d: divisor_override, ceil_mode, count_include_pad ----------------------------------
case("ap_divisor", lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5), randn(2, 3, 7, 6))
case("ap_divisor_ceil", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=2), randn(1, 2, 6, 6))
case("ap_ceil_exclude", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     randn(1, 2, 6, 6))

# --- 1-D pools -------------------------------------------------------------------------------
case("mp1d", lambda x: F.max_pool1d(x, 3, 2, 1, dilation=2, ceil_mode=True, return_indices=True), randn(2, 3, 11))
case("mp1d_unbatched", lambda x: F.max_pool1d(x, 2, return_indices=True), randn(3, 9))
case("ap1d", lambda x: F.avg_pool1d(x, 4, 3, 2, ceil_mode=True, count_include_pad=False), randn(2, 3, 11))
case("ap1d_include", lambda x: F.avg_pool1d(x, 3, 2, 1), randn(2, 3, 10))
case("aap1d", lambda x: F.adaptive_avg_pool1d(x, 4), randn(2, 3, 10))
case("amp1d", lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), randn(2, 3, 10))

# --- max_unpool2d of a max_pool2d's indices ------------------------------------------------------
for name, shape, k, s, p, size in [("unpool_k2", (2, 3, 6, 6), 2, 2, 0, None),
                                   ("unpool_size", (1, 2, 7, 7), 2, 2, 0, [7, 7]),
                                   ("unpool_k3_s2_p1", (1, 2, 8, 8), 3, 2, 1, [8, 8]),
                                   ("unpool_overlap", (1, 2, 5, 5), 3, 1, 0, None)]:
    v, i = F.max_pool2d(randn(*shape), k, s, p, return_indices=True)
    case(name, lambda x, i=i, k=k, s=s, p=p, size=size: F.max_unpool2d(x, i, k, s, p, size), v, i)

save_file(T, OUT)
print(f"wrote {len(T)} tensors to {OUT}")
