#!/usr/bin/env python3
"""Writes tests/ops/resample_mode.safetensors: PyTorch's values and gradients for interpolate
(nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area on 3-D, 4-D and 5-D inputs;
size, scale_factor, align_corners, recompute_scale_factor), mode
and the in-place scatter family (tests/ops/test_resample_mode.cpp replays it). Run on a
developer's machine with torch from PyPI (never a dependency of the build or of ctest);
deterministic (seeded; new cases go at the end so that the earlier ones keep their random
inputs). Layout as make_math_fixtures.py's: NAME/x0.. inputs (f64), NAME/out,
and for differentiable cases NAME/up and NAME/g0...
    python3 tests/ops/make_resample_mode_fixtures.py
"""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "resample_mode.safetensors")
torch.manual_seed(1717)
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
                T[f"{name}/g{i}"] = (torch.zeros_like(l) if g is None else g).detach().clone().contiguous()


def randn(*s):
    return torch.randn(*s, dtype=D)


# --- interpolate ------------------------------------------------------------------------------
x4 = randn(2, 3, 4, 5)
x3 = randn(2, 3, 6)
I = F.interpolate
case("nearest_size_up", lambda a: I(a, size=(7, 9)), [x4])
case("nearest_size_down", lambda a: I(a, size=(3, 2)), [x4])
case("nearest_scale_2_2", lambda a: I(a, scale_factor=2.2), [x4])        # 8.8 -> 8 = 2 in: PyTorch's doubling rule
case("nearest_scale_1_7", lambda a: I(a, scale_factor=(1.7, 0.6)), [x4])  # source scale 1 / scale_factor
case("nearest_recompute", lambda a: I(a, scale_factor=(1.7, 0.6), recompute_scale_factor=True), [x4])
case("nearest_3d_scale", lambda a: I(a, scale_factor=1.5), [x3])
case("nearest_3d_size", lambda a: I(a, size=4), [x3])
case("nearest_noncontig", lambda a: I(a.permute(0, 1, 3, 2), size=(6, 5)), [x4])
case("nearest_nan", lambda a: I(a, size=(3, 3)), [torch.tensor([[[[1.0, float("nan")], [float("inf"), -0.0]]]], dtype=D)], grad=False)
for ac in (False, True):
    s = "ac" if ac else "noac"
    case(f"bilinear_size_up_{s}", lambda a, ac=ac: I(a, size=(7, 9), mode="bilinear", align_corners=ac), [x4])
    case(f"bilinear_size_down_{s}", lambda a, ac=ac: I(a, size=(3, 2), mode="bilinear", align_corners=ac), [x4])
    case(f"bilinear_scale_{s}", lambda a, ac=ac: I(a, scale_factor=(1.7, 0.6), mode="bilinear", align_corners=ac), [x4])
    case(f"bilinear_to_1_{s}", lambda a, ac=ac: I(a, size=(1, 3), mode="bilinear", align_corners=ac), [x4])
    case(f"linear_size_{s}", lambda a, ac=ac: I(a, size=11, mode="linear", align_corners=ac), [x3])
    case(f"linear_scale_{s}", lambda a, ac=ac: I(a, scale_factor=2.5, mode="linear", align_corners=ac), [x3])
case("bilinear_recompute", lambda a: I(a, scale_factor=(1.7, 0.6), mode="bilinear", recompute_scale_factor=True), [x4])
case("bilinear_noncontig", lambda a: I(a.transpose(2, 3), size=(8, 6), mode="bilinear"), [x4])
case("linear_noncontig", lambda a: I(a[:, :, ::2], size=7, mode="linear", align_corners=True), [x3])

# --- mode ---------------------------------------------------------------------------------------
ties = torch.randint(0, 4, (5, 9)).to(D)
case("mode_d1", lambda a: torch.mode(a, 1)[0], [ties])
case("mode_d1_idx", lambda a: torch.mode(a, 1)[1], [ties], grad=False)
case("mode_d0_keep", lambda a: torch.mode(a, 0, keepdim=True)[0], [ties])
case("mode_d0_idx", lambda a: torch.mode(a, 0, keepdim=True)[1], [ties], grad=False)
case("mode_noncontig_idx", lambda a: torch.mode(a.t(), 1)[1], [ties], grad=False)
case("mode_zero_sign", lambda a: torch.mode(a, 0)[0], [torch.tensor([0.0, -0.0, 1.0, 2.0, 1.0, -0.0], dtype=D)], grad=False)
case("mode_zero_sign_idx", lambda a: torch.mode(a, 0)[1], [torch.tensor([0.0, -0.0, 1.0, 2.0, 1.0, -0.0], dtype=D)], grad=False)
case("mode_int_idx", lambda a: torch.mode(a, 0)[1], [torch.tensor([4, 4, 1, 1, 4, -3, -3, -3], dtype=torch.int64)], grad=False)
case("mode_int", lambda a: torch.mode(a, 0)[0], [torch.tensor([4, 4, 1, 1, 4, -3, -3, -3], dtype=torch.int64)], grad=False)

# --- the in-place scatter family (through a clone, so gradients reach x) ---------------------------
xs = randn(4, 5)
idx = torch.tensor([[0, 1, 2, 3, 0], [3, 2, 1, 0, 1]])
src = randn(2, 5)
case("scatter_", lambda a, s: a.clone().scatter_(0, idx, s), [xs, src])
case("scatter_value_", lambda a: a.clone().scatter_(1, idx, 2.5), [xs])
case("scatter_add_", lambda a, s: a.clone().scatter_add_(0, idx, s), [xs, src])
case("scatter_reduce_amax_", lambda a, s: a.clone().scatter_reduce_(0, idx, s, "amax", include_self=False), [xs, src])
case("scatter_reduce_mean_", lambda a, s: a.clone().scatter_reduce_(0, idx, s, "mean"), [xs, src])
vi = torch.tensor([2, 0, 2])
case("index_add_", lambda a, s: a.clone().index_add_(1, vi, s, alpha=-1.5), [xs, randn(4, 3)])
case("index_copy_", lambda a, s: a.clone().index_copy_(0, torch.tensor([3, 1]), s), [xs, randn(2, 5)])
case("index_fill_", lambda a: a.clone().index_fill_(1, torch.tensor([4, 0]), -7.0), [xs])
mask = torch.rand(4, 5) > 0.5
case("masked_fill_", lambda a: a.clone().masked_fill_(mask, 3.0), [xs])
case("masked_scatter_", lambda a, s: a.clone().masked_scatter_(mask, s), [xs, randn(20)])
case("index_put_acc_", lambda a, v: a.clone().index_put_((torch.tensor([0, 2, 0]),), v, accumulate=True), [xs, randn(3, 5)])
# --- interpolate, mode="area" (adaptive average pooling) ------------------------------------
case("area_down", lambda a: I(a, size=(3, 2), mode="area"), [randn(2, 3, 7, 5)])
case("area_up", lambda a: I(a, size=(6, 8), mode="area"), [randn(1, 2, 4, 5)])
case("area_scale", lambda a: I(a, scale_factor=(0.5, 0.7), mode="area"), [randn(2, 2, 8, 9)])
case("area_3d", lambda a: I(a, size=4, mode="area"), [randn(2, 3, 10)])
# --- interpolate: nearest-exact (3-D, 4-D, 5-D), bicubic (4-D), trilinear and nearest (5-D), area (5-D)
x4 = randn(2, 3, 4, 5)
x5 = randn(2, 2, 3, 4, 5)
case("nearest_exact_size_up", lambda a: I(a, size=(7, 9), mode="nearest-exact"), [x4])
case("nearest_exact_size_down", lambda a: I(a, size=(3, 2), mode="nearest-exact"), [x4])
case("nearest_exact_scale_2_2", lambda a: I(a, scale_factor=2.2, mode="nearest-exact"), [x4])
case("nearest_exact_scale_1_7", lambda a: I(a, scale_factor=(1.7, 0.6), mode="nearest-exact"), [x4])
case("nearest_exact_recompute", lambda a: I(a, scale_factor=(1.7, 0.6), mode="nearest-exact", recompute_scale_factor=True), [x4])
case("nearest_exact_to_1", lambda a: I(a, size=(1, 1), mode="nearest-exact"), [x4])
case("nearest_exact_3d", lambda a: I(a, scale_factor=1.5, mode="nearest-exact"), [randn(2, 3, 6)])
case("nearest_exact_3d_down", lambda a: I(a, size=4, mode="nearest-exact"), [randn(2, 3, 11)])
case("nearest_exact_5d_size", lambda a: I(a, size=(5, 3, 8), mode="nearest-exact"), [x5])
case("nearest_exact_5d_scale", lambda a: I(a, scale_factor=(1.5, 0.7, 2.3), mode="nearest-exact"), [x5])
case("nearest_5d_size", lambda a: I(a, size=(5, 3, 8)), [x5])
case("nearest_5d_scale", lambda a: I(a, scale_factor=(1.5, 0.7, 2.3)), [x5])
case("nearest_5d_double", lambda a: I(a, scale_factor=2), [x5])
for ac in (False, True):
    s = "ac" if ac else "noac"
    case(f"bicubic_size_up_{s}", lambda a, ac=ac: I(a, size=(7, 9), mode="bicubic", align_corners=ac), [x4])
    case(f"bicubic_size_down_{s}", lambda a, ac=ac: I(a, size=(3, 2), mode="bicubic", align_corners=ac), [x4])
    case(f"bicubic_far_down_{s}", lambda a, ac=ac: I(a, size=(3, 4), mode="bicubic", align_corners=ac), [randn(1, 2, 10, 13)])
    case(f"bicubic_scale_{s}", lambda a, ac=ac: I(a, scale_factor=(1.7, 0.6), mode="bicubic", align_corners=ac), [x4])
    case(f"bicubic_scale_2_5_{s}", lambda a, ac=ac: I(a, scale_factor=2.5, mode="bicubic", align_corners=ac), [x4])
    case(f"bicubic_to_1_{s}", lambda a, ac=ac: I(a, size=(1, 3), mode="bicubic", align_corners=ac), [x4])
    case(f"bicubic_from_1_{s}", lambda a, ac=ac: I(a, size=(3, 4), mode="bicubic", align_corners=ac), [randn(1, 2, 1, 1)])
    case(f"bicubic_row_{s}", lambda a, ac=ac: I(a, size=(4, 3), mode="bicubic", align_corners=ac), [randn(1, 2, 1, 5)])
    case(f"trilinear_size_up_{s}", lambda a, ac=ac: I(a, size=(5, 6, 9), mode="trilinear", align_corners=ac), [x5])
    case(f"trilinear_size_down_{s}", lambda a, ac=ac: I(a, size=(2, 3, 2), mode="trilinear", align_corners=ac), [x5])
    case(f"trilinear_scale_{s}", lambda a, ac=ac: I(a, scale_factor=(1.5, 0.7, 2.3), mode="trilinear", align_corners=ac), [x5])
    case(f"trilinear_to_1_{s}", lambda a, ac=ac: I(a, size=(1, 1, 2), mode="trilinear", align_corners=ac), [x5])
    case(f"trilinear_from_1_{s}", lambda a, ac=ac: I(a, size=(3, 2, 4), mode="trilinear", align_corners=ac), [randn(1, 2, 1, 1, 3)])
case("bicubic_same_size", lambda a: I(a, size=(4, 5), mode="bicubic"), [x4])
case("bicubic_recompute", lambda a: I(a, scale_factor=(1.7, 0.6), mode="bicubic", recompute_scale_factor=True), [x4])
case("bicubic_noncontig", lambda a: I(a.transpose(2, 3), size=(8, 6), mode="bicubic"), [x4])
# PyTorch's bicubic backward copies when the sizes match even if the scale is not 1 (not the
# adjoint of its forward): values only.
case("bicubic_same_size_scale", lambda a: I(a, scale_factor=1.1, mode="bicubic"), [x4], grad=False)
# Linear modes are the identity when out == in, whatever the scale (compute_source_index_and_lambda).
case("bilinear_same_size_scale", lambda a: I(a, scale_factor=(1.1, 0.9), mode="bilinear"), [randn(1, 2, 4, 10)])
case("trilinear_recompute", lambda a: I(a, scale_factor=(1.5, 0.7, 2.3), mode="trilinear", recompute_scale_factor=True), [x5])
case("trilinear_noncontig", lambda a: I(a.permute(0, 1, 4, 3, 2), size=(4, 3, 5), mode="trilinear"), [x5])
case("area_5d_down", lambda a: I(a, size=(2, 3, 2), mode="area"), [randn(2, 2, 5, 7, 6)])
case("area_5d_up", lambda a: I(a, size=(4, 5, 3), mode="area"), [randn(1, 2, 3, 2, 3)])
T["masks/m"] = mask.contiguous()
T["masks/idx"] = idx.contiguous()

save_file(T, OUT)
print(f"wrote {len(T)} tensors to {OUT}")
