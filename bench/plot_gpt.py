"""Lays the loss curves of examples/gpt and its PyTorch twin (bench/torch_gpt.py) side by side.

    python3 bench/plot_gpt.py brrr.csv torch.csv out.png [--title TEXT]

Each CSV is what `--csv` writes (step,train_loss,val_loss,lr,tokens_per_s). Plots train and
validation loss against the step for both, and prints the largest gap between the two
validation curves at shared steps. Needs matplotlib (a developer's tool, not a dependency of
the build or of the tests).
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {int(r["step"]): (float(r["train_loss"]), float(r["val_loss"])) for r in rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("brrr")
    ap.add_argument("torch")
    ap.add_argument("out")
    ap.add_argument("--title", default="examples/gpt against bench/torch_gpt.py")
    c = ap.parse_args()
    runs = {"brrr": read(c.brrr), "PyTorch": read(c.torch)}
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for (name, run), colour in zip(runs.items(), ("tab:blue", "tab:orange")):
        steps = sorted(run)
        ax.plot(steps, [run[s][0] for s in steps], color=colour, linestyle="-", label=f"{name} train")
        ax.plot(steps, [run[s][1] for s in steps], color=colour, linestyle="--", label=f"{name} validation")
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
    print(f"wrote {c.out}")


if __name__ == "__main__":
    main()
