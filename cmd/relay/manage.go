package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/stream"
)

// manageCmds are `relay destinations create|change|delete`: the API's routes for the
// destinations it makes ("Destinations and accounts as data"), for a platform's scripts.
func manageCmds(e env, flags *apiFlags) []*cobra.Command {
	var t targetFlags
	create := &cobra.Command{
		Use:   "create CONNECTOR [--id ID] (--bus-arn A --role-arn R | --stream-arn A --role-arn R [--kms-key-arn K] | --project-id P --topic-id T) [--events E,…] [--account ACCOUNT]",
		Short: "Add a destination through the API; prints its card with the setup to copy",
		Long: `create adds a destination to the account of the token (an admin names --account). The
relay checks it as it checks the config file, every problem at once, and makes an id when
--id is not given. The destination is pending until its setup check passes: its card,
printed here, holds the ExternalId and the policies (or the gcloud commands) the customer
applies. --idempotency-key makes a retried create answer with the destination the first
one made.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := t.body(cmd, true)
			var card stream.Card
			if err := callAPI(cmd.Context(), flags, e, http.MethodPost, "/v1/connectors/"+args[0]+"/destinations", body, &card, t.idemKey); err != nil {
				return err
			}
			printCard(e.stdout, card)
			return nil
		},
	}
	t.register(create, true)
	var c targetFlags
	change := &cobra.Command{
		Use:   "change ID [--role-arn R] [--kms-key-arn K] [--events E,…]",
		Short: "Change the role, KMS key or event filter of a destination the API made",
		Long: `change sets a new role, KMS key or event filter on a destination made through the API
(the file's are changed in the file). The target never changes: a new bus, stream or topic
is a new destination. A new role sends the destination back to pending until it is
checked; the ExternalId stays.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := c.body(cmd, false)
			if len(body) == 0 {
				return fmt.Errorf("nothing to change: pass --role-arn, --kms-key-arn or --events")
			}
			var card stream.Card
			if err := destinationCall(cmd.Context(), flags, e, http.MethodPatch, args[0], "", body, &card); err != nil {
				return err
			}
			printCard(e.stdout, card)
			return nil
		},
	}
	c.register(change, false)
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a destination the API made, on every replica",
		Long: `delete stops the destination for good: no write starts after the answer, on any
replica; it says whether one was under way (it may still land). Its card, channel and
attempt log go, and its ExternalId is never issued again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct {
				Deleted       string `json:"deleted"`
				WriteInFlight bool   `json:"write_in_flight"`
			}
			if err := destinationCall(cmd.Context(), flags, e, http.MethodDelete, args[0], "", nil, &out); err != nil {
				return err
			}
			if out.WriteInFlight {
				fmt.Fprintf(e.stdout, "%s deleted; a write was under way when it was, and may still land\n", out.Deleted)
			} else {
				fmt.Fprintf(e.stdout, "%s deleted; no write was under way\n", out.Deleted)
			}
			return nil
		},
	}
	return []*cobra.Command{create, change, del}
}

// targetFlags are a create's or a change's fields.
type targetFlags struct {
	id, account, bus, stream, role, kms, project, topic, idemKey string
	events                                                       []string
}

func (t *targetFlags) register(cmd *cobra.Command, create bool) {
	f := cmd.Flags()
	f.StringVar(&t.role, "role-arn", "", "the ARN of the customer's IAM role the relay assumes (AWS)")
	f.StringVar(&t.kms, "kms-key-arn", "", "the stream's KMS key, when it is encrypted with a customer key (Kinesis)")
	f.StringSliceVar(&t.events, "events", nil, "the short types to deliver, like job.completed (default: all)")
	if !create {
		return
	}
	f.StringVar(&t.id, "id", "", "the destination's id (default: the relay makes one)")
	f.StringVar(&t.account, "account", "", "the account (an admin token must name it)")
	f.StringVar(&t.bus, "bus-arn", "", "the EventBridge bus's ARN")
	f.StringVar(&t.stream, "stream-arn", "", "the Kinesis stream's ARN")
	f.StringVar(&t.project, "project-id", "", "the Google Cloud project (Pub/Sub)")
	f.StringVar(&t.topic, "topic-id", "", "the Pub/Sub topic")
	f.StringVar(&t.idemKey, "idempotency-key", "", "a key a retried create sends again, so it makes one destination")
}

// body is the JSON body of the flags set on cmd.
func (t *targetFlags) body(cmd *cobra.Command, create bool) map[string]any {
	body := map[string]any{}
	set := func(flag, field, v string) {
		if cmd.Flags().Changed(flag) {
			body[field] = v
		}
	}
	set("role-arn", "role_arn", t.role)
	set("kms-key-arn", "kms_key_arn", t.kms)
	if cmd.Flags().Changed("events") {
		body["events"] = t.events
	}
	if create {
		set("id", "id", t.id)
		set("account", "account", t.account)
		set("bus-arn", "bus_arn", t.bus)
		set("stream-arn", "stream_arn", t.stream)
		set("project-id", "project_id", t.project)
		set("topic-id", "topic_id", t.topic)
	}
	return body
}

// callAPI sends one call with the flags' token (and an Idempotency-Key when idem is set).
func callAPI(ctx context.Context, flags *apiFlags, e env, method, path string, body, out any, idem string) error {
	c, err := flags.caller(e.getenv)
	if err != nil {
		return err
	}
	if idem != "" {
		c.Header = http.Header{"Idempotency-Key": {idem}}
	}
	return c.Do(ctx, method, path, nil, body, out)
}
