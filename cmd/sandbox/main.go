// Command sandbox is a local stand-in for the customers' side of the clouds, for
// `make demo` and for trying the relay by hand. On 127.0.0.1 only, it serves:
//
//   - STS (AssumeRole) that enforces each role's trust policy, ExternalId included
//     (internal/awstest): a role trusts nobody until IAM's CreateRole or POST /trust
//     gives it a trust policy;
//   - EventBridge (PutEvents) that takes a write only when it is signed with a live
//     session that STS handed out;
//   - Google Pub/Sub (pstest, plain gRPC): topics with labels, as the customer made them;
//   - Kinesis: a front for a kinesalite started separately, taking PutRecord only with a
//     live STS session, like EventBridge; everything else passes straight through;
//   - IAM (iam.go): CreateRole, PutRolePolicy and a few more on the Query API the AWS CLI
//     speaks; STS then enforces the role's trust policy, and the buses let a session of the
//     role write only what its permissions policy allows;
//
// and an admin HTTP API (JSON) for what the customer does in their own cloud, and to see
// what each bus took:
//
//	POST /trust   {"role_arn","external_id"}           a role's trust policy, set without IAM
//	POST /topics  {"project","topic","labels":{…}}     a topic with labels, and a subscription the sandbox reads
//	POST /streams {"name"}                             a one-shard Kinesis stream, ACTIVE when answered
//	GET  /arrived                                      everything each bus took so far, in order
//	GET  /arrived?view=text                            the same, one line per event, for people
//
// With --latency (or $SANDBOX_LATENCY), the buses answer late, as a customer's bus in
// another region would: "100ms" for all three, or "eventbridge=100ms,kinesis=20ms,pubsub=250ms"
// for each (latency.go). The admin API and STS always answer at once.
//
// It prints its addresses on start and stops on SIGINT or SIGTERM. Nothing is stored: a
// new sandbox starts empty.
//
//	sandbox --kinesalite http://127.0.0.1:24584   (see sandbox --help for the listen addresses)
//
// `sandbox aws iam create-role …` (awscli.go) stands in for the AWS CLI where it is not
// installed: it sends a card's IAM commands, split as the shell split them, to the
// sandbox's IAM as the AWS CLI would; `sandbox card aws_cli < card.json` prints a card's
// commands, each ended by a NUL, for a shell to run them as they are (scripts/demo.sh).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if len(os.Args) > 1 && os.Args[1] == "aws" { // the AWS CLI's IAM commands (awscli.go)
		code := awsCLI(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "card" { // a card's commands, for a shell to run (demo.sh)
		code := cardLines(os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(1)
	}
}
