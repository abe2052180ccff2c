package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/stream"
)

// apiFlags are how the API client commands reach the relay.
type apiFlags struct{ url, token string }

func (f *apiFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "api", "http://127.0.0.1:8080", "the relay's API address")
	cmd.PersistentFlags().StringVar(&f.token, "token", "",
		"bearer token, or env:NAME / file:PATH to read it (default: $RELAY_TOKEN); a bare value shows in ps")
}

// caller resolves the token: a value, env:NAME, file:PATH, or $RELAY_TOKEN.
func (f *apiFlags) caller(getenv func(string) string) (*stream.Caller, error) {
	tok := f.token
	switch {
	case tok == "":
		tok = getenv("RELAY_TOKEN")
	case strings.HasPrefix(tok, "env:"):
		tok = getenv(strings.TrimPrefix(tok, "env:"))
	case strings.HasPrefix(tok, "file:"):
		b, err := os.ReadFile(strings.TrimPrefix(tok, "file:"))
		if err != nil {
			return nil, fmt.Errorf("--token: %w", err)
		}
		tok = strings.TrimRight(string(b), "\r\n")
	}
	if tok == "" {
		return nil, errors.New("no token: pass --token (env:NAME or file:PATH) or set RELAY_TOKEN")
	}
	return &stream.Caller{Base: f.url, Token: tok}, nil
}

func destinationsCmd(e env) *cobra.Command {
	var flags apiFlags
	list := func(cmd *cobra.Command, _ []string) error {
		c, err := flags.caller(e.getenv)
		if err != nil {
			return err
		}
		cards, err := allCards(cmd.Context(), c)
		if err != nil {
			return err
		}
		printList(e.stdout, cards)
		return nil
	}
	cmd := &cobra.Command{
		Use:   "destinations [list | show ID]",
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
			c, err := flags.caller(e.getenv)
			if err != nil {
				return err
			}
			cards, err := allCards(cmd.Context(), c)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(cards, func(card stream.Card) bool { return card.ID == args[0] })
			if i < 0 {
				return fmt.Errorf("no destination %q that this token may see", args[0])
			}
			printCard(e.stdout, cards[i])
			return nil
		},
	})
	return cmd
}

// allCards lists every card the token sees, connector by connector.
func allCards(ctx context.Context, c *stream.Caller) ([]stream.Card, error) {
	var conns struct {
		Connectors []struct {
			Connector    string `json:"connector"`
			Destinations int    `json:"destinations"`
		} `json:"connectors"`
	}
	if err := c.Do(ctx, http.MethodGet, "/v1/connectors", nil, nil, &conns); err != nil {
		return nil, err
	}
	var cards []stream.Card
	for _, conn := range conns.Connectors {
		if conn.Destinations == 0 {
			continue
		}
		var page struct {
			Destinations []stream.Card `json:"destinations"`
		}
		if err := c.Do(ctx, http.MethodGet, "/v1/connectors/"+conn.Connector+"/destinations", nil, nil, &page); err != nil {
			return nil, err
		}
		cards = append(cards, page.Destinations...)
	}
	return cards, nil
}

func printList(w io.Writer, cards []stream.Card) {
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

func printCard(w io.Writer, c stream.Card) {
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
	fmt.Fprintln(w, "target:")
	for _, k := range slices.Sorted(maps.Keys(c.Target)) {
		fmt.Fprintf(w, "  %s: %s\n", k, c.Target[k])
	}
	if c.ExternalID != nil {
		fmt.Fprintf(w, "external id:          %s\n", *c.ExternalID)
	}
	s := c.Setup
	if v, ok := s["principal_arn"]; ok {
		fmt.Fprintf(w, "\nOur principal: %v\n", v)
		printPolicy(w, "Trust policy (the role's trust relationship)", s["trust_policy"])
		printPolicy(w, "Permissions policy (attach to the role)", s["permissions_policy"])
		if s["kms_statement"] != nil {
			printPolicy(w, "KMS statement (add to the role's permissions, for the stream's key)", s["kms_statement"])
		}
	}
	if v, ok := s["service_account"]; ok {
		fmt.Fprintf(w, "\nOur service account: %v\nRun:\n", v)
		cmds, _ := s["commands"].([]any)
		for _, c := range cmds {
			fmt.Fprintf(w, "  %v\n", c)
		}
	}
}

func printPolicy(w io.Writer, title string, v any) {
	b, err := json.MarshalIndent(v, "  ", "  ")
	if err != nil {
		return
	}
	fmt.Fprintf(w, "\n%s:\n  %s\n", title, b)
}
