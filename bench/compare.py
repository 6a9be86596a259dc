"""Merges the JSON lines of one brrr, PyTorch eager and LibTorch run into one table with
brrr's ratio to the best peer, and writes it as JSON (and Markdown for docs/benchmarks.md).

usage: compare.py BRRR PYTORCH LIBTORCH [--meta META.json] [--out OUT.json] [--markdown OUT.md]
  Each input is a program's output; its last line starting with '{' is the JSON object.

Whether a workload is better high or low comes from its key's unit suffix: _ms, _us, _ns and
_MiB are lower-is-better; _GBps and _TFLOPs higher-is-better. A key with any other suffix
is shown without a ratio. The ratio always reads "brrr is x times better than the best
peer": higher-is-better: brrr / best; lower-is-better: best / brrr. So > 1 means brrr is
better, < 1 worse, whatever the unit; 'verdict' says it in words (0.80 is "1.25x worse")."""
import argparse, json, sys

UNITS = {  # suffix -> (unit as printed, lower is better)
    "_ms": ("ms", True), "_us": ("µs", True), "_ns": ("ns", True), "_MiB": ("MiB", True),
    "_GBps": ("GB/s", False), "_TFLOPs": ("TFLOP/s", False),
}
SYSTEMS = ["brrr", "pytorch", "libtorch"]
# Table order: the order of workloads; keys not listed follow, sorted.
ORDER = ["enqueue_add_1024_us", "enqueue_add_1024_autograd_us", "alloc_free_1MiB_ns", "add_256M_f32_GBps",
         "sum_256M_f32_GBps", "softmax_65536x4096_f32_GBps", "cumsum_65536x4096_f32_GBps", "cumsum_64M_f32_GBps",
         "topk_65536x4096_k16_f32_ms", "topk_64M_k1024_f32_ms", "gemm_8192_fp32_TFLOPs", "gemm_8192_tf32_TFLOPs",
         "gemm_8192_bf16_TFLOPs", "mlp_step_784_1024_1024_10_b256_sgd_ms", "mlp_step_peak_MiB", "mlp_step_total_MiB",
         "fashion_mnist_mlp_epoch_ms", "h2d_256MiB_pinned_GBps", "h2d_256MiB_pageable_GBps"]


def unit_of(key):
    for suffix, (unit, lower) in UNITS.items():
        if key.endswith(suffix):
            return unit, lower
    return None, None


def last_json(path):
    """The last JSON object line of a program's output ({} when the file or line is missing)."""
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError) as e:
        print(f"compare.py: {path}: {e}", file=sys.stderr)
        return {}


def ratio_of(key, vals):
    """brrr vs the best peer, > 1 meaning brrr is better; None without both sides."""
    unit, lower = unit_of(key)
    peers = [v for v in vals[1:] if v is not None]
    if unit is None or vals[0] is None or not peers:
        return None, None
    best = min(peers) if lower else max(peers)
    if lower:
        return (best / vals[0] if vals[0] > 0 else None), best
    return (vals[0] / best if best > 0 else None), best


def verdict(r):
    if r is None:
        return "-"
    if abs(r - 1) < 0.01:
        return "on par"
    return f"{r:.2f}x better" if r > 1 else f"{1 / r:.2f}x worse"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("brrr"); ap.add_argument("pytorch"); ap.add_argument("libtorch")
    ap.add_argument("--meta", help="JSON object describing the run (GPU, driver, versions), copied into --out")
    ap.add_argument("--out", help="write the rows (and meta) as JSON here")
    ap.add_argument("--markdown", help="write a Markdown table here")
    args = ap.parse_args()
    runs = [last_json(p) for p in (args.brrr, args.pytorch, args.libtorch)]
    present = set().union(*[r.keys() for r in runs])
    keys = [k for k in ORDER if k in present] + sorted(present - set(ORDER))
    rows = []
    head = f"{'workload':40} {'unit':>8} {'brrr':>10} {'pytorch':>10} {'libtorch':>10} {'brrr vs best':>12}  verdict"
    print("ratio = brrr vs the best peer, > 1: brrr better (higher-is-better: brrr/best; lower-is-better: best/brrr)")
    print(head)
    md = ["| workload | unit | brrr | PyTorch | LibTorch | brrr vs best peer (> 1: brrr better) |",
          "| --- | --- | ---: | ---: | ---: | --- |"]
    for k in keys:
        vals = [r.get(k) for r in runs]
        unit, lower = unit_of(k)
        r, best = ratio_of(k, vals)
        cells = [f"{v:10.3f}" if v is not None else f"{'-':>10}" for v in vals]
        rtxt = f"{r:12.3f}" if r is not None else f"{'-':>12}"
        print(f"{k:40} {unit or '?':>8} {' '.join(cells)} {rtxt}  {verdict(r)}")
        mcells = [f"{v:.3f}" if v is not None else "-" for v in vals]
        md.append(f"| {k} | {unit or '?'} | {' | '.join(mcells)} | "
                  f"{f'{r:.3f} ({verdict(r)})' if r is not None else '-'} |")
        rows.append({"workload": k, "unit": unit, "lower_is_better": lower, **dict(zip(SYSTEMS, vals)),
                     "best_peer": best, "brrr_vs_best_peer": r, "verdict": verdict(r)})
    unknown = [k for k in keys if unit_of(k)[0] is None]
    if unknown:
        print(f"compare.py: keys without a known unit suffix (no ratio): {', '.join(unknown)}", file=sys.stderr)
    if args.out:
        meta = {}
        if args.meta:
            try:
                with open(args.meta) as f:
                    meta = json.load(f)
            except (OSError, ValueError) as e:
                print(f"compare.py: --meta {args.meta}: {e}", file=sys.stderr)
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "ratio": "brrr vs best peer, > 1 means brrr is better", "rows": rows}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
