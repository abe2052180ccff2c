package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/client"
)

// apiFlags are how the API client commands reach the relay.
type apiFlags struct{ url, token string }

func (f *apiFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "api", "http://127.0.0.1:8080", "the relay's API address")
	cmd.PersistentFlags().StringVar(&f.token, "token", "",
		"bearer token, or env:NAME / file:PATH to read it (default: $RELAY_TOKEN); a bare value shows in ps")
}

// client resolves the token (a value, env:NAME, file:PATH, or $RELAY_TOKEN) into the
// public API client every API command calls through.
func (f *apiFlags) client(getenv func(string) string) (*client.Client, error) {
	tok := f.token
	switch {
	case tok == "":
		tok = getenv("RELAY_TOKEN")
	case strings.HasPrefix(tok, "env:"):
		name := strings.TrimPrefix(tok, "env:")
		if tok = getenv(name); tok == "" {
			return nil, fmt.Errorf("--token env:%s: the environment variable %s is not set (or is empty)", name, name)
		}
	case strings.HasPrefix(tok, "file:"):
		path := strings.TrimPrefix(tok, "file:")
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--token: %w", err)
		}
		if tok = strings.TrimRight(string(b), "\r\n"); tok == "" {
			return nil, fmt.Errorf("--token file:%s: the file is empty", path)
		}
	}
	if tok == "" {
		return nil, errors.New("no token: pass --token (env:NAME or file:PATH) or set RELAY_TOKEN")
	}
	return client.New(f.url, tok, client.Options{}), nil
}

func destinationsCmd(e env) *cobra.Command {
	var flags apiFlags
	list := func(cmd *cobra.Command, _ []string) error {
		c, err := flags.client(e.getenv)
		if err != nil {
			return err
		}
		cards, err := c.AllDestinations(cmd.Context())
		if err != nil {
			return err
		}
		printList(e.stdout, cards)
		return nil
	}
	cmd := &cobra.Command{
		Use:   "destinations [list | show ID | replay | activate | retry | create | change | delete]",
		Short: "List destination cards, or show one with its setup ready to copy",
		Long: `destinations asks a running relay's API for the destination cards the token may see.
list (the default) prints one line per destination: connector, id, account, status,
consecutive failures and the last failure's sentence. show ID prints one card with its
target and the setup a customer applies: the trust and permissions policies (and the KMS
statement) for AWS, the service account and gcloud commands for Pub/Sub.`,
		Args: cobra.NoArgs,
		RunE: list,
	}
	flags.register(cmd)
	cmd.AddCommand(&cobra.Command{
		Use: "list", Short: "One line per destination", Args: cobra.NoArgs, RunE: list,
	}, &cobra.Command{
		Use: "show ID", Short: "One destination's card, setup included", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			card, err := find(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			printCard(e.stdout, card)
			return nil
		},
	})
	var from, afterEvent, since string
	replay := &cobra.Command{
		Use:   "replay ID (--from TIME | --after-event CE-ID)",
		Short: "Deliver a destination's events again from a point of its account's log, in order",
		Long: `replay moves the destination's cursor back: every event stored from --from (RFC 3339)
on, or after the event --after-event, is delivered again in log order before newer events
(receivers dedup on event_id). On a paused or disabled destination it starts when the
destination is activated. A point older than the log keeps is refused with the oldest
point still replayable (the card's replayable_from).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (from == "") == (afterEvent == "") {
				return errors.New("pass one of --from or --after-event")
			}
			var body client.ReplayRequest
			if afterEvent != "" {
				body.AfterEvent = &afterEvent
			} else {
				t, err := time.Parse(time.RFC3339Nano, from)
				if err != nil {
					return fmt.Errorf("--from must be an RFC 3339 time, like 2024-05-01T12:00:00Z: %q", from)
				}
				body.From = &t
			}
			c, ref, err := destinationRef(cmd.Context(), &flags, e, args[0])
			if err != nil {
				return err
			}
			out, err := c.Replay(cmd.Context(), ref, body)
			if err != nil {
				return err
			}
			if out.Replay.Pending {
				fmt.Fprintf(e.stdout, "%s is %s: the replay starts when it is activated\n", out.ID, out.Status)
			} else {
				fmt.Fprintf(e.stdout, "%s: delivering again after log entry %s\n", out.ID, out.Replay.Cursor)
			}
			return nil
		},
	}
	replay.Flags().StringVar(&from, "from", "", "an RFC 3339 time: replay every event stored from then on")
	replay.Flags().StringVar(&afterEvent, "after-event", "", "a ce-id: replay every event stored after it")
	activate := &cobra.Command{
		Use:   "activate ID [--replay since_disabled|since_paused]",
		Short: "Switch a paused or disabled destination back on",
		Long: `activate switches the destination back on. Without --replay it delivers what arrives
from now on; with --replay since_disabled (or since_paused) it resumes from where delivery
stopped: what arrived meanwhile is delivered first, in order.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ref, err := destinationRef(cmd.Context(), &flags, e, args[0])
			if err != nil {
				return err
			}
			out, err := c.Activate(cmd.Context(), ref, client.ActivateRequestReplay(since))
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s: %s\n", out.ID, out.Status)
			return nil
		},
	}
	activate.Flags().StringVar(&since, "replay", "", "since_disabled or since_paused: deliver what arrived meanwhile")
	retry := &cobra.Command{
		Use:   "retry ID N",
		Short: "Write the message of attempt N of a destination's attempt log once more",
		Long: `retry writes the event of attempt N (its number in the attempt log: the card's attempts)
once more, outside the ordered stream: the replica delivering for the destination writes
it between ordered deliveries and records the outcome as an attempt of its own, marked as
a retry of N. It moves no cursor and counts nothing. The destination must be active, and
attempt N must have ended a message (delivered, rejected or expired).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("N must be an attempt number, like 7: %q", args[1])
			}
			c, ref, err := destinationRef(cmd.Context(), &flags, e, args[0])
			if err != nil {
				return err
			}
			out, err := c.Retry(cmd.Context(), ref, n)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s: retry of attempt %d (event %s) queued as attempt %d\n", args[0], out.RetryOf, out.EventID, out.Attempt)
			return nil
		},
	}
	cmd.AddCommand(replay, activate, retry)
	cmd.AddCommand(manageCmds(e, &flags)...)
	return cmd
}

// destinationRef is the client of the flags' token and the route of destination id,
// found among the cards the token sees.
func destinationRef(ctx context.Context, flags *apiFlags, e env, id string) (*client.Client, client.Ref, error) {
	c, err := flags.client(e.getenv)
	if err != nil {
		return nil, client.Ref{}, err
	}
	card, err := find(ctx, c, id)
	return c, client.RefOf(card), err
}

// find is the card of id among those the token sees, or an error saying there is none.
func find(ctx context.Context, c *client.Client, id string) (client.Card, error) {
	card, err := c.Find(ctx, id)
	if client.IsCode(err, client.CodeNotFound) {
		return card, fmt.Errorf("no destination %q that this token may see", id)
	}
	return card, err
}

func printList(w io.Writer, cards []client.Card) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONNECTOR\tID\tACCOUNT\tSTATUS\tFAILURES\tLAST FAILURE")
	for _, c := range cards {
		last := "-"
		if f := c.LastFailure; f != nil {
			last = fmt.Sprintf("%s %s: %s", f.At.Format(time.RFC3339), f.Class, f.Message)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", c.Connector, c.ID, c.Account, c.Status, c.ConsecutiveFailures, last)
	}
	tw.Flush()
}

func printCard(w io.Writer, c client.Card) {
	fmt.Fprintf(w, "%s (%s), account %s\n", c.ID, c.Connector, c.Account)
	fmt.Fprintf(w, "status:               %s\n", c.Status)
	fmt.Fprintf(w, "consecutive failures: %d\n", c.ConsecutiveFailures)
	if f := c.LastFailure; f != nil {
		fmt.Fprintf(w, "last failure:         %s, %s, event %s\n                      %s\n", f.At.Format(time.RFC3339), f.Class, f.EventID, f.Message)
	} else {
		fmt.Fprintln(w, "last failure:         none")
	}
	if d := c.LastDelivery; d != nil {
		fmt.Fprintf(w, "last delivery:        %s, event %s\n", d.At.Format(time.RFC3339), d.EventID)
	} else {
		fmt.Fprintln(w, "last delivery:        none")
	}
	if d := c.Disabled; d != nil {
		fmt.Fprintf(w, "disabled:             %s: %s\n", d.At.Format(time.RFC3339), d.Reason)
	}
	fmt.Fprintf(w, "sequence:             %d\n", c.Sequence)
	fmt.Fprintf(w, "window:               %d writes in flight\n", c.InFlight)
	if c.MaxRate != nil {
		fmt.Fprintf(w, "rate cap:             %s writes per second\n", strconv.FormatFloat(*c.MaxRate, 'g', -1, 64))
	} else {
		fmt.Fprintln(w, "rate cap:             none")
	}
	fmt.Fprintln(w, "target:")
	var target map[string]string
	b, _ := json.Marshal(c.Target)
	_ = json.Unmarshal(b, &target)
	for _, k := range slices.Sorted(maps.Keys(target)) {
		fmt.Fprintf(w, "  %s: %s\n", k, target[k])
	}
	if c.ExternalID != nil {
		fmt.Fprintf(w, "external id:          %s\n", *c.ExternalID)
	}
	s := c.Setup
	if s.PrincipalArn != nil {
		fmt.Fprintf(w, "\nOur principal: %v\n", *s.PrincipalArn)
		printPolicy(w, "Trust policy (the role's trust relationship)", s.TrustPolicy)
		printPolicy(w, "Permissions policy (attach to the role)", s.PermissionsPolicy)
		if s.KmsStatement != nil {
			printPolicy(w, "KMS statement (add to the role's permissions, for the stream's key)", s.KmsStatement)
		}
		fmt.Fprintln(w, "\nThe role with these policies, in three forms:")
		printBlock(w, "CloudFormation template (aws cloudformation deploy --template-file role.yaml --capabilities CAPABILITY_NAMED_IAM …)", s.Cloudformation)
		printBlock(w, "Terraform", s.Terraform)
		if s.AwsCli != nil {
			printBlock(w, "AWS CLI", ptr(strings.Join(*s.AwsCli, "\n")))
		}
		if s.QuickCreateURL != nil {
			fmt.Fprintf(w, "\nQuick-create (Launch stack in the customer's AWS console):\n  %s\n", *s.QuickCreateURL)
		}
	}
	if s.ServiceAccount != nil {
		fmt.Fprintf(w, "\nOur service account: %v\nRun:\n", *s.ServiceAccount)
		if s.Commands != nil {
			for _, c := range *s.Commands {
				fmt.Fprintf(w, "  %v\n", c)
			}
		}
		printBlock(w, "Or with Terraform", s.Terraform)
	}
}

// printBlock prints a titled block of lines (a template, a snippet, commands), each
// indented two spaces; nothing when text is nil.
func printBlock(w io.Writer, title string, text *string) {
	if text == nil {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, line := range strings.Split(strings.TrimRight(*text, "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight("  "+line, " "))
	}
}

func ptr[T any](v T) *T { return &v }

func printPolicy(w io.Writer, title string, v any) {
	b, err := json.MarshalIndent(v, "  ", "  ")
	if err != nil {
		return
	}
	fmt.Fprintf(w, "\n%s:\n  %s\n", title, b)
}
