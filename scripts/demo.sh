#!/usr/bin/env bash
# The relay end to end on local peers and a local cloud: starts RabbitMQ and Redis in
# .peers/ (installing them, and kinesalite, when missing), a local cloud sandbox
# (bin/sandbox: IAM, STS that enforces each role's trust policy and ExternalId, EventBridge,
# Pub/Sub, Kinesis on kinesalite), then `relay serve` with examples/relay.sandbox.yaml: one
# account, one EventBridge bus, one Kinesis stream, one Pub/Sub topic. It does the
# customer's side of the setup (the stream, the labelled topic, and each AWS role made by
# running its card's own AWS CLI commands against the sandbox's IAM), publishes signed job
# events the way the Fetcher Worker does (good ones, a re-emit, a tampered one), and shows
# what the relay accepted, what it quarantined, each destination's card and what arrived
# in each bus. It mints a console sign-in link for the demo account, printed first among
# the things to try: the customer's Connectors page, each card's setup as tabs, Send a
# test. Then it keeps everything running until Ctrl-C, and stops every process it started.
#
#   make demo                  (or scripts/demo.sh)
#   DEMO_EXIT=1 make demo      show the results and exit: for scripts and CI
#
# Run it again at any time: running peers are reused; the relay, the sandbox and
# kinesalite a previous run left behind are stopped and started afresh.
# Ports (below 32768, away from peers.sh's defaults so a test run can go on beside it):
# DEMO_REDIS_PORT (16479), DEMO_RABBIT_PORT (25772), DEMO_RABBIT_DIST_PORT (25773),
# DEMO_EPMD_PORT (24379). Peers already running in .peers/ keep the ports they have.
# The sandbox's ports are the ones examples/relay.sandbox.yaml names: STS 24580,
# EventBridge 24581, Pub/Sub 24582, sandbox admin 24583, kinesalite 24584, Kinesis 24585;
# and the sandbox's IAM (which only the customer's commands call) 24586. The relay's API
# and console listen on 127.0.0.1:8080.
# The card's AWS CLI commands run with the AWS CLI when it is installed, otherwise with
# `bin/sandbox aws`, which takes the same arguments and sends IAM the same request
# (DEMO_AWS_CLI=sandbox: always bin/sandbox aws). Either way only the sandbox is called.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

PEERS=.peers
CONFIG=examples/relay.sandbox.yaml
ACCOUNT=acct_demo
LOG_KEY="relay:{$ACCOUNT}:log"
RELAY_LOG=$PEERS/relay.log
RELAY_PID=$PEERS/relay.pid
SANDBOX_LOG=$PEERS/sandbox.log
SANDBOX_PID=$PEERS/sandbox.pid
KINESALITE_LOG=$PEERS/kinesalite.log
KINESALITE_PID=$PEERS/kinesalite.pid
KINESALITE_DIR=${KINESALITE_DIR:-$HOME/.cache/relay-test/kinesalite-3.3.3} # where peers.sh install puts it
# The sandbox's ports, as the config names them.
STS_PORT=24580 EVENTS_PORT=24581 PUBSUB_PORT=24582 SANDBOX_PORT=24583 KINESALITE_PORT=24584 KINESIS_PORT=24585
IAM_PORT=24586
SANDBOX=http://127.0.0.1:$SANDBOX_PORT
IAM=http://127.0.0.1:$IAM_PORT
API=http://127.0.0.1:8080
# A demo master key (Fetcher's APP_ENC_KEY, base64 of 32 bytes). Not a secret: never use it elsewhere.
DEMO_APP_ENC_KEY=cmVsYXktZGVtby1tYXN0ZXIta2V5LW5vdC1zZWNyZXQ=
# The demo's identity.external_id_secret: it derives each AWS destination's ExternalId,
# so the ids stay the same across runs and an emptied Redis. Fixed, like the master key
# above, and not a secret: generate yours with openssl rand -hex 32 and keep it forever.
DEMO_EXTERNAL_ID_SECRET=relay-demo-external-id-secret-not-a-secret-0001
# The destinations of the config: id, connector, and what the customer made on their side.
AWS_DESTS="orders-bus:eventbridge orders-stream:kinesis"
ALL_DESTS="orders-bus:eventbridge orders-stream:kinesis orders-topic:pubsub"

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

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# stop_pid PID NAME: SIGTERM (the relay finishes the batch in hand), SIGKILL after 20 s.
stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "demo: $2 $pid ignored SIGTERM for 20 s; killing it" >&2
	kill -KILL "$pid" 2>/dev/null || true
}
stop_relay() { stop_pid "$1" relay; }

# stop_stale PIDFILE NAME: stop what a previous demo left running.
stop_stale() {
	if alive "$1" "$2"; then
		say "stopping the $2 a previous demo left running (pid $(<"$1"))"
		stop_pid "$(<"$1")" "$2"
	fi
	rm -f "$1"
}

# need_free NAME PORT...: fail when something else listens there.
need_free() {
	local name=$1 p
	shift
	for p; do
		! port_open "$p" || die "127.0.0.1:$p, which the $name needs (see $CONFIG), is taken by another process: stop it and run the demo again"
	done
}

# wait_for WHAT SECONDS PID LOG CMD...: run CMD every 0.1 s until it succeeds; fail with
# the tail of LOG when PID exits or SECONDS pass.
wait_for() {
	local what=$1 limit=$2 pid=$3 log=$4 i
	shift 4
	for ((i = 0; ; i++)); do
		"$@" && return 0
		if ! kill -0 "$pid" 2>/dev/null || ((i >= limit * 10)); then
			tail -n 30 "$log" >&2
			die "$what (log: $log)"
		fi
		sleep 0.1
	done
}

# api GET|POST PATH: the relay's operator API with the admin token.
api() { curl -sS --max-time 10 -X "$1" -H "Authorization: Bearer $RELAY_ADMIN_TOKEN" "$API$2"; }
# sandbox_post PATH JSON: the sandbox's admin API; fails on an error answer.
sandbox_post() { curl -sS --fail-with-body --max-time 30 -X POST -H 'Content-Type: application/json' -d "$2" "$SANDBOX$1"; }
# field NAME: the first "NAME": "value" of the JSON on stdin (values here hold no quotes).
field() { sed -n "s/.*\"$1\" *: *\"\\([^\"]*\\)\".*/\\1/p" | head -n 1; }
# pretty: indent the JSON on stdin when python3 is there; as it is otherwise.
pretty() {
	if command -v python3 >/dev/null; then python3 -m json.tool; else cat; echo; fi
}

relay_pid= sandbox_pid= kinesalite_pid=
put_policy_cmd=
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
		say "another demo took over the relay; leaving it, the sandbox and the peers running"
		exit "$rc"
	fi
	if [[ -n $sandbox_pid ]] && [[ $(cat "$SANDBOX_PID" 2>/dev/null) == "$sandbox_pid" ]]; then
		say "stopping the sandbox (pid $sandbox_pid)"
		stop_pid "$sandbox_pid" sandbox
		rm -f "$SANDBOX_PID"
	fi
	if [[ -n $kinesalite_pid ]] && [[ $(cat "$KINESALITE_PID" 2>/dev/null) == "$kinesalite_pid" ]]; then
		say "stopping kinesalite (pid $kinesalite_pid)"
		stop_pid "$kinesalite_pid" kinesalite
		rm -f "$KINESALITE_PID"
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

say "peers: RabbitMQ and Redis from Debian packages, kinesalite from npm (installed when missing)"
scripts/peers.sh install
if ! alive "$PEERS/redis.pid" redis-server || ! alive "$PEERS/rabbit.pid" rabbit; then
	started_peers=1
fi
if ! peer_env=$(scripts/peers.sh start "$PEERS"); then
	# peers.sh can look at a server in the instant between its fork and its exec, find no
	# "rabbit" in the command line, and report that it exited while it is in fact starting.
	# Once more: a server that runs now is kept, one that really died is started again.
	say "peers.sh start failed; trying once more"
	sleep 1
	peer_env=$(scripts/peers.sh start "$PEERS")
fi
eval "$peer_env"
export RELAY_RABBITMQ_URL=$RELAY_TEST_AMQP_URL RELAY_REDIS_URL=$RELAY_TEST_REDIS_URL
redis_port=${RELAY_REDIS_URL##*:}
redis_port=${redis_port%%/*}
amqp_port=${RELAY_RABBITMQ_URL##*:}
amqp_port=${amqp_port%%/*}
# A broker peers.sh found already running may still be booting: wait for its AMQP port.
for ((i = 0; i < 600; i++)); do
	port_open "$amqp_port" && break
	sleep 0.1
done
port_open "$amqp_port" || die "RabbitMQ does not accept connections on 127.0.0.1:$amqp_port after 60 s (log: $PEERS/rabbit.log)"
rcli() { redis-cli -p "$redis_port" "$@"; }

say "building bin/relay and bin/sandbox"
go build -o bin/relay ./cmd/relay
go build -o bin/sandbox ./cmd/sandbox
# The Worker holds APP_ENC_KEY; the relay only ever gets the external key derived from it.
FETCHER_EXTERNAL_HMAC_KEY=$(APP_ENC_KEY=$DEMO_APP_ENC_KEY bin/relay derive-key)
# The API's bearer tokens: new ones each run.
RELAY_ADMIN_TOKEN=demo-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
RELAY_DEMO_ACCOUNT_TOKEN=demo-acct-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
RELAY_EXTERNAL_ID_SECRET=$DEMO_EXTERNAL_ID_SECRET
export FETCHER_EXTERNAL_HMAC_KEY RELAY_ADMIN_TOKEN RELAY_DEMO_ACCOUNT_TOKEN RELAY_EXTERNAL_ID_SECRET
if ! checked=$(bin/relay check-config --config "$CONFIG" 2>&1); then
	printf '%s\n' "$checked"
	# A Redis in .peers from a demo run before the ExternalId secret holds random ids.
	grep -q 'but the relay issued' <<<"$checked" &&
		die "the demo's Redis holds ExternalIds from a run before identity.external_id_secret: empty it (redis-cli -p $redis_port FLUSHALL) and run again"
	die "check-config refused $CONFIG"
fi
printf '%s\n' "$checked"

# A second run: what the first one left running goes first, so the ports are free again.
if alive "$RELAY_PID" "relay serve"; then
	say "stopping the relay a previous demo left running (pid $(<"$RELAY_PID"))"
	stop_relay "$(<"$RELAY_PID")"
fi
stop_stale "$SANDBOX_PID" sandbox
stop_stale "$KINESALITE_PID" kinesalite

say "the local cloud: kinesalite and bin/sandbox (logs in $PEERS/)"
need_free kinesalite "$KINESALITE_PORT"
need_free sandbox "$STS_PORT" "$EVENTS_PORT" "$PUBSUB_PORT" "$SANDBOX_PORT" "$KINESIS_PORT" "$IAM_PORT"
need_free "relay's API" 8080
need_free "relay's metrics" 9090
[[ -f $KINESALITE_DIR/node_modules/kinesalite/package.json ]] || die "kinesalite is not in $KINESALITE_DIR (run: scripts/peers.sh install)"
# The library call binds loopback only (its CLI would bind every interface).
setsid node -e "require('$KINESALITE_DIR/node_modules/kinesalite')({createStreamMs: 50}).listen($KINESALITE_PORT, '127.0.0.1')" \
	</dev/null >"$KINESALITE_LOG" 2>&1 &
kinesalite_pid=$!
echo "$kinesalite_pid" >"$KINESALITE_PID"
wait_for "kinesalite did not open 127.0.0.1:$KINESALITE_PORT" 20 "$kinesalite_pid" "$KINESALITE_LOG" port_open "$KINESALITE_PORT"
setsid bin/sandbox --sts "127.0.0.1:$STS_PORT" --events "127.0.0.1:$EVENTS_PORT" --pubsub-port "$PUBSUB_PORT" \
	--admin "127.0.0.1:$SANDBOX_PORT" --kinesis "127.0.0.1:$KINESIS_PORT" --kinesalite "http://127.0.0.1:$KINESALITE_PORT" \
	--iam "127.0.0.1:$IAM_PORT" \
	</dev/null >"$SANDBOX_LOG" 2>&1 &
sandbox_pid=$!
echo "$sandbox_pid" >"$SANDBOX_PID"
wait_for "the sandbox did not start" 20 "$sandbox_pid" "$SANDBOX_LOG" grep -q 'sandbox: ready' "$SANDBOX_LOG"
sed -e 's/^/  /' "$SANDBOX_LOG"

say "the customer's side: a Kinesis stream, and a Pub/Sub topic labelled for $ACCOUNT (sandbox admin API)"
echo "-- POST $SANDBOX/streams"
sandbox_post /streams '{"name": "orders"}'
echo "-- POST $SANDBOX/topics"
sandbox_post /topics '{"project": "relay-demo", "topic": "relay-events", "labels": {"mercamap-account": "'$ACCOUNT'"}}'

[[ -f $RELAY_LOG ]] && mv -f "$RELAY_LOG" "$RELAY_LOG.1"
say "starting bin/relay serve --config $CONFIG (JSON logs in $RELAY_LOG)"
# Our own AWS identity: any static keys do for the sandbox. No instance metadata lookups.
# setsid: Ctrl-C reaches this script, which stops the relay in order; the relay gets SIGTERM.
AWS_ACCESS_KEY_ID=AKIDDEMORELAY AWS_SECRET_ACCESS_KEY=demo-not-a-secret AWS_EC2_METADATA_DISABLED=true \
	setsid bin/relay serve --config "$CONFIG" </dev/null >"$RELAY_LOG" 2>&1 &
relay_pid=$!
echo "$relay_pid" >"$RELAY_PID"
wait_for "the relay did not start consuming" 30 "$relay_pid" "$RELAY_LOG" grep -q '"msg":"consuming"' "$RELAY_LOG"
echo "relay $relay_pid is consuming"
# The operator API: wait for /readyz when the relay serves it.
have_api=0
for ((i = 0; i < 100; i++)); do
	if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$API/readyz") == 200 ]]; then
		have_api=1
		break
	fi
	# Not listening at all a few seconds after consuming: this relay does not serve the API.
	((i < 30)) || port_open 8080 || break
	sleep 0.1
done
if ((have_api)); then
	echo "operator API ready: $API/readyz"
else
	echo "the operator API ($API) is not served by this relay build: the ExternalIds are read from Redis instead"
fi

# aws: the customer's AWS CLI, called only on the sandbox's IAM (--endpoint-url, which
# every version of it takes), with the customer's (dummy) keys and none of this machine's
# AWS settings. Where it is not installed, bin/sandbox aws: the same arguments, the same
# request. Either way the shell has split the card's line, as the customer's would.
aws_cli=sandbox
if [[ ${DEMO_AWS_CLI:-} != sandbox ]] && command -v aws >/dev/null && aws --version >/dev/null 2>&1; then
	aws_cli=$(command -v aws)
fi
aws() {
	if [[ $aws_cli == sandbox ]]; then
		AWS_ACCESS_KEY_ID=AKIDDEMOCUSTOMER AWS_SECRET_ACCESS_KEY=demo-not-a-secret bin/sandbox aws --endpoint-url "$IAM" "$@"
	else
		env -u AWS_PROFILE -u AWS_SESSION_TOKEN -u AWS_ENDPOINT_URL AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null \
			AWS_ACCESS_KEY_ID=AKIDDEMOCUSTOMER AWS_SECRET_ACCESS_KEY=demo-not-a-secret AWS_DEFAULT_REGION=us-east-1 \
			AWS_PAGER= AWS_MAX_ATTEMPTS=1 "$aws_cli" --endpoint-url "$IAM" "$@"
	fi
}
if ((have_api)); then
	if [[ $aws_cli == sandbox ]]; then
		say "the customer makes each AWS role with its card's AWS CLI commands (setup.aws_cli), run by bin/sandbox aws (the AWS CLI's stand-in) against the sandbox's IAM"
	else
		say "the customer makes each AWS role with its card's AWS CLI commands (setup.aws_cli), run by $("$aws_cli" --version 2>&1 | cut -d' ' -f1) against the sandbox's IAM"
	fi
else
	say "the customer pastes each AWS card's trust policy onto their role (sandbox POST /trust)"
fi
for d in $AWS_DESTS; do
	id=${d%%:*} connector=${d#*:}
	cmds=()
	if ((have_api)); then
		card=$(api GET "/v1/connectors/$connector/destinations/$id")
		external_id=$(field external_id <<<"$card")
		role=$(field role_arn <<<"$card")
		mapfile -d '' cmds < <(bin/sandbox card aws_cli <<<"$card")
	else
		external_id=$(rcli HGET "relay:{$ACCOUNT}:dest:$id" external_id)
		role=$(sed -n "/id: $id\$/,/role_arn:/s/.*role_arn: *\\([^ ]*\\).*/\\1/p" "$CONFIG")
	fi
	[[ -n $external_id && -n $role ]] || die "no ExternalId or role for $id (card: ${card:-none})"
	if ((${#cmds[@]} == 0)); then
		# A relay whose cards have no AWS CLI commands: the trust policy, set directly.
		echo "-- $id: $role trusts ExternalId $external_id"
		sandbox_post /trust '{"role_arn": "'"$role"'", "external_id": "'"$external_id"'"}' >/dev/null
		continue
	fi
	echo "-- $id ($role, ExternalId $external_id): the card's ${#cmds[@]} commands, as the customer pastes them"
	for cmd in "${cmds[@]}"; do
		printf '  $ %s\n' "$cmd"
		# Of what the CLI prints (create-role: the role as JSON), its ARN.
		eval "$cmd" </dev/null | sed -n -e 's/^ *"Arn": *"\(.*\)",*$/    made \1/p' || die "$id: the card's command failed: $cmd"
	done
	if [[ -z $put_policy_cmd ]]; then
		put_policy_cmd=$(printf '%s\n' "${cmds[@]}" | grep -m1 -e ' put-role-policy ' || true)
	fi
done
# What the sandbox's IAM made of them: whom each role trusts, what it may write.
grep -e 'sandbox: iam: ' "$SANDBOX_LOG" | sed -e 's/^sandbox: /  /' || true

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
pub --status completed --count 2 --store-id store-42
pub --status completed --store-id store-7
pub --status failed --count 2
pub --status completed --store-id store-42 --reemit # the same event twice: stored once
pub --status failed --tamper                        # body changed after signing: quarantined
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

# Every destination takes every event: each bus gets this run's 7 (and any backlog an
# earlier run's relay left in Redis). The sandbox is new each run, so it counts from 0.
arrived_count() { curl -sS --max-time 10 "$SANDBOX/arrived?view=text" | sed -n "s|^$1: \\([0-9]*\\) .*|\\1|p" || true; }
for ((i = 0; ; i++)); do
	eb=$(arrived_count EventBridge) ki=$(arrived_count Kinesis) ps=$(arrived_count Pub/Sub)
	((eb >= 7 && ki >= 7 && ps >= 7)) && break
	if ((i >= 300)); then
		curl -sS "$SANDBOX/arrived?view=text" >&2
		grep '"msg":"delivery attempt"' "$RELAY_LOG" | grep -v '"class":"delivered"' | tail -n 5 >&2 || true
		die "after 30 s the buses hold $eb (EventBridge), $ki (Kinesis), $ps (Pub/Sub) events, want 7 each (log: $RELAY_LOG)"
	fi
	kill -0 "$relay_pid" 2>/dev/null || die "the relay exited (log: $RELAY_LOG)"
	sleep 0.1
done

say "the destinations' cards"
if ((have_api)) && bin/relay destinations --help >/dev/null 2>&1; then
	echo "-- relay destinations list --token env:RELAY_ADMIN_TOKEN"
	bin/relay destinations list --token env:RELAY_ADMIN_TOKEN
	for d in $ALL_DESTS; do
		printf '\n-- relay destinations show %s --token env:RELAY_ADMIN_TOKEN\n' "${d%%:*}"
		bin/relay destinations show "${d%%:*}" --token env:RELAY_ADMIN_TOKEN
	done
elif ((have_api)); then
	for d in $ALL_DESTS; do
		echo "-- GET $API/v1/connectors/${d#*:}/destinations/${d%%:*}"
		api GET "/v1/connectors/${d#*:}/destinations/${d%%:*}" | pretty
	done
else
	echo "  (no API in this relay build: each destination's stored state, from Redis)"
	for d in $ALL_DESTS; do
		echo "-- ${d%%:*} (${d#*:}): redis-cli HGETALL 'relay:{$ACCOUNT}:dest:${d%%:*}'"
		rcli HGETALL "relay:{$ACCOUNT}:dest:${d%%:*}" | paste - - | grep -v -e '^fingerprint' -e '^lease' | sed -e 's/^/  /'
	done
fi

say "arrived in each bus (sandbox: curl '$SANDBOX/arrived?view=text'; JSON without ?view=text)"
curl -sS --max-time 10 "$SANDBOX/arrived?view=text"

# The customer's page: a console sign-in link for the demo account, good once.
signin_link=
if ((have_api)) && bin/relay sign-in-link --help >/dev/null 2>&1; then
	say "the customer's console: a sign-in link for $ACCOUNT (bin/relay sign-in-link $ACCOUNT --token env:RELAY_ADMIN_TOKEN)"
	if minted=$(bin/relay sign-in-link "$ACCOUNT" --token env:RELAY_ADMIN_TOKEN 2>&1); then
		signin_link=$(head -n 1 <<<"$minted")
	fi
	printf '%s\n' "$minted" | sed -e 's/^/  /'
fi

if [[ ${DEMO_EXIT:-} == 1 ]]; then
	say "DEMO_EXIT=1: done"
	exit 0
fi
stops="the relay, the sandbox and kinesalite"
((started_peers)) && stops="the relay, the sandbox, kinesalite and the peers"
cli=
bin/relay destinations --help >/dev/null 2>&1 && cli="
    bin/relay destinations list --token env:RELAY_ADMIN_TOKEN
    bin/relay destinations show orders-stream --token env:RELAY_ADMIN_TOKEN"
bin/relay watch --help >/dev/null 2>&1 && cli="$cli
    bin/relay watch destination:orders-bus --token env:RELAY_ADMIN_TOKEN     (follow a channel; in another terminal)"
console=
[[ -n $signin_link ]] && console="
  the customer's console, signed in as $ACCOUNT by this link (good once, within 5 minutes):
    $signin_link
    it opens on the Connectors page: each card's setup as tabs (Policies, CloudFormation, Terraform,
    AWS CLI; gcloud and Terraform for Pub/Sub), each with Copy, and Send a test after them. Another link:
    RELAY_ADMIN_TOKEN=$RELAY_ADMIN_TOKEN bin/relay sign-in-link $ACCOUNT --token env:RELAY_ADMIN_TOKEN"
unpolicy=
if [[ -n $put_policy_cmd ]]; then
	# The role and policy the card's put-role-policy names, split as the shell splits it.
	names=$(
		eval "set -- $put_policy_cmd"
		while (($#)); do
			case $1 in --role-name | --policy-name) printf ' %s %s' "$1" "$2" && shift ;; esac
			shift
		done
	)
	unpolicy="
  the customer takes the permissions policy off the role (the sandbox's IAM); a test is then refused, and
  the card's put-role-policy command (its AWS CLI tab) mends it:
    bin/sandbox aws iam delete-role-policy$names
    curl -s -X POST -H \"Authorization: Bearer \$RELAY_ADMIN_TOKEN\" $API/v1/connectors/eventbridge/destinations/orders-bus/test"
fi
cat <<EOF

==> everything is running; try:$console
  the cards (operator API, admin token):
    export RELAY_ADMIN_TOKEN=$RELAY_ADMIN_TOKEN
    curl -s -H "Authorization: Bearer \$RELAY_ADMIN_TOKEN" $API/v1/connectors
    curl -s -H "Authorization: Bearer \$RELAY_ADMIN_TOKEN" $API/v1/connectors/eventbridge/destinations/orders-bus
    curl -s -X POST -H "Authorization: Bearer \$RELAY_ADMIN_TOKEN" $API/v1/connectors/kinesis/destinations/orders-stream/test
    curl -s -X POST -H "Authorization: Bearer \$RELAY_ADMIN_TOKEN" $API/v1/connectors/pubsub/destinations/orders-topic/pause$cli
  the customer's token (account:$ACCOUNT) sees only its own destinations: $RELAY_DEMO_ACCOUNT_TOKEN
  what each bus took:   curl -s '$SANDBOX/arrived?view=text'    (JSON: $SANDBOX/arrived)
  the customer breaks the role's trust policy; "send a test" (a fresh probe and session) then says what is wrong:
    curl -s -X POST -d '{"role_arn":"arn:aws:iam::111122223333:role/mercamap-delivery","external_id":"not-yours"}' $SANDBOX/trust
    curl -s -X POST -H "Authorization: Bearer \$RELAY_ADMIN_TOKEN" $API/v1/connectors/eventbridge/destinations/orders-bus/test
    and mends it with the ExternalId on the card: POST the same to $SANDBOX/trust with "external_id":"<the card's>"$unpolicy
  publish more:
    RELAY_RABBITMQ_URL=$RELAY_RABBITMQ_URL FETCHER_EXTERNAL_HMAC_KEY=$FETCHER_EXTERNAL_HMAC_KEY \\
    RELAY_REDIS_URL=$RELAY_REDIS_URL RELAY_ADMIN_TOKEN=\$RELAY_ADMIN_TOKEN RELAY_DEMO_ACCOUNT_TOKEN=$RELAY_DEMO_ACCOUNT_TOKEN \\
    RELAY_EXTERNAL_ID_SECRET=$RELAY_EXTERNAL_ID_SECRET \\
    bin/relay publish --config $CONFIG --status completed --store-id store-42 --count 10
  logs: $RELAY_LOG, $SANDBOX_LOG, $KINESALITE_LOG
  Ctrl-C stops $stops
EOF
wait "$relay_pid" || true
say "the relay exited (log: $RELAY_LOG)"
