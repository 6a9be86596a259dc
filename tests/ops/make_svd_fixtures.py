#!/usr/bin/env python3
"""Writes tests/ops/svd.safetensors: PyTorch's values and gradients for linalg.svdvals,
gauge-invariant functions of linalg.svd (U Vh, U diag(S) Vh, the squares of U's and Vh's
entries) and matrix_norm 2 / -2 / "nuc", replayed by tests/ops/test_svd.cpp. Deterministic:
    python3 tests/ops/make_svd_fixtures.py
"""
import os

import torch
from safetensors.torch import save_file

from fixture_cases import Cases

HERE = os.path.dirname(os.path.abspath(__file__))
c = Cases(2112)
randn = c.randn
LA = torch.linalg


def squares(a, full=False):
    # Sign-invariant per singular vector: a weighted sum of U*U and Vh*Vh plus a weighted S.
    U, S, Vh = LA.svd(a, full_matrices=full)
    k = S.shape[-1]
    U, Vh = U[..., :k], Vh[..., :k, :]
    wu = torch.arange(U.numel(), dtype=a.dtype).reshape(U.shape) / U.numel()
    wv = torch.arange(Vh.numel(), dtype=a.dtype).reshape(Vh.shape) / Vh.numel()
    ws = torch.arange(1, S.numel() + 1, dtype=a.dtype).reshape(S.shape)
    return (U * U * wu).sum() + (Vh * Vh * wv).sum() + (S * ws).sum()


for shape in [(4, 3), (3, 5), (4, 4), (2, 3, 4), (1, 1)]:
    tag = "x".join(map(str, shape))
    c.case(f"svdvals_{tag}", LA.svdvals, [randn(*shape)])
    c.case(f"svd_uvh_{tag}", lambda a: (lambda r: r.U @ r.Vh)(LA.svd(a, full_matrices=False)), [randn(*shape)])
    c.case(f"svd_usvh_{tag}", lambda a: (lambda r: r.U @ torch.diag_embed(r.S) @ r.Vh)(LA.svd(a, full_matrices=False)),
           [randn(*shape)])
    c.case(f"svd_squares_{tag}", squares, [randn(*shape)])
c.case("svd_squares_full_5x3", lambda a: squares(a, True), [randn(5, 3)])
c.case("svd_squares_full_2x3x4", lambda a: squares(a, True), [randn(2, 3, 4)])

m = randn(2, 3, 4)
c.case("matrix_norm_2", lambda a: LA.matrix_norm(a, 2), [m])
c.case("matrix_norm_m2", lambda a: LA.matrix_norm(a, -2), [m])
c.case("matrix_norm_nuc", lambda a: LA.matrix_norm(a, "nuc"), [m])
c.case("matrix_norm_2_dims", lambda a: LA.matrix_norm(a, 2, dim=(2, 0)), [randn(3, 2, 4)])
c.case("matrix_norm_nuc_keepdim", lambda a: LA.matrix_norm(a, "nuc", dim=(0, 2), keepdim=True), [randn(3, 2, 4)])
c.case("matrix_norm_m2_wide", lambda a: LA.matrix_norm(a, -2), [randn(3, 6)])

save_file(c.tensors, os.path.join(HERE, "svd.safetensors"))
print(f"wrote {len(c.tensors)} tensors to svd.safetensors")
