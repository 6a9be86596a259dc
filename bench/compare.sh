#!/usr/bin/env bash
# One command on the GPU machine: runs brrr's bench_ops, the same workloads in PyTorch eager
# (bench/torch_ops.py) and in LibTorch C++ (bench/libtorch_ops.cpp, compiled here with g++
# against the PyTorch install, which ships LibTorch), one after the other on one GPU, and
# prints the table of bench/compare.py. Run from the repository root, with the brrr program
# built on the build host and copied to .gpu/bin/bench_ops (docs/benchmarks.md says how):
#
#   bash bench/compare.sh [FASHION_MNIST_DIR]
#
# The Fashion-MNIST directory (IDX .gz files) is, in order: the argument, $FASHION_MNIST_DIR,
# .data/fashion-mnist (when present), /usr/share/datasets/fashion-mnist. Everything goes to
# $OUT (default /tmp/bench): each program's output (*.txt, stderr in *.err), meta.json (GPU,
# driver, CUDA and PyTorch versions, date), table.txt, table.md, compare.json.
set -uo pipefail
out=${OUT:-/tmp/bench}
mkdir -p "$out"
bin=.gpu/bin
py=${PYTHON:-python3}
cuda_home=${CUDA_HOME:-/usr/local/cuda}

if [ $# -ge 1 ]; then data=$1
elif [ -n "${FASHION_MNIST_DIR:-}" ]; then data=$FASHION_MNIST_DIR
elif [ -d .data/fashion-mnist ]; then data=.data/fashion-mnist
else data=/usr/share/datasets/fashion-mnist
fi
[ -d "$data" ] || echo "warning: no Fashion-MNIST directory $data: the epoch workload will be skipped"
[ -x "$bin/bench_ops" ] || { echo "error: $bin/bench_ops is missing (build it on the build host, see docs/benchmarks.md)"; exit 1; }

echo "== machine"
$py - "$out/meta.json" "$data" <<'EOF' | tee "$out/meta.txt"
import datetime, json, subprocess, sys
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:  # noqa: BLE001 (a missing tool leaves the field empty)
        return f"? ({e})"
import torch
meta = {
    "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    "gpu": sh("nvidia-smi --query-gpu=name --format=csv,noheader -i 0"),
    "driver": sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0"),
    "cuda_driver_supports": sh("nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | cut -d' ' -f3"),
    "cuda_toolkit": sh("nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2")
                    or sh("/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2"),
    "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
    "gxx": sh("g++ -dumpfullversion"),
    "commit": sh("git rev-parse --short HEAD 2>/dev/null") or "unknown",
    "fashion_mnist_dir": sys.argv[2],
}
json.dump(meta, open(sys.argv[1], "w"), indent=1)
for k, v in meta.items():
    print(f"{k:22} {v}")
EOF

echo "== building bench/libtorch_ops.cpp"
torch_dir=$($py -c 'import torch, os; print(os.path.dirname(torch.__file__))')
# -isystem: LibTorch's headers are not ours to warn about. C++20: PyTorch >= 2.10 requires it.
g++ -O2 -std=c++20 -Wall bench/libtorch_ops.cpp -o "$out/libtorch_ops" \
  -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include" -isystem "$cuda_home/include" \
  -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda \
  -L"$cuda_home/lib64" -lcudart > "$out/libtorch_build.log" 2>&1 \
  || { echo "libtorch build failed (the LibTorch column will be empty):"; tail -20 "$out/libtorch_build.log"; }

# Each program prints its table and, last, its JSON line; stderr names any skipped or
# failed workload.
echo "== brrr"
"$bin/bench_ops" --data "$data" 2> >(tee "$out/brrr.err" >&2) | tee "$out/brrr.txt"
echo "== pytorch"
$py bench/torch_ops.py --data "$data" 2> >(tee "$out/pytorch.err" >&2) | tee "$out/pytorch.txt"
echo "== libtorch"
if [ -x "$out/libtorch_ops" ]; then
  "$out/libtorch_ops" --data "$data" 2> >(tee "$out/libtorch.err" >&2) | tee "$out/libtorch.txt"
else
  : > "$out/libtorch.txt"
fi

echo
$py bench/compare.py "$out/brrr.txt" "$out/pytorch.txt" "$out/libtorch.txt" --meta "$out/meta.json" \
  --out "$out/compare.json" --markdown "$out/table.md" | tee "$out/table.txt"
echo "written to $out: meta.json, table.txt, table.md, compare.json, and each program's output"
