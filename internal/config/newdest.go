package config

import (
	"slices"
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
	// What the file's identity check says of the whole file, said of this one: without
	// our own principal the relay cannot write to this connector at all.
	switch {
	case d.Connector.IsAWS() && c.Identity.AWSPrincipalARN == "":
		p.add("connector", "this relay takes no %s destinations: its operators have not set identity.aws_principal_arn, the IAM role customers' trust policies name", d.Connector)
	case d.Connector == destination.PubSub && c.Identity.GCPServiceAccount == "":
		p.add("connector", "this relay takes no pubsub destinations: its operators have not set identity.gcp_service_account, the service account customers grant on their topics")
	}
	out := p.problems
	for i := range out {
		out[i].Path = strings.TrimPrefix(out[i].Path, index("destinations", 0)+".")
	}
	return out
}

// CheckAccount checks an account made outside the file (through the API) as the file's
// own are checked: its id, tenants, sources and store id path. Each problem's Path is
// the field alone ("tenants[0]"). Whether the id is taken is the caller's to ask.
func (c *Config) CheckAccount(a Account) Problems {
	var p parser
	p.checkAccounts([]Account{a}, c.Identity.Name)
	out := p.problems
	for i := range out {
		out[i].Path = strings.TrimPrefix(out[i].Path, index("accounts", 0)+".")
	}
	return out
}

// WithAccounts is a copy of c whose accounts are c's and then those of extra the file
// does not define (the file wins on an id): the accounts the API made, routed like the
// file's. Nothing else is copied deeply: the copy shares c's slices and maps.
func (c *Config) WithAccounts(extra []Account) *Config {
	if len(extra) == 0 {
		return c
	}
	out := *c
	out.Accounts = slices.Clone(c.Accounts)
	for _, a := range extra {
		if _, ok := c.Account(a.ID); !ok {
			out.Accounts = append(out.Accounts, a)
		}
	}
	return &out
}
