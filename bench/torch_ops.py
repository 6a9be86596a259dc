"""The workloads of bench/bench_ops.cpp in PyTorch eager, with the same sizes and the same
timing method: warm-up, then CUDA events around each repeat (the host clock, in batches, for
host-side costs), median of the repeats (statistics.median, as bench/common.hpp). Every key
names its unit. Prints a table, then one JSON object on the last line.

usage: torch_ops.py [--data DIR]
  DIR holds the Fashion-MNIST IDX .gz files; default $FASHION_MNIST_DIR, else
  /usr/share/datasets/fashion-mnist. A missing directory skips that workload.

Optimizers are torch.optim.SGD and torch.optim.AdamW with default implementation flags: on
CUDA tensors that is the foreach (multi-tensor) implementation, not the fused one. The host
costs (enqueue, alloc/free pair) include the Python interpreter's cost of the call, as a
PyTorch user pays it."""
import argparse, json, math, os, statistics, sys, time
import torch
import torch.nn.functional as F


def time_ms(f, warmup, reps):
    for _ in range(warmup):
        f()
    ms = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); e.synchronize()
        ms.append(s.elapsed_time(e))
    return statistics.median(ms)


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def host_ns_per_call(warmup, batches, batch, f, after_batch=None):
    """Host ns per call of f: one sample per batch of calls, median of the batches."""
    for _ in range(warmup):
        f()
    if after_batch:
        after_batch()
    ns = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(batch):
            f()
        ns.append((time.perf_counter() - t0) / batch * 1e9)
        if after_batch:
            after_batch()
    return statistics.median(ns)


def host_costs(dev, r):
    sync = torch.cuda.synchronize
    a, b = torch.randn(1024, device=dev), torch.randn(1024, device=dev)
    r["enqueue_add_1024_us"] = host_ns_per_call(2000, 50, 200, lambda: a + b, sync) / 1e3
    ag = torch.randn(1024, device=dev, requires_grad=True)
    r["enqueue_add_1024_autograd_us"] = host_ns_per_call(2000, 50, 200, lambda: ag + b, sync) / 1e3
    n_1mib = (1 << 20) // 4
    r["alloc_free_1MiB_ns"] = host_ns_per_call(10000, 100, 1000, lambda: torch.empty(n_1mib, device=dev))


def bandwidth(dev, r):
    n = 1 << 28
    a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    r["add_256M_f32_GBps"] = gbps(3 * n * 4, time_ms(lambda: a + b, 3, 20))
    r["sum_256M_f32_GBps"] = gbps(n * 4, time_ms(lambda: a.sum(), 3, 20))
    del a, b
    rows, cols = 65536, 4096
    x = torch.randn(rows, cols, device=dev)
    r["softmax_65536x4096_f32_GBps"] = gbps(2 * rows * cols * 4, time_ms(lambda: torch.softmax(x, -1), 3, 20))
    del x
    w = torch.randn(1536, 384, device=dev)

    def twenty():
        for _ in range(20):
            w.t().contiguous()

    r["transpose_1536x384_f32_us"] = 1e3 / 20 * time_ms(twenty, 3, 20)
    n = 8192
    x = torch.randn(n, n, device=dev)
    r["transpose_8192x8192_f32_GBps"] = gbps(2 * n * n * 4, time_ms(lambda: x.t().contiguous(), 3, 20))


def attention(dev, r):
    # F.scaled_dot_product_attention picks its flash kernel for bf16 on the H200.
    q, k, v = (torch.randn(64, 6, 256, 64, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(64, 6, 256, 64, device=dev, dtype=torch.bfloat16)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)

    r["sdpa_64x6x256x64_bf16_causal_fwd_ms"] = time_ms(fwd, 3, 20)
    r["sdpa_64x6x256x64_bf16_causal_fwd_bwd_ms"] = time_ms(fwd_bwd, 3, 20)

    def dropout_fwd_bwd():  # the GPT's training step: attention dropout 0.2
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True).backward(g)

    r["sdpa_64x6x256x64_bf16_causal_dropout_fwd_bwd_ms"] = time_ms(dropout_fwd_bwd, 3, 20)

    # f32 (the GPT's TF32 step): PyTorch takes its memory-efficient kernel either way.
    qf, kf, vf = (torch.randn(64, 6, 256, 64, device=dev, requires_grad=True) for _ in range(3))
    gf = torch.randn(64, 6, 256, 64, device=dev)
    before = torch.backends.cuda.matmul.allow_tf32
    for tf32, key in ((False, "sdpa_64x6x256x64_f32_causal_dropout_fwd_bwd_ms"),
                      (True, "sdpa_64x6x256x64_f32_tf32_causal_dropout_fwd_bwd_ms")):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        r[key] = time_ms(lambda: F.scaled_dot_product_attention(qf, kf, vf, dropout_p=0.2, is_causal=True).backward(gf),
                         3, 20)
    torch.backends.cuda.matmul.allow_tf32 = before


def scans_sorts(dev, r):
    rows, cols = 65536, 4096
    x = torch.randn(rows, cols, device=dev)
    r["cumsum_65536x4096_f32_GBps"] = gbps(2 * rows * cols * 4, time_ms(lambda: torch.cumsum(x, -1), 3, 20))
    r["topk_65536x4096_k16_f32_ms"] = time_ms(lambda: torch.topk(x, 16, -1), 2, 10)
    del x
    n = 1 << 26
    v = torch.randn(n, device=dev)
    r["cumsum_64M_f32_GBps"] = gbps(2 * n * 4, time_ms(lambda: torch.cumsum(v, 0), 3, 20))
    r["topk_64M_k1024_f32_ms"] = time_ms(lambda: torch.topk(v, 1024), 2, 10)


def gemm(dev, r):
    n = 8192
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    tflop = 2 * n ** 3 / 1e12

    def tflops(x, y):
        return tflop / (time_ms(lambda: x @ y, 2, 10) * 1e-3)

    torch.backends.cuda.matmul.allow_tf32 = False
    r["gemm_8192_fp32_TFLOPs"] = tflops(a, b)
    torch.backends.cuda.matmul.allow_tf32 = True
    r["gemm_8192_tf32_TFLOPs"] = tflops(a, b)
    torch.backends.cuda.matmul.allow_tf32 = False
    r["gemm_8192_bf16_TFLOPs"] = tflops(a.bfloat16(), b.bfloat16())


def gpt_gemms(dev, r):
    """The GEMMs of one GPT layer (bench_ops' gpt_gemms): x w^T, dy w, dy^T x per linear."""
    m = 64 * 256
    before = torch.backends.cuda.matmul.allow_tf32
    for dt, tag in ((torch.float32, "tf32"), (torch.bfloat16, "bf16")):
        torch.backends.cuda.matmul.allow_tf32 = dt == torch.float32
        layer = 0.0
        for n, k in ((1152, 384), (384, 384), (1536, 384), (384, 1536)):
            x = torch.randn(m, k, device=dev, dtype=dt)
            w = torch.randn(n, k, device=dev, dtype=dt)
            dy = torch.randn(m, n, device=dev, dtype=dt)
            def us(f):  # 10 products per timed repeat: the events time the GPU's work
                return 1e3 / 10 * time_ms(lambda: [f() for _ in range(10)], 2, 10)
            fwd = us(lambda: x @ w.t())
            dx = us(lambda: dy @ w)
            dw = us(lambda: dy.t() @ x)
            r[f"gpt_gemm_{tag}_{n}x{k}_fwd_us"] = fwd
            r[f"gpt_gemm_{tag}_{n}x{k}_dx_us"] = dx
            r[f"gpt_gemm_{tag}_{n}x{k}_dw_us"] = dw
            layer += fwd + dx + dw
        r[f"gpt_gemms_{tag}_layer_us"] = layer
    torch.backends.cuda.matmul.allow_tf32 = before


def make_mlp_step(dev):
    """bench::MlpStep (bench/common.hpp): MLP 784-1024-1024-10, batch 256, raw weights [in, out]
    from nn.Linear's default range, addmm(b, x, W) (bias fused into the GEMM, cuBLASLt in both
    frameworks) + relu, cross_entropy, SGD momentum 0.9 lr 0.01."""
    def uniform(shape, fan_in):
        bound = 1 / math.sqrt(fan_in)
        return (torch.rand(shape, device=dev) * (2 * bound) - bound).requires_grad_()

    w1, b1 = uniform((784, 1024), 784), uniform((1024,), 784)
    w2, b2 = uniform((1024, 1024), 1024), uniform((1024,), 1024)
    w3, b3 = uniform((1024, 10), 1024), uniform((10,), 1024)
    x, y = torch.randn(256, 784, device=dev), torch.randint(0, 10, (256,), device=dev)
    opt = torch.optim.SGD([w1, b1, w2, b2, w3, b3], lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        h = torch.relu(torch.addmm(b1, x, w1))
        h = torch.relu(torch.addmm(b2, h, w2))
        loss = F.cross_entropy(torch.addmm(b3, h, w3), y)
        loss.backward()
        opt.step()
        return loss
    return step


def mlp_step(dev, r):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()  # before the MLP's tensors
    step = make_mlp_step(dev)
    r["mlp_step_784_1024_1024_10_b256_sgd_ms"] = time_ms(step, 10, 50)
    # Peak during one steady-state step minus what was allocated just before it (as bench_ops).
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = step()
    torch.cuda.synchronize()
    r["mlp_step_peak_MiB"] = (torch.cuda.max_memory_allocated() - before) / 2 ** 20
    r["mlp_step_total_MiB"] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    print(f"mlp step: loss after 61 steps {loss.item():.4f}")


def permutation(n, seed):
    """The epoch's shuffle, identical to bench_ops.cpp: Fisher-Yates driven by splitmix64."""
    p, state, mask = list(range(n)), seed, (1 << 64) - 1
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        j = z % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def fashion_mnist_epoch(dev, data_dir, r, epochs=4, max_steps=None):
    """One epoch of the main job's MLP on the training set resident on the GPU (f32 / 255), as
    bench_ops.cpp: batches of 128 by index_select through the epoch's permutation (drop_last),
    AdamW lr 1e-3 (weight decay 0.01), one warm-up epoch, median of the other epochs' event times."""
    from torch_fashion_mnist import idx, model  # the PyTorch twin of the main job
    images = (torch.tensor(idx(f"{data_dir}/train-images-idx3-ubyte.gz"), dtype=torch.float32) / 255).unsqueeze(1)
    labels = torch.tensor(idx(f"{data_dir}/train-labels-idx1-ubyte.gz"), dtype=torch.int64)
    images, labels = images.to(dev), labels.to(dev)
    n, batch = images.shape[0], 128
    steps = n // batch if max_steps is None else max_steps
    torch.manual_seed(0)
    m = model("mlp").to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    ms = []
    for epoch in range(epochs):
        perm = torch.tensor(permutation(n, epoch), dtype=torch.int64, device=dev)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(steps):
            j = perm[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(m(images.index_select(0, j)), labels.index_select(0, j))
            opt.zero_grad()
            loss.backward()
            opt.step()
        e.record(); e.synchronize()
        if epoch > 0:
            ms.append(s.elapsed_time(e))
    r["fashion_mnist_mlp_epoch_ms"] = statistics.median(ms)
    print(f"fashion_mnist: {steps} steps per epoch, last loss {loss.item():.4f}")


def h2d(dev, r):
    n = (256 << 20) // 4
    pinned, pageable = torch.full((n,), 1.5).pin_memory(), torch.full((n,), 2.5)
    r["h2d_256MiB_pinned_GBps"] = gbps(n * 4, time_ms(lambda: pinned.to(dev, non_blocking=True), 1, 10))
    r["h2d_256MiB_pageable_GBps"] = gbps(n * 4, time_ms(lambda: pageable.to(dev), 1, 10))


def fwd_bwd_ms(leaves, f, backward):
    """Forward, or forward + backward of sum(y * g) into the leaves (as bench_ops.cpp)."""
    g = []

    def step():
        for t in leaves:
            t.grad = None
        y = f()
        if backward:
            if not g:
                g.append(torch.randn_like(y))
            y.backward(g[0])
    return time_ms(step, 5, 30)


def norm_conv(dev, r):
    """bench_ops.cpp's norm_conv: F.batch_norm (cuDNN or ATen's kernels, PyTorch's choice) and
    F.conv_transpose2d with TF32 off (torch.backends.cudnn.allow_tf32 = False)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    x = torch.randn(32, 64, 56, 56, device=dev, requires_grad=True)
    w, b = torch.randn(64, device=dev, requires_grad=True), torch.randn(64, device=dev, requires_grad=True)
    rm, rv = torch.zeros(64, device=dev), torch.ones(64, device=dev)
    train = lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
    r["batch_norm_32x64x56x56_f32_train_fwd_ms"] = fwd_bwd_ms([x, w, b], train, False)
    r["batch_norm_32x64x56x56_f32_train_fwd_bwd_ms"] = fwd_bwd_ms([x, w, b], train, True)
    with torch.no_grad():
        r["batch_norm_32x64x56x56_f32_eval_fwd_ms"] = fwd_bwd_ms(
            [], lambda: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5), False)
    x = torch.randn(64, 256, 16, 16, device=dev, requires_grad=True)
    w = (torch.randn(256, 128, 4, 4, device=dev) * 0.02).requires_grad_()
    b = torch.zeros(128, device=dev, requires_grad=True)
    f = lambda: F.conv_transpose2d(x, w, b, stride=2, padding=1)
    r["conv_transpose2d_64x256x16x16_k4s2p1_f32_fwd_ms"] = fwd_bwd_ms([x, w, b], f, False)
    r["conv_transpose2d_64x256x16x16_k4s2p1_f32_fwd_bwd_ms"] = fwd_bwd_ms([x, w, b], f, True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--only", default="", help="run just the workloads whose names contain one of these "
                    "comma-separated names (as bench_ops --only)")
    args = ap.parse_args()
    only = [o for o in args.only.split(",") if o]
    if not torch.cuda.is_available():
        print("torch_ops: no CUDA device; nothing to measure")
        return 0
    dev = torch.device("cuda", 0)  # a device object: no string parsing inside the timed calls
    torch.manual_seed(0)
    r, failed = {}, 0
    workloads = [("host costs", lambda: host_costs(dev, r)), ("bandwidth", lambda: bandwidth(dev, r)),
                 ("scans and sorts", lambda: scans_sorts(dev, r)),
                 ("attention", lambda: attention(dev, r)),
                 ("gemm", lambda: gemm(dev, r)), ("gpt gemms", lambda: gpt_gemms(dev, r)),
                 ("mlp step", lambda: mlp_step(dev, r))]
    if os.path.isdir(args.data):
        workloads.append(("fashion_mnist epoch", lambda: fashion_mnist_epoch(dev, args.data, r)))
    else:
        print(f"torch_ops: fashion_mnist epoch skipped: no directory {args.data} (--data DIR)", file=sys.stderr)
    workloads.append(("h2d", lambda: h2d(dev, r)))
    workloads.append(("norm conv", lambda: norm_conv(dev, r)))
    for name, f in workloads:  # one that fails is reported; the others still run
        if only and not any(o in name for o in only):
            continue
        try:
            f()
        except Exception as e:  # noqa: BLE001 (report any failure, keep measuring)
            print(f"torch_ops: {name} failed: {e!r}", file=sys.stderr)
            failed += 1
    for k in sorted(r):
        print(f"{k:40} {r[k]:12.3f}")
    print(json.dumps(dict(sorted(r.items()))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
