"""The workloads of bench_ops.cpp in PyTorch eager, same sizes and timing method (CUDA events,
median of repeats; enqueue time = host time per op in batches). Prints one JSON line."""
import json, statistics, time
import torch


def time_ms(f, warmup, reps):
    for _ in range(warmup):
        f()
    ms = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); e.synchronize()
        ms.append(s.elapsed_time(e))
    return statistics.median(ms)


def enqueue_us(op):
    for _ in range(2000):
        op()
    torch.cuda.synchronize()
    us = []
    for _ in range(50):
        t0 = time.perf_counter()
        for _ in range(200):
            op()
        us.append((time.perf_counter() - t0) / 200 * 1e6)
        torch.cuda.synchronize()
    return statistics.median(us)


def main():
    dev = "cuda"
    torch.manual_seed(0)
    r = {}
    a, b = torch.randn(1024, device=dev), torch.randn(1024, device=dev)
    r["enqueue_add_1024_us"] = enqueue_us(lambda: a + b)
    ag = torch.randn(1024, device=dev, requires_grad=True)
    r["enqueue_add_1024_autograd_us"] = enqueue_us(lambda: ag + b)
    n = 1 << 28
    a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    r["add_256M_f32_GBps"] = 3 * n * 4 / (time_ms(lambda: a + b, 3, 20) * 1e-3) / 1e9
    r["sum_256M_f32_GBps"] = n * 4 / (time_ms(lambda: a.sum(), 3, 20) * 1e-3) / 1e9
    del a, b
    n = 8192
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    flop = 2 * n ** 3
    torch.backends.cuda.matmul.allow_tf32 = False
    r["gemm_8192_fp32_TFLOPs"] = flop / (time_ms(lambda: a @ b, 2, 10) * 1e-3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = True
    r["gemm_8192_tf32_TFLOPs"] = flop / (time_ms(lambda: a @ b, 2, 10) * 1e-3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    ah, bh = a.bfloat16(), b.bfloat16()
    r["gemm_8192_bf16_TFLOPs"] = flop / (time_ms(lambda: ah @ bh, 2, 10) * 1e-3) / 1e12
    print(json.dumps(r))


if __name__ == "__main__":
    main()
