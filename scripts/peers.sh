#!/usr/bin/env bash
# Starts and stops the relay's real peers (Redis 7, RabbitMQ 3.10) on loopback, with all
# their state under one directory, without Docker or systemd.
#
#   scripts/peers.sh install         apt-get the servers (and chromium for the console test, promtool) when missing,
#                                    npm-install kinesalite, the API document's checks (redocly, openapi-typescript, tsc)
#                                    and cfn-lint (the cards' CloudFormation templates)
#   eval "$(scripts/peers.sh start DIR)"   start both, print RELAY_TEST_* exports on stdout
#   scripts/peers.sh stop DIR        SIGTERM what start started and wait for it
#
# Ports (all below 32768, outside the kernel's ephemeral range): REDIS_PORT (16379),
# RABBIT_PORT (AMQP, 23672), RABBIT_DIST_PORT (23673), EPMD_PORT (24369): away from a
# distro broker's own 5672, 25672 and 4369.
# Only the export lines go to stdout; everything else goes to stderr.
set -euo pipefail

RABBIT_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
REDIS_PORT=${REDIS_PORT:-16379}
RABBIT_PORT=${RABBIT_PORT:-23672}
RABBIT_DIST_PORT=${RABBIT_DIST_PORT:-23673}
EPMD_PORT=${EPMD_PORT:-24369}
RABBIT_NODE=relay-ci@localhost
started=0 # set when this run starts a server

log() { echo "peers: $*" >&2; }
die() {
	log "$*"
	exit 1
}

usage() {
	echo "usage: $0 install | start DIR | stop DIR" >&2
	exit 2
}

# alive PIDFILE NAME: the pid in PIDFILE is a live (not zombie) process whose command line mentions NAME.
# The name check keeps a recycled pid from being taken for ours.
alive() {
	local pid state
	[[ -s $1 ]] || return 1
	pid=$(<"$1")
	[[ -r /proc/$pid/stat ]] || return 1
	state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ $state != Z ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

# running PIDFILE: the pid in PIDFILE is a live (not zombie) process, whatever its
# command line (right after fork it is still this script's, until exec).
running() {
	local pid state
	[[ -s $1 ]] || return 1
	pid=$(<"$1")
	state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ $state != Z ]]
}

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# need_free PORT...: fail when something already listens there, rather than take it for ours
# (a distro broker started by apt, for one, has its dist port on 25672).
need_free() {
	local p
	for p; do
		! port_open "$p" || die "127.0.0.1:$p is already in use; pick another port (see the top of $0)"
	done
}

# wait_port PORT PIDFILE NAME SECONDS LOG...: wait until PORT accepts, failing early (with the
# tail of each LOG) if the process died.
wait_port() {
	local port=$1 pidfile=$2 name=$3 limit=$4 deadline=$((SECONDS + $4)) why
	shift 4
	until port_open "$port"; do
		why=
		running "$pidfile" || why="exited before 127.0.0.1:$port opened"
		((SECONDS < deadline)) || why="did not open 127.0.0.1:$port within $limit s"
		if [[ -n $why ]]; then
			tail -n 40 "$@" >&2 || true
			die "$name $why (logs: $*)"
		fi
		sleep 0.1
	done
}

# stop_pid PIDFILE NAME: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
	local pidfile=$1 name=$2 deadline
	if alive "$pidfile" "$name"; then
		log "stopping $name (pid $(<"$pidfile"))"
		kill -TERM "$(<"$pidfile")" 2>/dev/null || true
		deadline=$((SECONDS + 30))
		while alive "$pidfile" "$name"; do
			if ((SECONDS >= deadline)); then
				log "$name ignored SIGTERM for 30 s; sending SIGKILL"
				kill -KILL "$(<"$pidfile")" 2>/dev/null || true
				sleep 0.5
				break
			fi
			sleep 0.1
		done
	fi
	rm -f "$pidfile"
}

cmd_install() {
	if command -v redis-server >/dev/null && test -x "$RABBIT_SERVER"; then
		log "rabbitmq-server and redis-server already installed"
	else
		log "installing rabbitmq-server and redis-server"
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server redis-server >&2
	fi
	if ! command -v npm >/dev/null; then
		log "installing nodejs and npm (for kinesalite)"
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm >&2
	fi
	if ! command -v chromium >/dev/null; then
		log "installing chromium (the console's browser test)"
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >&2
	fi
	# promtool checks and unit-tests deploy/monitoring's alert rules (no daemon starts).
	if ! command -v promtool >/dev/null; then
		log "installing prometheus (for promtool)"
		apt-get update >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus >&2
	fi
	# kinesalite, the Kinesis peer; internal/awstest finds it in this directory.
	local kdir=${KINESALITE_DIR:-$HOME/.cache/relay-test/kinesalite-3.3.3}
	if [[ ! -d $kdir/node_modules/kinesalite ]]; then
		log "installing kinesalite@3.3.3 into $kdir"
		mkdir -p "$kdir"
		npm install --no-audit --no-fund --no-save --prefix "$kdir" kinesalite@3.3.3 >&2
	fi
	# The API document's checks (internal/testpeer's APITool finds them here; bump the
	# directory's number with APIToolsVersion when a version changes): Redocly's lint, and
	# openapi-typescript and tsc for the console's modules typed by the document.
	local adir=${RELAY_API_TOOLS_DIR:-$HOME/.cache/relay-test/apitools-1}
	if [[ ! -x $adir/node_modules/.bin/redocly || ! -x $adir/node_modules/.bin/tsc || ! -x $adir/node_modules/.bin/openapi-typescript ]]; then
		log "installing @redocly/cli@2.77.0, openapi-typescript@7.13.0 and typescript@5.9.3 into $adir"
		mkdir -p "$adir"
		npm install --no-audit --no-fund --no-save --prefix "$adir" @redocly/cli@2.77.0 openapi-typescript@7.13.0 typescript@5.9.3 >&2
	fi
	# cfn-lint, the CloudFormation linter the cards' templates pass (internal/testpeer's
	# CfnLint finds it here; its version is testpeer.CfnLintVersion).
	local cdir=${RELAY_CFN_LINT_DIR:-$HOME/.cache/relay-test/cfn-lint-1.9.7}
	if [[ ! -x $cdir/node_modules/.bin/cfn-lint ]]; then
		log "installing cfn-lint@1.9.7 into $cdir"
		mkdir -p "$cdir"
		npm install --no-audit --no-fund --no-save --prefix "$cdir" cfn-lint@1.9.7 >&2
	fi
}

start_redis() {
	local dir=$1
	if alive "$dir/redis.pid" redis-server; then
		log "redis already running (pid $(<"$dir/redis.pid"))"
		return
	fi
	need_free "$REDIS_PORT"
	started=1
	mkdir -p "$dir/redis"
	# setsid: the server outlives this script and is not hit by the caller's terminal signals.
	setsid redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir/redis" --daemonize no --logfile '' \
		</dev/null >"$dir/redis.log" 2>&1 &
	echo $! >"$dir/redis.pid"
	wait_port "$REDIS_PORT" "$dir/redis.pid" redis-server 10 "$dir/redis.log"
	local i
	for ((i = 0; i < 100; i++)); do
		[[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && break
		sleep 0.05
	done
	((i < 100)) || die "redis on 127.0.0.1:$REDIS_PORT does not answer PING (log: $dir/redis.log)"
	log "redis ready on 127.0.0.1:$REDIS_PORT (pid $(<"$dir/redis.pid"))"
}

start_rabbit() {
	local dir=$1 r=$1/rabbit t0=$SECONDS
	if alive "$dir/rabbit.pid" rabbit; then
		log "rabbitmq already running (pid $(<"$dir/rabbit.pid"))"
		return
	fi
	need_free "$RABBIT_PORT" "$RABBIT_DIST_PORT"
	started=1
	mkdir -p "$r/mnesia" "$r/log"
	# Our own epmd first, so we own its pid; the broker would otherwise start an unowned one.
	if ! alive "$dir/epmd.pid" epmd; then
		need_free "$EPMD_PORT"
		setsid epmd -address 127.0.0.1 -port "$EPMD_PORT" </dev/null >"$dir/epmd.log" 2>&1 &
		echo $! >"$dir/epmd.pid"
		wait_port "$EPMD_PORT" "$dir/epmd.pid" epmd 10 "$dir/epmd.log"
	fi
	printf 'loopback_users = none\nlisteners.tcp.1 = 127.0.0.1:%s\n' "$RABBIT_PORT" >"$r/rabbitmq.conf"
	echo '[rabbitmq_consistent_hash_exchange].' >"$r/enabled_plugins" # rabbitmq.partitions uses it
	: >"$r/rabbitmq-env.conf"
	# RABBITMQ_ALLOW_INPUT makes the script exec the Erlang VM in place of its signal-forwarding
	# shell, so the pid we record is the broker itself; -noinput keeps it off stdin.
	# The /usr/sbin wrapper would switch to the rabbitmq user, hence the direct path.
	HOME=$r \
		RABBITMQ_NODENAME=$RABBIT_NODE \
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT=$RABBIT_PORT \
		RABBITMQ_DIST_PORT=$RABBIT_DIST_PORT \
		ERL_EPMD_PORT=$EPMD_PORT \
		ERL_EPMD_ADDRESS=127.0.0.1 \
		RABBITMQ_MNESIA_BASE=$r/mnesia \
		RABBITMQ_LOG_BASE=$r/log \
		RABBITMQ_CONFIG_FILE=$r/rabbitmq.conf \
		RABBITMQ_ENABLED_PLUGINS_FILE=$r/enabled_plugins \
		RABBITMQ_CONF_ENV_FILE=$r/rabbitmq-env.conf \
		RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}' \
		RABBITMQ_ALLOW_INPUT=true \
		setsid "$RABBIT_SERVER" -noinput </dev/null >"$dir/rabbit.log" 2>&1 &
	echo $! >"$dir/rabbit.pid"
	wait_port "$RABBIT_PORT" "$dir/rabbit.pid" rabbit 60 "$dir/rabbit.log" "$r/log/$RABBIT_NODE.log"
	log "rabbitmq ready on 127.0.0.1:$RABBIT_PORT after $((SECONDS - t0)) s (pid $(<"$dir/rabbit.pid"))"
}

cmd_start() {
	local dir
	mkdir -p "$1"
	dir=$(cd "$1" && pwd)
	command -v redis-server >/dev/null || die "redis-server not installed (run: $0 install)"
	test -x "$RABBIT_SERVER" || die "rabbitmq-server not installed (run: $0 install)"
	start_redis "$dir"
	start_rabbit "$dir"
	# A second start on running peers reprints what the first one wrote.
	if ((started)) || [[ ! -s $dir/env ]]; then
		printf 'export RELAY_TEST_REDIS_URL=redis://127.0.0.1:%s/0\nexport RELAY_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:%s/\n' \
			"$REDIS_PORT" "$RABBIT_PORT" >"$dir/env"
	fi
	cat "$dir/env"
}

cmd_stop() {
	local dir=$1
	[[ -d $dir ]] || {
		log "nothing to stop in $dir"
		return
	}
	stop_pid "$dir/rabbit.pid" rabbit
	stop_pid "$dir/redis.pid" redis-server
	stop_pid "$dir/epmd.pid" epmd
	rm -f "$dir/env"
	log "stopped peers in $dir"
}

case ${1:-} in
install) cmd_install ;;
start) [[ $# -eq 2 ]] || usage; cmd_start "$2" ;;
stop) [[ $# -eq 2 ]] || usage; cmd_stop "$2" ;;
*) usage ;;
esac
