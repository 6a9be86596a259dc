#!/usr/bin/env bash
# One command on the GPU machine: brrr's captured MLP step (bench_graph_step) and PyTorch's
# (bench/torch_graph_step.py, torch.cuda.graph), one after the other on one GPU. Run from the
# repository root with bench_graph_step copied to .gpu/bin (docs/benchmarks.md, "CUDA graphs").
# Each program's output goes to $OUT (default /tmp/bench_graph) and to the terminal. Arguments
# (`--tf32`) are passed to both programs.
set -uo pipefail
out=${OUT:-/tmp/bench_graph}
mkdir -p "$out"
py=${PYTHON:-python3}
echo "== brrr (cuda::GraphedStep)"
.gpu/bin/bench_graph_step "$@" | tee "$out/brrr${1:-}.txt"
brrr_rc=${PIPESTATUS[0]}
echo "== PyTorch (torch.cuda.graph)"
$py bench/torch_graph_step.py "$@" | tee "$out/torch${1:-}.txt"
torch_rc=${PIPESTATUS[0]}
echo "exit codes: brrr $brrr_rc, torch $torch_rc"
[ "$brrr_rc" -eq 0 ] && [ "$torch_rc" -eq 0 ]
