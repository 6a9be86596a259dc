"""Lays the loss curves of examples/gpt and its PyTorch twin (bench/torch_gpt.py) side by side.

    python3 tools/plot_gpt.py brrr.csv torch.csv out.png [--logs brrr.log torch.log] [--title TEXT]

Each CSV is what `--csv` writes (step,train_loss,val_loss,lr,tokens_per_s): the train and
validation estimates of both runs against the step. `--logs` adds the training loss of every
`--log-every` step from the two programs' stdout ("N/ITERS  loss X" lines): with the same
batches (gpt --offsets-out, torch_gpt.py --offsets) those are the same batch under the same
weights, and the largest gap between them is printed. Needs matplotlib (a developer's tool, not a dependency of
the build or of the tests).
"""
import argparse
import csv
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {int(r["step"]): (float(r["train_loss"]), float(r["val_loss"])) for r in rows}


def progress(path):
    """{step: loss} from the "N/ITERS  loss X" progress lines of either program."""
    out = {}
    for m in re.finditer(r"(\d+)/\d+\s+loss ([0-9.]+)", open(path, errors="replace").read()):
        out[int(m.group(1))] = float(m.group(2))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("brrr")
    ap.add_argument("torch")
    ap.add_argument("out")
    ap.add_argument("--logs", nargs=2, metavar=("BRRR_LOG", "TORCH_LOG"))
    ap.add_argument("--title", default="examples/gpt against bench/torch_gpt.py")
    c = ap.parse_args()
    runs = {"brrr": read(c.brrr), "PyTorch": read(c.torch)}
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    logs = dict(zip(runs, (progress(p) for p in c.logs))) if c.logs else {}
    for (name, run), colour in zip(runs.items(), ("tab:blue", "tab:orange")):
        steps = sorted(run)
        if name in logs:
            ls = sorted(logs[name])
            ax.plot(ls, [logs[name][s] for s in ls], color=colour, linestyle="-", alpha=0.6, label=f"{name} training batch")
        ax.plot(steps, [run[s][0] for s in steps], color=colour, linestyle="-", marker="o", label=f"{name} train estimate")
        ax.plot(steps, [run[s][1] for s in steps], color=colour, linestyle="--", marker="s", label=f"{name} validation estimate")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title(c.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(c.out)
    shared = sorted(set(runs["brrr"]) & set(runs["PyTorch"]))
    if shared:
        gap = max(abs(runs["brrr"][s][1] - runs["PyTorch"][s][1]) for s in shared)
        print(f"{len(shared)} shared steps; largest validation-loss gap {gap:.4f}")
    if logs:
        both = sorted(set(logs["brrr"]) & set(logs["PyTorch"]))
        if both:
            gap = max(abs(logs["brrr"][s] - logs["PyTorch"][s]) for s in both)
            print(f"{len(both)} logged steps; largest training-loss gap {gap:.4f}")
    print(f"wrote {c.out}")


if __name__ == "__main__":
    main()
