#!/usr/bin/env bash
# The relay end to end on local peers: starts RabbitMQ and Redis in .peers/ (installing
# them when missing), runs `relay serve` with examples/relay.demo.yaml, publishes signed
# job events the way the Fetcher Worker does (a few good ones, a re-emit, a tampered one),
# and shows what the relay accepted and what it quarantined. Then it keeps everything
# running until Ctrl-C, and stops the relay and the peers it started.
#
#   make demo                  (or scripts/demo.sh)
#   DEMO_EXIT=1 make demo      show the results and exit: for scripts and CI
#
# Run it again at any time: running peers are reused and the relay is restarted.
# Ports (below 32768, away from peers.sh's defaults so a test run can go on beside it):
# DEMO_REDIS_PORT (16479), DEMO_RABBIT_PORT (25772), DEMO_RABBIT_DIST_PORT (25773),
# DEMO_EPMD_PORT (24379). Peers already running in .peers/ keep the ports they have.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

PEERS=.peers
CONFIG=examples/relay.demo.yaml
ACCOUNT=acct_demo
LOG_KEY="relay:{$ACCOUNT}:log"
RELAY_LOG=$PEERS/relay.log
RELAY_PID=$PEERS/relay.pid
# A demo master key (Fetcher's APP_ENC_KEY, base64 of 32 bytes). Not a secret: never use it elsewhere.
DEMO_APP_ENC_KEY=cmVsYXktZGVtby1tYXN0ZXIta2V5LW5vdC1zZWNyZXQ=

export REDIS_PORT=${DEMO_REDIS_PORT:-16479}
export RABBIT_PORT=${DEMO_RABBIT_PORT:-25772}
export RABBIT_DIST_PORT=${DEMO_RABBIT_DIST_PORT:-25773}
export EPMD_PORT=${DEMO_EPMD_PORT:-24379}

say() { printf '\n==> %s\n' "$*"; }
die() {
	printf 'demo: %s\n' "$*" >&2
	exit 1
}

# alive PIDFILE NAME: the pid in PIDFILE runs and its command line mentions NAME.
alive() {
	[[ -s $1 ]] || return 1
	local pid
	pid=$(<"$1")
	[[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

# stop_relay PID: SIGTERM (the relay finishes the batch in hand), SIGKILL after 20 s.
stop_relay() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "demo: relay $pid ignored SIGTERM for 20 s; killing it" >&2
	kill -KILL "$pid" 2>/dev/null || true
}

relay_pid=
started_peers=0
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $relay_pid ]] && [[ $(cat "$RELAY_PID" 2>/dev/null) == "$relay_pid" ]]; then
		say "stopping the relay (pid $relay_pid)"
		stop_relay "$relay_pid"
		rm -f "$RELAY_PID"
	elif [[ -n $relay_pid ]]; then
		# Another demo restarted the relay: it uses these peers now, leave them to it.
		say "another demo took over the relay; leaving it and the peers running"
		exit "$rc"
	fi
	if ((started_peers)); then
		say "stopping the peers"
		scripts/peers.sh stop "$PEERS" || true
	elif [[ -n $relay_pid ]]; then
		say "the peers in $PEERS were running before this demo: left running (stop them: make peers-down)"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "peers: RabbitMQ and Redis from Debian packages (installed when missing)"
scripts/peers.sh install
if ! alive "$PEERS/redis.pid" redis-server || ! alive "$PEERS/rabbit.pid" rabbit; then
	started_peers=1
fi
peer_env=$(scripts/peers.sh start "$PEERS")
eval "$peer_env"
export RELAY_RABBITMQ_URL=$RELAY_TEST_AMQP_URL RELAY_REDIS_URL=$RELAY_TEST_REDIS_URL
redis_port=${RELAY_REDIS_URL##*:}
redis_port=${redis_port%%/*}
rcli() { redis-cli -p "$redis_port" "$@"; }

say "building bin/relay"
go build -o bin/relay ./cmd/relay
# The Worker holds APP_ENC_KEY; the relay only ever gets the external key derived from it.
FETCHER_EXTERNAL_HMAC_KEY=$(APP_ENC_KEY=$DEMO_APP_ENC_KEY bin/relay derive-key)
export FETCHER_EXTERNAL_HMAC_KEY
bin/relay check-config --config "$CONFIG"

if alive "$RELAY_PID" "relay serve"; then
	say "stopping the relay a previous demo left running (pid $(<"$RELAY_PID"))"
	stop_relay "$(<"$RELAY_PID")"
fi
[[ -f $RELAY_LOG ]] && mv -f "$RELAY_LOG" "$RELAY_LOG.1"
say "starting bin/relay serve --config $CONFIG (JSON logs in $RELAY_LOG)"
# setsid: Ctrl-C reaches this script, which stops the relay in order; the relay gets SIGTERM.
setsid bin/relay serve --config "$CONFIG" </dev/null >"$RELAY_LOG" 2>&1 &
relay_pid=$!
echo "$relay_pid" >"$RELAY_PID"
for ((i = 0; ; i++)); do
	grep -q '"msg":"consuming"' "$RELAY_LOG" && break
	if ! kill -0 "$relay_pid" 2>/dev/null || ((i >= 300)); then
		tail -n 30 "$RELAY_LOG" >&2
		die "the relay did not start consuming (log: $RELAY_LOG)"
	fi
	sleep 0.1
done
echo "relay $relay_pid is consuming"

# Only this run's entries are shown: the log keeps earlier runs' while Redis runs.
before=$(rcli XLEN "$LOG_KEY")
last_id=$(rcli XREVRANGE "$LOG_KEY" + - COUNT 1 | awk 'NR == 1')

say "publishing signed job events as the Fetcher Worker does (bin/relay publish)"
published=$PEERS/published.txt
: >"$published"
pub() {
	echo "-- relay publish $*"
	bin/relay publish --config "$CONFIG" "$@" | tee -a "$published"
}
pub --status completed --count 2
pub --status completed --store-id store-42
pub --status failed --count 2
pub --status completed --reemit # the same event twice: stored once
pub --status failed --tamper    # body changed after signing: quarantined
# Last, one more good event: the relay works in queue order, so once this one is in the
# log every message before it has been handled.
pub --status completed
want=$((before + 7))

for ((i = 0; ; i++)); do
	[[ $(rcli XLEN "$LOG_KEY") -ge $want ]] && break
	((i < 300)) || die "the log holds $(rcli XLEN "$LOG_KEY") events after 30 s, want $want (log: $RELAY_LOG)"
	kill -0 "$relay_pid" 2>/dev/null || die "the relay exited (log: $RELAY_LOG)"
	sleep 0.1
done

say "accepted: the account log $LOG_KEY ($((want - before)) new, $(rcli XLEN "$LOG_KEY") in all)"
start=-
[[ -n $last_id ]] && start="($last_id"
# XRANGE prints each entry as its id, then field and value lines: keep id, type and event id.
rcli XRANGE "$LOG_KEY" "$start" + | awk '
	function show() { if (id != "") printf "  %-17s  %-14s  %s\n", id, type, ev }
	state == 0                         { id = $0; state = 1; next }
	state == 1 && /^[0-9]+-[0-9]+$/    { show(); id = $0; type = ev = ""; next }
	state == 1                         { field = $0; state = 2; next }
	state == 2 { if (field == "type") type = $0; if (field == "event_id") ev = $0; state = 1 }
	END { show() }' | tee "$PEERS/accepted.txt"

reemitted=$(awk '{print $3}' "$published" | sort | uniq -d)
say "duplicate: the re-emit"
for ev in $reemitted; do
	echo "  $ev was published $(grep -c -- "$ev" "$published") times; the log holds it $(grep -c -- "$ev" "$PEERS/accepted.txt") time(s)"
done

say "quarantined (from the relay's log; the messages wait in relay.job-events.quarantine)"
grep '"msg":"message quarantined"' "$RELAY_LOG" |
	sed -e 's/.*"reason":"\([^"]*\)".*"detail":"\([^"]*\)".*"routing_key":"\([^"]*\)".*/  \3: \1 — \2/' ||
	echo "  nothing quarantined"

if [[ ${DEMO_EXIT:-} == 1 ]]; then
	say "DEMO_EXIT=1: done"
	exit 0
fi
stops="the relay"
((started_peers)) && stops="the relay and the peers"
cat <<EOF

==> everything is running; Ctrl-C stops $stops
  relay     pid $relay_pid, logs: tail -f $RELAY_LOG
  RabbitMQ  $RELAY_RABBITMQ_URL
  Redis     $RELAY_REDIS_URL   (redis-cli -p $redis_port XRANGE '$LOG_KEY' - +)
  publish more:
    RELAY_RABBITMQ_URL=$RELAY_RABBITMQ_URL RELAY_REDIS_URL=$RELAY_REDIS_URL \\
    FETCHER_EXTERNAL_HMAC_KEY=$FETCHER_EXTERNAL_HMAC_KEY \\
    bin/relay publish --config $CONFIG --status completed --count 10
EOF
wait "$relay_pid" || true
say "the relay exited (log: $RELAY_LOG)"
