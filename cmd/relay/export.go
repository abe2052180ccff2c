package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/registry"
)

func exportCmd(e env) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the destinations the API made as config lines, ExternalIds pinned",
		Long: `export reads the destinations made through the API from Redis (the config names which
Redis) and prints them as a destinations: block that serve accepts as it is: each with its
ExternalId pinned, so a trust policy that names it keeps matching after Redis is lost.
Keep its output with your backups. To restore after an empty Redis, or to move API
destinations into the file, add its items to the file's destinations: and start (or
SIGHUP) the relay: the file's definition wins over the API's, and is read-only through
the API from then on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, st, err := loadWithStore(path, e.getenv)
			if err != nil {
				return err
			}
			defer st.Close()
			recs, _, err := registry.New(st.Client()).All(cmd.Context())
			if err != nil {
				return fmt.Errorf("read the destinations the api made from redis: %w", err)
			}
			printExport(e.stdout, path, recs)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "relay.yaml", "path of the YAML config")
	return cmd
}

// printExport writes recs as a config's destinations: block; each value a JSON string,
// which YAML reads as it is.
func printExport(w io.Writer, path string, recs []registry.Record) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	fmt.Fprintf(w, "# %d destinations made through the API (relay export --config %s).\n", len(recs), path)
	fmt.Fprintln(w, "# Add the items to the file's destinations: to restore them, ExternalIds pinned.")
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
			b, _ := json.Marshal(r.Events)
			fmt.Fprintf(w, "    events: %s\n", b)
		}
	}
}
