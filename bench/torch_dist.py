"""The workloads of bench/bench_dist.cpp in PyTorch (torch.distributed, NCCL for CUDA, Gloo
for CPU; DistributedDataParallel with its defaults), same sizes, same timing: CUDA events
around each repeat, the median, the slowest rank's value. Start it with torchrun (or alone:
a world of one). Prints a table, then one JSON object (rank 0) on the last line with the keys
of bench_dist.

usage: torchrun --nproc-per-node N bench/torch_dist.py [--max-mib 1024]"""
import argparse, json, os, statistics, time
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                         nn.Dropout(0.25), nn.Linear(128, 10))


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def median_ms(dev, warmup, reps, f):
    for _ in range(warmup):
        f()
    ms = []
    for _ in range(reps):
        if dev.type == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); f(); e.record(); e.synchronize()
            ms.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter(); f(); ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def slowest(v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=cpu_group)
    return t.item()


def step_ms(dev, model, ddp, shape, batch, reps):
    model = model.to(dev)
    run = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None) if ddp else model
    opt = torch.optim.SGD(run.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *shape, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        opt.zero_grad()
        F.cross_entropy(run(x), y).backward()
        opt.step()
    for _ in range(5):
        step()
    dist.barrier(group=cpu_group)
    return slowest(median_ms(dev, 0, reps, step))


def main():
    global cpu_group
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mib", type=float, default=1024)
    args = ap.parse_args()
    if "RANK" not in os.environ:  # alone: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", local % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=dev if cuda else None)
    cpu_group = dist.new_group(backend="gloo")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    r, n = dist.get_rank(), dist.get_world_size()
    out = {"world_size": n}
    if r == 0:
        print(f"{n} ranks on {dev} ({'NCCL' if cuda else 'Gloo'})\n{'bytes':>12} {'time us':>12} {'algbw GB/s':>12} {'busbw GB/s':>12}")
    nbytes = 4096
    while nbytes <= args.max_mib * 2**20:
        t = torch.ones(nbytes // 4, device=dev)
        reps = 20 if nbytes <= 64 * 2**20 else 5
        ms = slowest(median_ms(dev, 3, reps, lambda: dist.all_reduce(t)))
        algbw = nbytes / (ms * 1e-3) / 1e9
        busbw = algbw * 2 * (n - 1) / n
        key = f"allreduce_{nbytes}"
        out[key + "_us"], out[key + "_algbw_GBps"], out[key + "_busbw_GBps"] = ms * 1e3, algbw, busbw
        if r == 0:
            print(f"{nbytes:12d} {ms * 1e3:12.1f} {algbw:12.2f} {busbw:12.2f}")
        nbytes *= 4
    reps = 50 if cuda else 5
    torch.manual_seed(0); out["cnn_step_ms"] = step_ms(dev, cnn(), False, (1, 28, 28), 128, reps)
    torch.manual_seed(0); out["ddp_cnn_step_ms"] = step_ms(dev, cnn(), True, (1, 28, 28), 128, reps)
    torch.manual_seed(0); out["mlp_step_ms"] = step_ms(dev, mlp(), False, (784,), 256, reps)
    torch.manual_seed(0); out["ddp_mlp_step_ms"] = step_ms(dev, mlp(), True, (784,), 256, reps)
    if r == 0:
        print(f"CNN step {out['cnn_step_ms']:.3f} ms, with DDP {out['ddp_cnn_step_ms']:.3f} ms; "
              f"MLP step {out['mlp_step_ms']:.3f} ms, with DDP {out['ddp_mlp_step_ms']:.3f} ms")
        print(json.dumps(out, sort_keys=True))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
