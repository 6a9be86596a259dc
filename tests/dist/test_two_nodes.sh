#!/usr/bin/env bash
# Two brrr-run launchers with --nnodes 2 on one machine form one world of 4 ranks: each rank
# all-reduces its rank and checks the sum. The port is picked free; a collision with another
# program (it is free only when picked) is retried.
# usage: test_two_nodes.sh BRRR_RUN DIST_SCENARIOS
set -uo pipefail
run=${1:?usage: test_two_nodes.sh BRRR_RUN DIST_SCENARIOS}; prog=${2:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for attempt in 1 2 3; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
  "$run" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-port "$port" "$prog" sum 4 >"$tmp/n1" 2>&1 &
  node1=$!
  "$run" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-port "$port" "$prog" sum 4 >"$tmp/n0" 2>&1
  rc0=$?
  wait $node1; rc1=$?
  if grep -q "cannot bind the store's port" "$tmp/n0"; then echo "port $port taken, retrying"; continue; fi
  cat "$tmp/n0" "$tmp/n1"
  ok=$(cat "$tmp/n0" "$tmp/n1" | grep -c "of 4 (local rank [01] of 2): sum ok")
  echo "node 0 exit $rc0, node 1 exit $rc1, $ok of 4 ranks ok"
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ "$ok" -eq 4 ]
  exit
done
echo "no free port after 3 attempts"; exit 1
