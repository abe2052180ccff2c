package store

import "strings"

// Every key of one account carries the hash tag {acct}, so one account lives in one
// Redis Cluster slot and its multi-key scripts stay legal there.

func logKey(acct string) string        { return "relay:{" + acct + "}:log" }
func seenKey(acct, ceID string) string { return "relay:{" + acct + "}:seen:" + ceID }

// posKey is the account's position hash: n, the ordinal of the log's newest entry (one
// per entry appended since the index began). ordKey is the ordinal index: under each
// log entry's id, its ordinal k.
func posKey(acct string) string      { return "relay:{" + acct + "}:pos" }
func ordKey(acct string) string      { return "relay:{" + acct + "}:ord" }
func destKey(acct, id string) string { return "relay:{" + acct + "}:dest:" + id }

// holdersKey is the account's lease holders: a hash of owner → "gen|expiry" (lease.go).
func holdersKey(acct string) string { return "relay:{" + acct + "}:holders" }
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

// replicasKey is the set of live replicas (score: last heartbeat, ms). It belongs to no
// account, so it carries a tag of its own: its slot is its own, not some account's.
const replicasKey = "relay:{replicas}"

// slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag (the part
// between the first { and the next }, when not empty) or of the whole key, mod 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
