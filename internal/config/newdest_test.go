package config

import (
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/destination"
)

// TestADestinationFromTheAPIIsCheckedLikeTheFilesAndNamesEachField: a destination the
// API is asked to make gets the file's checks, every problem at once, each under the
// body's own field name; and a relay without our own principal for a connector takes
// none of that connector's, rather than making one that would stop the next start.
func TestADestinationFromTheAPIIsCheckedLikeTheFilesAndNamesEachField(t *testing.T) {
	c := &Config{Accounts: []Account{{ID: "acct_1"}}, RabbitMQ: RabbitMQ{RoutingKeys: []string{"job.completed", "job.failed"}},
		Identity: destination.Identity{AWSPrincipalARN: "arn:aws:iam::999999999999:role/relay"}}
	ps := c.CheckDestination(destination.Destination{ID: "a b", Account: "acct_9", Connector: destination.EventBridge,
		BusARN: "nope", Events: []string{"job.started"}})
	fields := map[string]string{}
	for _, p := range ps {
		fields[p.Path] = p.Message
	}
	for _, f := range []string{"id", "account", "bus_arn", "role_arn", "events[0]"} {
		if fields[f] == "" {
			t.Errorf("no problem named %s in %v", f, ps)
		}
	}
	ok := destination.Destination{ID: "api-bus", Account: "acct_1", Connector: destination.EventBridge,
		BusARN: "arn:aws:events:us-east-1:111122223333:event-bus/api", RoleARN: "arn:aws:iam::111122223333:role/api"}
	if ps := c.CheckDestination(ok); len(ps) != 0 {
		t.Errorf("a sound destination: %v", ps)
	}
	topic := destination.Destination{ID: "api-topic", Account: "acct_1", Connector: destination.PubSub, ProjectID: "acme-prod", TopicID: "relay-events"}
	if ps := c.CheckDestination(topic); len(ps) != 1 || ps[0].Path != "connector" || !strings.Contains(ps[0].Message, "identity.gcp_service_account") {
		t.Errorf("a pubsub destination on a relay without a service account: %v", ps)
	}
}
