#!/usr/bin/env bash
# The ranks' benchmark on the GPU machine, brrr and PyTorch in one run: bench_dist through
# brrr-run and bench/torch_dist.py through torchrun, each with N ranks (default: every GPU),
# then a side-by-side table. Run from the repository root with the programs of the build
# host in .gpu/bin (bench_dist, brrr-run) and the shared libraries they need in .gpu/lib
# (docs/benchmarks.md, "Ranks", says how):
#
#   bash bench/compare_dist.sh [N]
#
# Outputs go to $OUT (default /tmp/bench): brrr_dist.txt, torch_dist.txt, table.txt.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0) in every process started here.
set -uo pipefail
out=${OUT:-/tmp/bench}; mkdir -p "$out"
bin=.gpu/bin; py=${PYTHON:-python3}
n=${1:-$(nvidia-smi -L 2>/dev/null | wc -l)}; [ "$n" -ge 1 ] || n=1
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NCCL as PyTorch ships it (pip's nvidia-nccl), when the loader does not know one.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  nccl_dir=$($py -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_dir
fi
echo "== brrr: brrr-run --nproc-per-node $n bench_dist"
"$bin/brrr-run" --nproc-per-node "$n" "$bin/bench_dist" 2>&1 | tee "$out/brrr_dist.txt"
echo "== PyTorch: torchrun --nproc-per-node $n bench/torch_dist.py"
$py -m torch.distributed.run --nproc-per-node "$n" bench/torch_dist.py 2>&1 | tee "$out/torch_dist.txt"
$py - "$out" <<'PY' | tee "$out/table.txt"
import json, sys, re
out = sys.argv[1]
def last_json(path):
    for line in reversed(open(path).read().splitlines()):
        line = re.sub(r"^\[rank \d+\] ", "", line)
        if line.startswith("{"):
            return json.loads(line)
    return {}
b, t = last_json(f"{out}/brrr_dist.txt"), last_json(f"{out}/torch_dist.txt")
print(f"{'metric':40} {'brrr':>12} {'PyTorch':>12} {'brrr/PyTorch':>13}")
for k in sorted(set(b) | set(t), key=lambda k: (not k.startswith("allreduce"), int(k.split('_')[1]) if k.startswith("allreduce") else 0, k)):
    bv, tv = b.get(k), t.get(k)
    ratio = f"{bv / tv:13.3f}" if isinstance(bv, (int, float)) and isinstance(tv, (int, float)) and tv else f"{'':13}"
    fmt = lambda v: f"{v:12.3f}" if isinstance(v, (int, float)) else f"{'-':>12}"
    print(f"{k:40} {fmt(bv)} {fmt(tv)} {ratio}")
PY
