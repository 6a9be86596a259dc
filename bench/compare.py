"""Merges the JSON lines of brrr, PyTorch and LibTorch runs into one table with brrr's ratio
to the best peer. usage: compare.py brrr.json torch.json libtorch.json [out.json]
Metrics ending in _us are lower-is-better; the others higher-is-better. Ratio > 1 means brrr
is better than the best peer."""
import json, sys


def last_json(path):
    try:
        lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except OSError:
        return {}


def main():
    names = ["brrr", "pytorch", "libtorch"]
    runs = [last_json(p) for p in sys.argv[1:4]]
    keys = sorted(set().union(*[r.keys() for r in runs]))
    rows = []
    print(f"{'workload':34} {'brrr':>10} {'pytorch':>10} {'libtorch':>10} {'brrr/best':>10}")
    for k in keys:
        vals = [r.get(k) for r in runs]
        peers = [v for v in vals[1:] if v is not None]
        ratio = None
        if vals[0] is not None and peers:
            lower_better = k.endswith("_us")
            best = min(peers) if lower_better else max(peers)
            ratio = (best / vals[0]) if lower_better else (vals[0] / best)
        cells = [f"{v:10.3f}" if v is not None else f"{'-':>10}" for v in vals]
        print(f"{k:34} {' '.join(cells)} {ratio:10.3f}" if ratio is not None else f"{k:34} {' '.join(cells)} {'-':>10}")
        rows.append({"workload": k, **{n: v for n, v in zip(names, vals)}, "brrr_vs_best_peer": ratio})
    if len(sys.argv) > 4:
        json.dump(rows, open(sys.argv[4], "w"), indent=1)


if __name__ == "__main__":
    main()
