#!/usr/bin/env bash
# brrr-run, end to end with shell programs as ranks: torchrun's variables, output prefixes,
# a failing rank stopping the others (exit code and message), signals (a killed rank, a
# forwarded SIGTERM), two --nnodes 2 launchers, and option errors.
# usage: test_launcher.sh path/to/brrr-run
set -uo pipefail
run=${1:?usage: test_launcher.sh BRRR_RUN}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
has() { grep -q -- "$2" "$1" || { echo "  '$2' not in $1:"; sed 's/^/  | /' "$1"; return 1; }; }

# 1. variables and prefixes, 3 ranks
"$run" --nproc-per-node 3 sh -c 'echo "v $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT"; echo "e $RANK" >&2; printf "tail $RANK"' \
  >"$tmp/out" 2>"$tmp/err"
check "3 ranks exit 0" test $? -eq 0
for r in 0 1 2; do
  check "rank $r variables" grep -Eq "^\[rank $r\] v $r $r 3 3 0 127.0.0.1 [1-9][0-9]*$" "$tmp/out"
  check "rank $r stderr prefixed" has "$tmp/err" "^\[rank $r\] e $r$"
  check "rank $r last partial line" has "$tmp/out" "^\[rank $r\] tail $r$"
done
check "one port for all ranks" test "$(grep "^\[rank .\] v" "$tmp/out" | grep -o " [0-9]*$" | sort -u | wc -l)" -eq 1

# 2. no prefix
"$run" --no-prefix --nproc_per_node=2 sh -c 'echo "plain $RANK"' >"$tmp/out" 2>&1
check "--no-prefix" grep -q "^plain 1$" "$tmp/out"

# 3. a failing rank stops the others quickly and its code is the launcher's
start=$(date +%s)
"$run" --nproc-per-node 3 sh -c 'if [ "$RANK" = 1 ]; then sleep 0.2; exit 3; fi; sleep 60' >"$tmp/out" 2>"$tmp/err"
code=$?; took=$(( $(date +%s) - start ))
check "failing rank's exit code" test $code -eq 3
check "failing rank named" has "$tmp/err" "rank 1 (local rank 1, pid [0-9]*) exited with code 3"
check "others stopped" has "$tmp/err" "stopping the 2 other ranks"
check "stopped within the grace period ($took s)" test $took -lt 5

# 4. a rank killed by a signal
"$run" --nproc-per-node 2 sh -c 'if [ "$RANK" = 0 ]; then kill -KILL $$; fi; sleep 60' >"$tmp/out" 2>"$tmp/err"
code=$?
check "killed rank: 128 + 9" test $code -eq 137
check "killed rank named" has "$tmp/err" "rank 0 (local rank 0, pid [0-9]*) was killed by signal 9 (SIGKILL)"

# 5. a rank ignoring SIGTERM is killed after the grace period
start=$(date +%s)
"$run" --grace-period 1 --nproc-per-node 2 sh -c 'if [ "$RANK" = 1 ]; then sleep 0.3; exit 4; fi; trap "" TERM; sleep 60' \
  >"$tmp/out" 2>"$tmp/err"
code=$?; took=$(( $(date +%s) - start ))
check "grace period then SIGKILL ($took s)" test $code -eq 4 -a $took -ge 1 -a $took -lt 10

# 6. SIGTERM to the launcher reaches every rank (and what they started)
"$run" --nproc-per-node 2 sh -c 'echo "pid $$"; sleep 60' >"$tmp/out" 2>"$tmp/err" &
launcher=$!
for _ in $(seq 50); do [ "$(grep -c '^\[rank .\] pid' "$tmp/out")" -eq 2 ] && break; sleep 0.1; done
kill -TERM $launcher; wait $launcher; code=$?
check "forwarded SIGTERM: 128 + 15" test $code -eq 143
check "forwarding reported" has "$tmp/err" "received SIGTERM; forwarding it to every rank"
alive=0
for p in $(sed -n 's/^\[rank .\] pid //p' "$tmp/out"); do kill -0 "$p" 2>/dev/null && alive=1; done
check "ranks gone after SIGTERM" test $alive -eq 0

# 7. two nodes on one machine: ranks 0..3 of one world (the port is checked by node 0)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])' 2>/dev/null || echo 29517)
"$run" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-port "$port" sh -c 'echo "n $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $MASTER_PORT"' >"$tmp/n1" 2>&1 &
"$run" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-port "$port" sh -c 'echo "n $RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $MASTER_PORT"' >"$tmp/n0" 2>&1
wait
check "node 0 ranks" grep -q "^\[rank 1\] n 1 1 4 0 $port$" "$tmp/n0"
check "node 1 ranks" grep -q "^\[rank 3\] n 3 1 4 1 $port$" "$tmp/n1"

# 8. option errors
"$run" --nnodes 2 --node-rank 2 true 2>"$tmp/err"; code=$?
check "node rank out of range" test $code -eq 2
check "node rank message" has "$tmp/err" "node-rank 2 is outside \[0, 2)"
"$run" --nproc-per-node x true 2>"$tmp/err"; code=$?
check "bad integer" has "$tmp/err" "nproc-per-node wants an integer"
"$run" --nnodes 2 --master-port 0 true 2>"$tmp/err"; code=$?
check "port 0 on several nodes" has "$tmp/err" "works on one node only"
"$run" --nproc-per-node 1 sh -c 'echo $MASTER_PORT; sleep 5' >"$tmp/out" 2>&1 &
holder=$!
for _ in $(seq 50); do grep -q '[0-9]' "$tmp/out" && break; sleep 0.1; done
busy=$(grep -o '[0-9]*$' "$tmp/out" | head -1)
"$run" --master-port "$busy" true 2>"$tmp/err"; code=$?
check "busy port is an error before any rank starts" test $code -eq 2
check "busy port message" has "$tmp/err" "cannot bind the store's port $busy"
kill -TERM $holder; wait $holder 2>/dev/null

echo "$fails failed"
[ $fails -eq 0 ]
