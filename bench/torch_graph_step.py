"""bench/bench_graph_step.cpp in PyTorch: the MLP step of bench/torch_ops.py (784-1024-1024-10,
batch 256, f32, TF32 off, cross entropy, torch.optim.SGD momentum 0.9) eager, and captured whole
with torch.cuda.graph (the documented whole-network idiom: warm-up on a side stream, then one
capture; static inputs) and replayed. Same timing: 10 warm-up calls, CUDA events around each of
50 calls (median), then the mean of 1000 back-to-back replays between two events, and the host
time to enqueue one replay. Prints a summary, then one JSON object on the last line.

usage: python3 bench/torch_graph_step.py [--tf32]   (--tf32: TF32 matmuls, as bench_graph_step --tf32)"""
import json, os, statistics, sys, time
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ops import make_mlp_step, time_ms  # noqa: E402  (the same step and timing)


def main():
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    tf32 = "--tf32" in sys.argv[1:]
    torch.backends.cuda.matmul.allow_tf32 = tf32
    step = make_mlp_step(dev)
    eager_ms = time_ms(step, 10, 50)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = step()
    g.replay()
    first_loss = loss.item()

    graphed_ms = time_ms(g.replay, 10, 50)
    n = 1000
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    s.record()
    for _ in range(n):
        g.replay()
    e.record()
    host_ms = (time.perf_counter() - t0) / n * 1e3
    e.synchronize()
    back_to_back_ms = s.elapsed_time(e) / n
    g.replay()
    print(f"torch {torch.__version__} mlp step ({'tf32' if tf32 else 'f32'}) eager: median {eager_ms:.4f} ms")
    print(f"torch.cuda.graph: median {graphed_ms:.4f} ms per replay over 50; {back_to_back_ms:.4f} ms per replay "
          f"over {n} back to back; host enqueue {host_ms:.4f} ms per replay")
    print(f"loss {first_loss:.4f} -> {loss.item():.4f}")
    print(json.dumps({"tf32": int(tf32), "torch_mlp_step_eager_ms": round(eager_ms, 4), "torch_mlp_step_graphed_ms": round(graphed_ms, 4),
                      "torch_mlp_step_graphed_back_to_back_ms": round(back_to_back_ms, 4),
                      "torch_graph_host_enqueue_ms": round(host_ms, 4)}))


if __name__ == "__main__":
    main()
