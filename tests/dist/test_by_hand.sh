#!/usr/bin/env bash
# Ranks started without brrr-run, as a user's shell or mpirun would: three processes of one
# world, first with torchrun's variables set by hand, then with Open MPI's
# (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE) and MASTER_ADDR/MASTER_PORT. Each
# rank all-reduces its rank and checks the sum. The port is picked free; a collision with
# another program (it is free only when picked) is retried.
# usage: test_by_hand.sh DIST_SCENARIOS
set -uo pipefail
prog=${1:?usage: test_by_hand.sh DIST_SCENARIOS}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }

world() {  # world STYLE: 3 ranks with STYLE's variables; 0 when all say "sum ok"
  local style=$1
  for attempt in 1 2 3; do
    local port; port=$(free_port)
    local pids=()
    for r in 2 1 0; do  # rank 0, the store's host, last: the others wait for it
      if [ "$style" = torchrun ]; then
        env RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$prog" sum 3 >"$tmp/$style$r" 2>&1 &
      else
        env OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=$r OMPI_COMM_WORLD_LOCAL_SIZE=3 \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$prog" sum 3 >"$tmp/$style$r" 2>&1 &
      fi
      pids+=($!)
    done
    local rcs=()
    for p in "${pids[@]}"; do wait "$p"; rcs+=($?); done
    if grep -q "cannot serve on port" "$tmp/${style}0"; then echo "port $port taken, retrying"; continue; fi
    cat "$tmp/$style"[012]
    local ok; ok=$(cat "$tmp/$style"[012] | grep -c "of 3 (local rank [012] of 3): sum ok")
    echo "$style: exit codes ${rcs[*]}, $ok of 3 ranks ok"
    [ "${rcs[*]}" = "0 0 0" ] && [ "$ok" -eq 3 ]
    return
  done
  echo "$style: no free port after 3 attempts"; return 1
}
world torchrun; a=$?
world openmpi; b=$?
[ $a -eq 0 ] && [ $b -eq 0 ]
