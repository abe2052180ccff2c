package config

import (
	"fmt"

	"github.com/mercamap/relay/internal/destination"
)

// The ExternalId of each AWS destination: pinned or derived, never shared by two
// destinations, never changed once issued.

// checkExternalIDs resolves identity.external_id_secret, derives the ExternalId of each
// AWS destination that pins none, and refuses two destinations sharing one: a shared
// ExternalId would let one customer's destination write through another's role. The
// secret is not kept in the Config.
func (p *parser) checkExternalIDs(dests []destination.Destination) {
	if p.externalIDSecretRef != "" {
		secret, ok := p.secret("identity.external_id_secret", p.externalIDSecretRef)
		switch {
		case !ok:
		case len(secret) < destination.MinExternalIDSecret:
			p.add("identity.external_id_secret", "is %d bytes: use at least %d random characters (openssl rand -hex 32); it derives every ExternalId it is used for and must never change after",
				len(secret), destination.MinExternalIDSecret)
		default:
			for i := range dests {
				if dests[i].Connector.IsAWS() && dests[i].PinnedExternalID == "" {
					dests[i].DerivedExternalID = destination.DeriveExternalID([]byte(secret), dests[i].Account, dests[i].ID)
				}
			}
		}
	}
	first := map[string]int{}
	for i, d := range dests {
		ext := d.ConfiguredExternalID()
		if ext == "" {
			continue
		}
		if j, dup := first[ext]; dup {
			p.add(index("destinations", i)+".external_id", "is the ExternalId of destinations[%d] too: each destination has its own, or one customer's destination could write through another's role", j)
			continue
		}
		first[ext] = i
	}
}

// ExternalIDProblems compares the ExternalId c gives each AWS destination with the one
// Redis already holds for it (issued, by destination id; absent or "" when none yet). A
// config that would change an issued id is refused: the customer's trust policy names
// that id, and a Redis rebuilt empty would hand out the config's. Two destinations may
// not end up with the same id either.
func (c *Config) ExternalIDProblems(issued map[string]string) Problems {
	var ps Problems
	owner := map[string]int{}
	for i, d := range c.Destinations {
		if !d.Connector.IsAWS() {
			continue
		}
		path := index("destinations", i) + ".external_id"
		have, want := issued[d.ID], d.ConfiguredExternalID()
		switch {
		case have != "" && want != "" && have != want && d.PinnedExternalID != "":
			ps = append(ps, Problem{path, fmt.Sprintf("pins %s but the relay issued %s to this destination and the customer's trust policy requires it: pin external_id: %s", want, have, have)})
		case have != "" && want != "" && have != want:
			ps = append(ps, Problem{path, fmt.Sprintf("identity.external_id_secret derives %s but the relay issued %s to this destination and the customer's trust policy requires it: pin external_id: %s", want, have, have)})
		}
		ext := have
		if ext == "" {
			ext = want
		}
		if ext == "" {
			continue
		}
		if j, dup := owner[ext]; dup {
			ps = append(ps, Problem{path, fmt.Sprintf("%s is the ExternalId of destinations[%d] in Redis: each destination has its own", ext, j)})
			continue
		}
		owner[ext] = i
	}
	return ps
}

// maxUnkeptNamed bounds the destinations UnkeptExternalIDs names one by one: past it,
// one more problem counts the rest (the fix is the same one line for all).
const maxUnkeptNamed = 20

// UnkeptExternalIDs is the promise that an ExternalId never changes, held by default:
// one problem per AWS destination that neither pins external_id nor has it derived from
// identity.external_id_secret. Such an id would live only in Redis, and a Redis lost or
// rebuilt empty would issue a new one that no customer's trust policy names. serve
// refuses to start (and a reload is refused) on them, and check-config prints them;
// config.Load does not, so relay external-ids still reads such a config to print the
// pins. path is the config file, for the command the message names.
func (c *Config) UnkeptExternalIDs(path string) Problems {
	var ps Problems
	unkept := 0
	for i, d := range c.Destinations {
		if !d.Connector.IsAWS() || d.ConfiguredExternalID() != "" {
			continue
		}
		if unkept++; unkept <= maxUnkeptNamed {
			ps = append(ps, Problem{index("destinations", i) + ".external_id", "is not pinned and identity.external_id_secret is not set: " +
				"this ExternalId would live only in Redis, and a lost Redis would issue a new one the customer's trust policy does not name. " +
				"Set identity.external_id_secret (openssl rand -hex 32, kept forever) to derive every id, or pin each one: " +
				"relay external-ids --config " + path + " prints the external_id lines of the ids Redis already issued"})
		}
	}
	if unkept > maxUnkeptNamed {
		ps = append(ps, Problem{"destinations", fmt.Sprintf("%d more AWS destinations pin no external_id, with identity.external_id_secret not set (the same fix)", unkept-maxUnkeptNamed)})
	}
	return ps
}
