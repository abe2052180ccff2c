// Package amqpnodes picks which node of a RabbitMQ cluster to connect to: the relay is given
// every node's URL and connects to a live one, starting after the node it last used, so a
// connection lost with its node goes to another node first. It never logs or returns a URL
// (URLs hold the password).
package amqpnodes

import (
	"errors"
	"fmt"
)

// Nodes is a cluster's node URLs and the one to try first. Not safe for concurrent use:
// each connecting loop holds its own.
type Nodes struct {
	urls []string
	next int
}

// New returns the nodes to try, in the given order at first.
func New(urls []string) *Nodes { return &Nodes{urls: urls} }

// Connect calls connect with each URL in turn, from the one after the last that
// connected, and stops at the first that succeeds. If none does it returns every error,
// each prefixed with the node's place in the list (the errors of amqp091-go's dial name
// the host, never the password).
func (n *Nodes) Connect(connect func(url string) error) error {
	if len(n.urls) == 0 {
		return errors.New("no broker URL configured")
	}
	var errs []error
	for k := range n.urls {
		i := (n.next + k) % len(n.urls)
		err := connect(n.urls[i])
		if err == nil {
			n.next = (i + 1) % len(n.urls)
			return nil
		}
		if len(n.urls) == 1 {
			return err
		}
		errs = append(errs, fmt.Errorf("node %d of %d: %w", i+1, len(n.urls), err))
	}
	return errors.Join(errs...)
}
