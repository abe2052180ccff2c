package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/client"
	"github.com/mercamap/relay/internal/registry"
)

func exportCmd(e env) *cobra.Command {
	var path string
	var flags apiFlags
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the accounts and destinations the API made as config lines, ExternalIds pinned",
		Long: `export reads the accounts and destinations made through the API from Redis (the config
names which Redis) and prints them as an accounts: block (when the API made any) and a
destinations: block that serve accepts as they are: each destination with its
ExternalId pinned, so a trust policy that names it keeps matching after Redis is lost.
Keep its output with your backups. To restore after an empty Redis, or to move API
destinations into the file, add its items to the file's accounts: and destinations: and start (or
SIGHUP) the relay: the file's definition wins over the API's, and is read-only through
the API from then on. With --api it asks a running relay instead, through its API and
an admin token: the same lines, the cards' ExternalIds pinned.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("api") {
				c, err := flags.client(e.getenv)
				if err != nil {
					return err
				}
				accts, recs, err := exportThroughAPI(cmd.Context(), c)
				if err != nil {
					return err
				}
				printExport(e.stdout, "--api "+c.BaseURL(), accts, recs)
				return nil
			}
			cfg, st, err := loadWithStore(path, e.getenv)
			if err != nil {
				return err
			}
			defer st.Close()
			reg := registry.New(st.Client())
			recs, _, err := reg.All(cmd.Context())
			if err != nil {
				return fmt.Errorf("read the destinations the api made from redis: %w", err)
			}
			pinWindows(recs, cfg.Delivery.InFlight)
			accts, err := reg.AllAccounts(cmd.Context())
			if err != nil {
				return fmt.Errorf("read the accounts the api made from redis: %w", err)
			}
			printExport(e.stdout, "--config "+path, accts, recs)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "relay.yaml", "path of the YAML config (read Redis directly)")
	flags.register(cmd)
	return cmd
}

// exportThroughAPI is what the API made, as a running relay's API shows it: its
// accounts and its destinations' cards (the ExternalId each was issued, its filter).
func exportThroughAPI(ctx context.Context, c *client.Client) ([]registry.AccountRecord, []registry.Record, error) {
	accounts, err := c.Accounts(ctx)
	if err != nil {
		return nil, nil, err
	}
	var accts []registry.AccountRecord
	for _, a := range accounts {
		if a.ManagedBy == client.API {
			accts = append(accts, registry.AccountRecord{ID: a.ID, Tenants: a.Tenants, Sources: a.Sources, StoreIDPath: a.StoreIDPath})
		}
	}
	cards, err := c.AllDestinations(ctx)
	if err != nil {
		return nil, nil, err
	}
	var recs []registry.Record
	for _, card := range cards {
		if card.ManagedBy != client.API {
			continue
		}
		t := card.Target
		recs = append(recs, registry.Record{ID: card.ID, Account: card.Account, Connector: string(card.Connector),
			BusARN: deref(t.BusArn), StreamARN: deref(t.StreamArn), RoleARN: deref(t.RoleArn), KMSKeyARN: deref(t.KmsKeyArn),
			ProjectID: deref(t.ProjectID), TopicID: deref(t.TopicID), ExternalID: deref(card.ExternalID), Events: card.Events,
			InFlight: card.InFlight, MaxRate: deref(card.MaxRate)})
	}
	return accts, recs, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// pinWindows sets each record's window to the one it runs with, its own or the config's
// delivery.in_flight (def): what a card shows, so both exports print the same lines,
// and what the destination keeps once its lines are in a file, whatever that file's
// default.
func pinWindows(recs []registry.Record, def int) {
	for i := range recs {
		recs[i].InFlight = recs[i].Destination().Window(def)
	}
}

// printExport writes accts and recs as a config's accounts: block (when there are any)
// and destinations: block; each value a JSON string, which YAML reads as it is. from
// says where they were read (the export's flag).
func printExport(w io.Writer, from string, accts []registry.AccountRecord, recs []registry.Record) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	list := func(vs []string) string { b, _ := json.Marshal(vs); return string(b) }
	fmt.Fprintf(w, "# %d accounts and %d destinations made through the API (relay export %s).\n", len(accts), len(recs), from)
	fmt.Fprintln(w, "# Add the items to the file's accounts: and destinations: to restore them, ExternalIds and windows (in_flight) pinned.")
	if len(accts) > 0 {
		fmt.Fprintln(w, "accounts:")
		slices.SortFunc(accts, func(a, b registry.AccountRecord) int { return strings.Compare(a.ID, b.ID) })
		for _, a := range accts {
			fmt.Fprintf(w, "  - id: %s\n    tenants: %s\n", q(a.ID), list(a.Tenants))
			if len(a.Sources) > 0 {
				fmt.Fprintf(w, "    sources: %s\n", list(a.Sources))
			}
			if a.StoreIDPath != "" {
				fmt.Fprintf(w, "    store_id_path: %s\n", q(a.StoreIDPath))
			}
		}
	}
	fmt.Fprintln(w, "destinations:")
	slices.SortFunc(recs, func(a, b registry.Record) int { return strings.Compare(a.ID, b.ID) })
	for _, r := range recs {
		fmt.Fprintf(w, "  - id: %s\n    account: %s\n    connector: %s\n", q(r.ID), q(r.Account), q(r.Connector))
		for _, f := range []struct{ key, v string }{{"bus_arn", r.BusARN}, {"stream_arn", r.StreamARN}, {"role_arn", r.RoleARN},
			{"kms_key_arn", r.KMSKeyARN}, {"project_id", r.ProjectID}, {"topic_id", r.TopicID}, {"external_id", r.ExternalID}} {
			if f.v != "" {
				fmt.Fprintf(w, "    %s: %s\n", f.key, q(f.v))
			}
		}
		if len(r.Events) > 0 {
			fmt.Fprintf(w, "    events: %s\n", list(r.Events))
		}
		if r.InFlight != 0 {
			fmt.Fprintf(w, "    in_flight: %d\n", r.InFlight)
		}
		if r.MaxRate != 0 {
			fmt.Fprintf(w, "    max_rate: %s\n", strconv.FormatFloat(r.MaxRate, 'g', -1, 64))
		}
	}
}
