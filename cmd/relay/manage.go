package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/client"
)

// manageCmds are `relay destinations create|change|delete`: the API's routes for the
// destinations it makes ("Destinations and accounts as data"), for a platform's scripts.
func manageCmds(e env, flags *apiFlags) []*cobra.Command {
	var t targetFlags
	create := &cobra.Command{
		Use:   "create CONNECTOR [--id ID] (--bus-arn A --role-arn R | --stream-arn A --role-arn R [--kms-key-arn K] | --project-id P --topic-id T) [--events E,…] [--in-flight N] [--max-rate R] [--account ACCOUNT]",
		Short: "Add a destination through the API; prints its card with the setup to copy",
		Long: `create adds a destination to the account of the token (an admin names --account). The
relay checks it as it checks the config file, every problem at once, and makes an id when
--id is not given. The destination is pending until its setup check passes: its card,
printed here, holds the ExternalId and the policies (or the gcloud commands) the customer
applies. --idempotency-key makes a retried create answer with the destination the first
one made.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			card, err := c.CreateDestination(cmd.Context(), client.Connector(args[0]), t.create(cmd), t.idemKey)
			if err != nil {
				return err
			}
			printCard(e.stdout, card)
			return nil
		},
	}
	t.register(create, true)
	var c targetFlags
	change := &cobra.Command{
		Use:   "change ID [--role-arn R] [--kms-key-arn K] [--events E,…] [--in-flight N] [--max-rate R]",
		Short: "Change the role, KMS key, event filter, window or rate cap of a destination the API made",
		Long: `change sets a new role, KMS key, event filter, window (--in-flight) or rate cap
(--max-rate) on a destination made through the API (the file's are changed in the file).
The target never changes: a new bus, stream or topic is a new destination. A new role
sends the destination back to pending until it is checked; the ExternalId stays.
--in-flight 0 sets the window back to the relay's default, --max-rate 0 removes the cap.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, null := c.change(cmd)
			if body == (client.DestinationChange{}) && len(null) == 0 {
				return fmt.Errorf("nothing to change: pass --role-arn, --kms-key-arn, --events, --in-flight or --max-rate")
			}
			api, ref, err := destinationRef(cmd.Context(), flags, e, args[0])
			if err != nil {
				return err
			}
			card, err := api.ChangeDestination(cmd.Context(), ref, body, null...)
			if err != nil {
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
			c, ref, err := destinationRef(cmd.Context(), flags, e, args[0])
			if err != nil {
				return err
			}
			out, err := c.DeleteDestination(cmd.Context(), ref)
			if err != nil {
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
	inFlight                                                     int
	maxRate                                                      float64
}

func (t *targetFlags) register(cmd *cobra.Command, create bool) {
	f := cmd.Flags()
	f.StringVar(&t.role, "role-arn", "", "the ARN of the customer's IAM role the relay assumes (AWS)")
	f.StringVar(&t.kms, "kms-key-arn", "", "the stream's KMS key, when it is encrypted with a customer key (Kinesis)")
	f.StringSliceVar(&t.events, "events", nil, "the short types to deliver, like job.completed (default: all)")
	f.IntVar(&t.inFlight, "in-flight", 0, "how many writes may be in flight at once, each of another store (1 to 64; 1: everything in arrival order; default: the relay's)")
	f.Float64Var(&t.maxRate, "max-rate", 0, "at most this many writes per second, e.g. to leave room in the AWS account's PutEvents quota (default: no cap)")
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

// create is a create's body: the flags set on cmd.
func (t *targetFlags) create(cmd *cobra.Command) client.DestinationCreate {
	set := flagValue(cmd)
	return client.DestinationCreate{ID: set("id", t.id), Account: set("account", t.account), BusArn: set("bus-arn", t.bus),
		StreamArn: set("stream-arn", t.stream), RoleArn: set("role-arn", t.role), KmsKeyArn: set("kms-key-arn", t.kms),
		ProjectID: set("project-id", t.project), TopicID: set("topic-id", t.topic), Events: t.eventsSet(cmd),
		InFlight: flagSet(cmd, "in-flight", t.inFlight), MaxRate: flagSet(cmd, "max-rate", t.maxRate)}
}

// change is a change's body, the flags set on cmd, and the fields it sends as null: an
// --in-flight or --max-rate of 0 sets the relay's default window, or no cap.
func (t *targetFlags) change(cmd *cobra.Command) (client.DestinationChange, []string) {
	set := flagValue(cmd)
	body := client.DestinationChange{RoleArn: set("role-arn", t.role), KmsKeyArn: set("kms-key-arn", t.kms), Events: t.eventsSet(cmd)}
	var null []string
	if body.InFlight = flagSet(cmd, "in-flight", t.inFlight); body.InFlight != nil && *body.InFlight == 0 {
		body.InFlight, null = nil, append(null, client.FieldInFlight)
	}
	if body.MaxRate = flagSet(cmd, "max-rate", t.maxRate); body.MaxRate != nil && *body.MaxRate == 0 {
		body.MaxRate, null = nil, append(null, client.FieldMaxRate)
	}
	return body, null
}

// flagSet is a flag's value when it was set on cmd, else nil (left out of the body).
func flagSet[T any](cmd *cobra.Command, flag string, v T) *T {
	if !cmd.Flags().Changed(flag) {
		return nil
	}
	return &v
}

func (t *targetFlags) eventsSet(cmd *cobra.Command) *[]string {
	if !cmd.Flags().Changed("events") {
		return nil
	}
	return &t.events
}

// flagValue is a flag's value when it was set on cmd, else nil (left out of the body).
func flagValue(cmd *cobra.Command) func(flag, v string) *string {
	return func(flag, v string) *string {
		if !cmd.Flags().Changed(flag) {
			return nil
		}
		return &v
	}
}
