#!/usr/bin/env bash
# The fault drill of scripts/drill.sh on clusters (make drill-cluster): two `relay serve`
# replicas on a Redis Cluster of 3 masters + 3 replicas (redis.cluster, redis.min_replicas 1)
# and a 3-node RabbitMQ cluster (rabbitmq.urls), which cmd/loadtest starts itself the way
# the tests do (internal/testpeer), on loopback ports below 32768. Under the same load
# (200 events/s for 90 s), beside the replica SIGKILLs and the sink faults of `make drill`,
# it SIGKILLs the RabbitMQ node leading the relay's queue at t+15s (started again 15 s
# later) and the Redis master holding the drill account's slot at t+35s (its replica is
# promoted; the old master comes back 10 s later as a replica). The check is make drill's.
#
#   make drill-cluster        (or scripts/drill-cluster.sh [loadtest drill flags], e.g. -rabbit-at 20s)
#   DRILL_KEEP=1 scripts/drill-cluster.sh   keep the state directory (logs, both clusters' files)
set -euo pipefail
cd "$(dirname "$0")/.."
DRILL_CLUSTER=1 exec scripts/drill.sh "$@"
