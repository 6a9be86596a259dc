# Shape and linear algebra cases of math_more.safetensors; run by make_math_fixtures.py
# (which defines case(), randn(), pos(), D and T): python3 tests/ops/make_math_fixtures.py
m = randn(3, 4)
case("repeat", lambda a: a.repeat(2, 1, 3), [m])
case("tile", lambda a: torch.tile(a, (2,)), [m])
case("repeat_interleave", lambda a: torch.repeat_interleave(a, 2, dim=1), [m])
case("repeat_interleave_flat", lambda a: torch.repeat_interleave(a, 3), [m])
case("repeat_interleave_tensor", lambda a: torch.repeat_interleave(a, torch.tensor([1, 0, 3]), dim=0), [m])
case("roll", lambda a: torch.roll(a, (1, -2), (0, 1)), [m])
case("roll_flat", lambda a: torch.roll(a, 5), [m])
sq = randn(4, 5)
case("diagonal", lambda a: torch.diagonal(a), [sq])
case("diagonal_off1", lambda a: torch.diagonal(a, 1), [sq])
case("diagonal_offm2", lambda a: torch.diagonal(a, -2), [sq])
case("diagonal_3d", lambda a: torch.diagonal(a, 0, 0, 2), [randn(3, 2, 3)])
case("diag_embed", lambda a: torch.diag(a, 1), [randn(3)])
case("diag_embed_neg", lambda a: torch.diag(a, -2), [randn(3)])
case("trace", torch.trace, [sq])
case("movedim", lambda a: torch.movedim(a, 0, 2).contiguous(), [randn(2, 3, 4)])
case("unflatten", lambda a: torch.unflatten(a, 1, (2, -1)), [randn(3, 4)])
case("take_along_dim", lambda a: torch.take_along_dim(a, torch.tensor([[0], [2], [1]]), 1), [m])
case("mm", torch.mm, [randn(3, 4), randn(4, 2)])
case("bmm", torch.bmm, [randn(2, 3, 4), randn(2, 4, 5)])
case("addmm", lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0), [randn(2), randn(3, 4), randn(4, 2)])
case("baddbmm", lambda i, a, b: torch.baddbmm(i, a, b, beta=-1.0, alpha=0.5), [randn(2, 3, 5), randn(2, 3, 4), randn(2, 4, 5)])
case("addcmul", lambda i, a, b: torch.addcmul(i, a, b, value=0.3), [randn(3, 4), randn(4), randn(3, 1)])
case("addcdiv", lambda i, a, b: torch.addcdiv(i, a, b, value=-2.0), [randn(3, 4), randn(3, 4), pos(3, 4)])
case("outer", torch.outer, [randn(3), randn(4)])
case("linear", lambda x, w, b: F.linear(x, w, b), [randn(5, 3), randn(4, 3), randn(4)])
case("tensordot2", lambda a, b: torch.tensordot(a, b, 2), [randn(2, 3, 4), randn(3, 4, 5)])
case("tensordot_dims", lambda a, b: torch.tensordot(a, b, ([0, 2], [2, 0])), [randn(2, 3, 4), randn(4, 5, 2)])
for name, eq, shapes in [("einsum_mm", "ij,jk->ik", [(3, 4), (4, 2)]), ("einsum_bmm", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
                         ("einsum_trace", "ii->", [(4, 4)]), ("einsum_diag", "ii->i", [(4, 4)]),
                         ("einsum_sum", "ijk->j", [(2, 3, 4)]), ("einsum_outer", "i,j->ij", [(3,), (4,)]),
                         ("einsum_implicit", "ij,jk", [(3, 4), (4, 2)]), ("einsum_transpose", "ij->ji", [(3, 4)]),
                         ("einsum_three", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
                         ("einsum_attn", "bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
                         ("einsum_bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
                         ("einsum_ell_bmm", "...ij,...jk", [(2, 1, 3, 4), (5, 4, 6)]),
                         ("einsum_ell_sum", "...ij->ij", [(2, 3, 4)]), ("einsum_ell_move", "i...->...i", [(2, 3, 4)]),
                         ("einsum_ell_diag", "...ii->...i", [(2, 3, 3)]),
                         ("einsum_ell_dot", "b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
                         ("einsum_ell_mid", "i...j,j->...i", [(2, 3, 4, 5), (5,)])]:
    case(name, lambda *xs, eq=eq: torch.einsum(eq, *xs), [randn(*s) for s in shapes])
case("prod_d1", lambda a: torch.prod(a, 1), [randn(3, 4)])
case("prod_zero", lambda a: torch.prod(a, 1), [torch.tensor([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [2.0, -1.0, 0.5]], dtype=D)])
case("prod_all", lambda a: torch.prod(a), [randn(2, 3)])
case("matrix_norm_fro", lambda a: torch.linalg.matrix_norm(a), [randn(2, 3, 4)])
case("matrix_norm_1", lambda a: torch.linalg.matrix_norm(a, 1), [randn(3, 4)])
case("matrix_norm_inf", lambda a: torch.linalg.matrix_norm(a, float("inf")), [randn(3, 4)])
case("cdist", lambda a, b: torch.cdist(a, b), [randn(2, 3, 4), randn(2, 5, 4)])
case("cdist_p1", lambda a, b: torch.cdist(a, b, p=1.0), [randn(3, 4), randn(5, 4)])
