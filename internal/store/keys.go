package store

// Every key of one account carries the hash tag {acct}, so one account lives in one
// Redis Cluster slot and its multi-key scripts stay legal there.

func logKey(acct string) string        { return "relay:{" + acct + "}:log" }
func seenKey(acct, ceID string) string { return "relay:{" + acct + "}:seen:" + ceID }
func destKey(acct, id string) string   { return "relay:{" + acct + "}:dest:" + id }
func leaseKey(acct, id string) string  { return "relay:{" + acct + "}:lease:" + id }
func attemptsKey(acct, id string) string {
	return "relay:{" + acct + "}:attempts:" + id
}

// outboxKey is the account's outbox: operator events waiting to be published (a stream
// read through the consumer group outboxGroup).
func outboxKey(acct string) string { return "relay:{" + acct + "}:outbox" }

// chanKey and chanSeqKey hold a channel's events and its sequence counter.
func chanKey(acct, channel string) string    { return "relay:{" + acct + "}:chan:" + channel }
func chanSeqKey(acct, channel string) string { return "relay:{" + acct + "}:chan:" + channel + ":seq" }

// DestinationChannel and AccountChannel name the two kinds of channel.
func DestinationChannel(id string) string { return "destination:" + id }
func AccountChannel(acct string) string   { return "account:" + acct }

// replicasKey is the set of live replicas (score: last heartbeat, ms).
const replicasKey = "relay:replicas"
