package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// The command line: run reads the flags (and $SANDBOX_KINESALITE, $SANDBOX_LATENCY)
// into options, checks them (every address on loopback, an account id, a port) and
// serves (sandbox.go).

// options are the command line.
type options struct {
	sts, events, kinesis, admin string // listen addresses, loopback only
	iam                         string // listen address of IAM (iam.go)
	iamAccount                  string // the customer's AWS account, where IAM makes roles
	pubsubPort                  int
	kinesalite                  string // upstream endpoint; "" serves no Kinesis
	latency                     string // --latency, read into buses by run
	buses                       busLatency
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.sts, "sts", "127.0.0.1:24580", "listen address of STS (the relay's aws.endpoints.sts)")
	fs.StringVar(&o.events, "events", "127.0.0.1:24581", "listen address of EventBridge (aws.endpoints.events)")
	fs.IntVar(&o.pubsubPort, "pubsub-port", 24582, "port of Pub/Sub (pstest, plain gRPC) on 127.0.0.1 (gcp.pubsub_endpoint); 0 picks one")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:24583", "listen address of the admin API")
	fs.StringVar(&o.iam, "iam", "127.0.0.1:0", "listen address of IAM (CreateRole, PutRolePolicy…: what `sandbox aws iam` and the AWS CLI call); port 0 picks one, printed on start (the demo's: 127.0.0.1:24586)")
	fs.StringVar(&o.iamAccount, "iam-account", "111122223333", "the customer's AWS account: IAM makes its roles there (arn:aws:iam::ACCOUNT:role/NAME)")
	fs.StringVar(&o.kinesis, "kinesis", "127.0.0.1:24585", "listen address of the Kinesis front (aws.endpoints.kinesis); used with --kinesalite")
	fs.StringVar(&o.kinesalite, "kinesalite", getenv("SANDBOX_KINESALITE"),
		"endpoint of a running kinesalite, http://127.0.0.1:PORT (default $SANDBOX_KINESALITE); empty: no Kinesis")
	fs.StringVar(&o.latency, "latency", getenv("SANDBOX_LATENCY"),
		"how late the buses answer, as one in another region would (default $SANDBOX_LATENCY): 100ms for every bus, or eventbridge=100ms,kinesis=20ms,pubsub=250ms; a bus not named answers at once (a delay proxy in front of each late bus; STS and the admin API never late)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sandbox [flags]\n\nLocal STS, EventBridge, Pub/Sub and a Kinesis front on 127.0.0.1, with an admin API:\n"+
			"POST /trust, POST /topics, POST /streams, GET /arrived; and IAM (CreateRole, PutRolePolicy), enforced by STS\n"+
			"and the buses. Stops on SIGINT or SIGTERM.\n\n"+
			"       sandbox aws iam create-role|put-role-policy|… [--flag value]…\n\n"+
			"The AWS CLI's IAM commands, sent to the sandbox's IAM (sandbox aws help).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	if err := o.check(); err != nil {
		return err
	}
	var err error
	if o.buses, err = parseLatency(o.latency); err != nil {
		return err
	}
	if _, ok := o.buses[busKinesis]; ok && o.kinesalite == "" && strings.Contains(strings.ToLower(o.latency), busKinesis) {
		return fmt.Errorf("--latency %q: Kinesis is served only with --kinesalite", o.latency)
	}
	return serve(ctx, o, &lockedWriter{w: stdout})
}

// check keeps every address on loopback: the sandbox never listens or calls elsewhere.
func (o options) check() error {
	addrs := [][2]string{{"sts", o.sts}, {"events", o.events}, {"admin", o.admin}, {"iam", o.iam}}
	if o.kinesalite != "" {
		addrs = append(addrs, [2]string{"kinesis", o.kinesis})
		u, err := url.Parse(o.kinesalite)
		if err != nil || u.Scheme != "http" || !isLoopback(u.Hostname()) || u.Port() == "" {
			return fmt.Errorf("--kinesalite %q: want http://127.0.0.1:PORT", o.kinesalite)
		}
	}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a[1])
		if err != nil || !isLoopback(host) {
			return fmt.Errorf("--%s %q: want a loopback address and port, like 127.0.0.1:24580", a[0], a[1])
		}
	}
	if !regexp.MustCompile(`^\d{12}$`).MatchString(o.iamAccount) {
		return fmt.Errorf("--iam-account %q: want an AWS account id, 12 digits", o.iamAccount)
	}
	if o.pubsubPort < 0 || o.pubsubPort > 65535 {
		return fmt.Errorf("--pubsub-port %d: not a port", o.pubsubPort)
	}
	return nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
