"""The case() helper of the PyTorch fixture scripts in tests/ops (the layout that
tests/ops/fixture_replay.hpp replays): for case NAME, NAME/x0.. the inputs (f64), NAME/out
PyTorch's output and, for differentiable cases, NAME/up a random upstream gradient and
NAME/g0.. the input gradients. Import it from a script in this folder; torch from PyPI, never
a dependency of the build or of ctest."""
import torch

D = torch.float64


class Cases:
    def __init__(self, seed):
        torch.manual_seed(seed)
        self.tensors = {}

    def case(self, name, fn, inputs, grad=True):
        xs = [x.clone().to(D if x.is_floating_point() else x.dtype) for x in inputs]
        for i, x in enumerate(xs):
            self.tensors[f"{name}/x{i}"] = x.contiguous()
        leaves = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in xs]
        out = fn(*leaves)
        self.tensors[f"{name}/out"] = out.detach().contiguous()
        if not grad:
            return
        up = torch.randn_like(out, dtype=D)
        self.tensors[f"{name}/up"] = up
        diff = [l for l in leaves if l.requires_grad]
        gi = iter(torch.autograd.grad(out, diff, up, allow_unused=True))
        for i, l in enumerate(leaves):
            if l.requires_grad:
                g = next(gi)
                self.tensors[f"{name}/g{i}"] = (torch.zeros_like(l) if g is None else g).detach().contiguous()

    @staticmethod
    def randn(*s):
        return torch.randn(*s, dtype=D)
