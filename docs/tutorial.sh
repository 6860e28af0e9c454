#!/usr/bin/env bash
# The tutorial of docs/tutorial.md, step by step (tests/tutorial_test.go runs it).
# Needs redis-server, redis-cli, slotmover and nats-server on the PATH.
# Stops everything it started when it ends.
set -euo pipefail
base=${BASE:-7000}          # masters on base+1..4; their sidecars' admin ports on base+101..104
nats=nats://127.0.0.1:${NATS_PORT:-4222}
dir=${DIR:-/tmp/slotmover-tutorial}
pids=()
stop() {
  kill "${pids[@]}" 2>/dev/null || true
  for i in 1 2 3 4; do redis-cli -p $((base + i)) shutdown nosave >/dev/null 2>&1 || true; done
}
trap stop EXIT
step() { printf '\n== %s\n' "$*"; }
wait_for() { # up to 60 s for a command to succeed
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return; sleep 0.2; done
  echo "gave up waiting for: $*" >&2; return 1
}

step "1. A cluster of three masters, and a fourth, empty one to scale out to"
for i in 1 2 3 4; do
  mkdir -p "$dir/$i"
  redis-server --bind 127.0.0.1 --port $((base + i)) --cluster-enabled yes --dir "$dir/$i" --save '' \
    --daemonize yes --pidfile "$dir/$i/redis.pid" --logfile "$dir/$i/redis.log"
done
for i in 1 2 3 4; do wait_for redis-cli -p $((base + i)) ping; done
redis-cli --cluster create 127.0.0.1:$((base + 1)) 127.0.0.1:$((base + 2)) 127.0.0.1:$((base + 3)) --cluster-yes >/dev/null
redis-cli --cluster add-node 127.0.0.1:$((base + 4)) 127.0.0.1:$((base + 1)) >/dev/null
joined() { redis-cli -p $((base + 4)) cluster info | grep -q cluster_state:ok; } # a few seconds after add-node
wait_for joined
seq 1 20000 | sed 's/.*/SET key:& &/' | redis-cli -c -p $((base + 1)) >/dev/null
redis-cli -c -p $((base + 1)) get key:42

step "2. Move slots with the CLI: slots 0-999 from master 1 to master 4"
slotmover move --source 127.0.0.1:$((base + 1)) --target 127.0.0.1:$((base + 4)) --slots 0-999

step "3. Repair a move that died half-way: slot 6000 importing on master 4, with a key copied"
id2=$(redis-cli -p $((base + 2)) cluster myid)
key=$(redis-cli -p $((base + 2)) cluster getkeysinslot 6000 1)
redis-cli -p $((base + 4)) cluster setslot 6000 importing "$id2"
printf 'ASKING\nSET %s copy\n' "$key" | redis-cli -p $((base + 4))
slotmover fix --cluster 127.0.0.1:$((base + 1)) --dry-run
slotmover fix --cluster 127.0.0.1:$((base + 1))
redis-cli --cluster check 127.0.0.1:$((base + 1)) | grep -E 'keys \||OK'

step "4. NATS (with JetStream, for the task records) and a sidecar beside each master"
nats-server -a 127.0.0.1 -p "${nats##*:}" -js -sd "$dir/nats" >"$dir/nats.log" 2>&1 &
pids+=($!)
listening() { (exec 3<>"/dev/tcp/127.0.0.1/${nats##*:}") 2>/dev/null; } # a sidecar refuses to start without its NATS
wait_for listening
for i in 1 2 3 4; do
  slotmover serve --node 127.0.0.1:$((base + i)) --admin 127.0.0.1:$((base + 100 + i)) \
    --metrics 127.0.0.1:$((base + 200 + i)) --nats "$nats" --nats-alias master-$i >"$dir/sidecar-$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3 4; do wait_for redis-cli -p $((base + 100 + i)) ping; done
slotmover ls --nats "$nats"

step "5. Import through master 4's admin port, with redis-cli, as on Redis 8.4"
task=$(redis-cli -p $((base + 104)) cluster migration import 1000 1999)
ended() { slotmover status --admin 127.0.0.1:$((base + 104)) "$task" | grep -qE 'completed|failed|canceled'; }
wait_for ended
slotmover status --admin 127.0.0.1:$((base + 104))

step "6. Plan a rebalance, and apply it through the sidecars over NATS"
slotmover plan --cluster 127.0.0.1:$((base + 1)) --rebalance -o "$dir/plan.json"
slotmover apply "$dir/plan.json" --nats "$nats" --parallel 2
slotmover status --nats "$nats" --node master-4
curl -s http://127.0.0.1:$((base + 204))/metrics | grep '^slotmover_tasks'
redis-cli --cluster check 127.0.0.1:$((base + 1)) | grep -E 'keys \||OK'
