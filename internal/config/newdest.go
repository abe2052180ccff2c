package config

import (
	"strings"

	"github.com/mercamap/relay/internal/destination"
)

// CheckDestination checks a destination made outside the file (through the API) as the
// file's own are checked, with the same words: its id, account and target, and its
// event filter against the routing keys. Each problem's Path is the field alone
// ("bus_arn"), as an API body names it. Whether the id is taken is the caller's to ask.
func (c *Config) CheckDestination(d destination.Destination) Problems {
	accountIDs := make(map[string]bool, len(c.Accounts))
	for _, a := range c.Accounts {
		accountIDs[a.ID] = true
	}
	var p parser
	p.checkDestinations([]destination.Destination{d}, accountIDs, c.RabbitMQ.RoutingKeys)
	out := p.problems
	for i := range out {
		out[i].Path = strings.TrimPrefix(out[i].Path, index("destinations", 0)+".")
	}
	return out
}
