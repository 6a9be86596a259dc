"""PyTorch twin of bench/bench_cpu.cpp: the same CPU workloads (f32), median wall ms.
usage: python3 bench/torch_cpu.py [threads [prefix]]  (torch.set_num_threads; default torch's;
with a prefix, only the rows whose names start with it run)."""
import json, statistics, sys, time
import torch

if len(sys.argv) > 1:
    torch.set_num_threads(int(sys.argv[1]))
torch.manual_seed(0)
only = sys.argv[2] if len(sys.argv) > 2 else ""


def wall_ms(warmup, reps, f):
    for _ in range(warmup):
        f()
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


class Rows(dict):
    """r[name] = (warmup, reps, f) times f if the name starts with `only`."""

    def __setitem__(self, name, spec):
        if name.startswith(only):
            super().__setitem__(name, wall_ms(*spec))


r = Rows()
for m, k, n in [(128, 784, 512), (128, 512, 256), (128, 256, 10)]:
    a, b = torch.randn(m, k), torch.randn(k, n)
    r[f"gemm_{m}x{k}x{n}"] = (5, 50, lambda: torch.matmul(a, b))
x = torch.randn(1 << 24)
r["sum_16M"] = (3, 20, lambda: x.sum())
x = torch.randn(4096, 1024)
r["softmax_4096x1024"] = (3, 20, lambda: torch.softmax(x, -1))
x = torch.randn(1 << 22)
r["exp_4M"] = (3, 20, lambda: torch.exp(x))
r["randn_1M"] = (3, 20, lambda: torch.randn(1 << 20))
for c, hw in [(32, 28), (64, 14)]:
    xp = torch.randn(128, c, hw, hw, requires_grad=True)
    gp = torch.randn(128, c, hw // 2, hw // 2)
    r[f"max_pool2d_fwd_bwd_128x{c}x{hw}x{hw}"] = (
        3, 20, lambda: torch.autograd.grad(torch.nn.functional.max_pool2d(xp, 2), xp, gp))
nn = torch.nn
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2),
                      nn.Linear(512, 256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))


def step():
    loss = nn.functional.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    opt.step()


r["mlp_step"] = (5, 40, step)
x = torch.randn(128, 32, 14, 14, requires_grad=True)
w, b = torch.randn(64, 32, 3, 3, requires_grad=True), torch.randn(64, requires_grad=True)


def conv_fwd():
    with torch.no_grad():
        nn.functional.conv2d(x, w, b, padding=1)


def conv_fwd_bwd():
    x.grad = w.grad = b.grad = None
    nn.functional.conv2d(x, w, b, padding=1).sum().backward()


r["conv2d_b128_32to64_14x14_fwd"] = (3, 20, conv_fwd)
r["conv2d_b128_32to64_14x14_fwd_bwd"] = (3, 20, conv_fwd_bwd)
cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                    nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 128),
                    nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
cnn_opt = torch.optim.AdamW(cnn.parameters(), lr=1e-3, weight_decay=0.05)
x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))


def cnn_step():
    loss = nn.functional.cross_entropy(cnn(x), y, label_smoothing=0.1)
    cnn_opt.zero_grad()
    loss.backward()
    cnn_opt.step()


r["cnn_step"] = (3, 15, cnn_step)
print("threads", torch.get_num_threads())
for k in sorted(r):
    print(k, f"{r[k]:.4f}")
print(json.dumps({k + "_ms": v for k, v in sorted(r.items())}))
