#!/usr/bin/env bash
# Runs brrr's benchmarks, the same workloads in PyTorch eager and in LibTorch C++ (compiled
# here against the PyTorch install), and prints one table. Run on the GPU machine from the
# repository root, after the brrr programs were bundled into .gpu/bin (see docs/benchmarks.md):
#   bash bench/compare.sh [OUT_DIR]
set -uo pipefail
out=${1:-${OUT:-/tmp/bench}}
mkdir -p "$out"
bin=.gpu/bin
py=python3
torch_dir=$($py -c 'import torch, os; print(os.path.dirname(torch.__file__))')
echo "== building bench/libtorch_ops.cpp against $torch_dir"
g++ -O2 -std=c++17 bench/libtorch_ops.cpp -o "$out/libtorch_ops" \
  -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" -I/usr/local/cuda/include \
  -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda \
  -L/usr/local/cuda/lib64 -lcudart 2> "$out/libtorch_build.log" || { echo "libtorch build failed:"; tail -20 "$out/libtorch_build.log"; }
echo "== brrr";     "$bin/bench_ops" | tee "$out/brrr.json"
echo "== pytorch";  $py bench/torch_ops.py | tee "$out/torch.json"
echo "== libtorch"; [ -x "$out/libtorch_ops" ] && "$out/libtorch_ops" | tee "$out/libtorch.json"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
$py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"
echo
$py bench/compare.py "$out/brrr.json" "$out/torch.json" "$out/libtorch.json" "$out/compare.json" | tee "$out/table.txt"
