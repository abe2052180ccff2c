package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// issuedExternalIDs reads the ExternalId Redis holds for each AWS destination of cfg,
// by destination id ("" where none was issued yet).
func issuedExternalIDs(ctx context.Context, st *store.Store, cfg *config.Config) (map[string]string, error) {
	var refs []store.Ref
	for _, d := range cfg.Destinations {
		if d.Connector.IsAWS() {
			refs = append(refs, store.Ref{Account: d.Account, ID: d.ID})
		}
	}
	ids, err := st.ExternalIDs(ctx, refs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(refs))
	for i, r := range refs {
		out[r.ID] = ids[i]
	}
	return out, nil
}

// externalIDProblems is every way cfg would change an ExternalId Redis already holds:
// check-config prints them, serve refuses to start and a reload is refused on them.
func externalIDProblems(ctx context.Context, st *store.Store, cfg *config.Config) (config.Problems, error) {
	issued, err := issuedExternalIDs(ctx, st, cfg)
	if err != nil {
		return nil, err
	}
	return cfg.ExternalIDProblems(issued), nil
}

// redisCheckTimeout bounds check-config's look at Redis: an unreachable one is reported,
// not waited for.
const redisCheckTimeout = 3 * time.Second

// checkIssued is check-config's comparison with Redis. It returns the problems found and
// a line to print when the comparison could not be made (or "" when it was, or when no
// AWS destination needs it).
func checkIssued(ctx context.Context, cfg *config.Config) (config.Problems, string) {
	if !slices.ContainsFunc(cfg.Destinations, func(d destination.Destination) bool { return d.Connector.IsAWS() }) {
		return nil, ""
	}
	o := storeOptions(cfg.Redis)
	o.CheckTimeout = redisCheckTimeout // one try: a check, not a wait
	st, err := store.Connect(o)
	if err != nil {
		return nil, "redis.url: cannot be opened: the ExternalIds were not compared with those Redis holds (serve compares them at start and on reload, and refuses a change)"
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	problems, err := externalIDProblems(ctx, st, cfg)
	if err != nil {
		return nil, fmt.Sprintf("redis.url: not reachable (%s): the ExternalIds were not compared with those Redis holds (serve compares them at start and on reload, and refuses a change)", redisError(err))
	}
	return problems, ""
}

// redisError says why Redis did not answer without anything the URL holds.
func redisError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within " + redisCheckTimeout.String()
	}
	return err.Error() // dial and protocol errors name host:port at most, never the password
}

func externalIDsCmd(e env) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "external-ids",
		Short: "Print the ExternalIds Redis holds, as config lines ready to pin",
		Long: `external-ids reads the ExternalId Redis holds for each AWS destination and prints
them as YAML: add each external_id line to the destination with that id in the config.
A pinned ExternalId survives an empty or rebuilt Redis; one that lives only in Redis does
not, and every customer's trust policy would stop matching. Run it before any Redis
migration or rebuild, after adding destinations, and keep its output with your backups.
Destinations Redis holds that the config no longer lists are printed as comments.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, st, err := loadWithStore(path, e.getenv)
			if err != nil {
				return err
			}
			defer st.Close()
			all, err := st.AllExternalIDs(cmd.Context())
			if err != nil {
				return fmt.Errorf("read ExternalIds from redis: %w", err)
			}
			printExternalIDs(e.stdout, cfg, path, all)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "relay.yaml", "path of the YAML config")
	return cmd
}

// printExternalIDs writes the configured AWS destinations' stored ExternalIds as YAML,
// then, as comments, the configured ones with none yet and those the config does not list.
func printExternalIDs(w io.Writer, cfg *config.Config, path string, all []store.IssuedExternalID) {
	stored := map[store.Ref]string{}
	for _, s := range all {
		stored[s.Ref] = s.ExternalID
	}
	fmt.Fprintf(w, "# ExternalIds held in Redis for %s. Add each external_id line to the destination\n", path)
	fmt.Fprintf(w, "# with that id: a pinned ExternalId survives an empty or rebuilt Redis.\n")
	fmt.Fprintln(w, "destinations:")
	var notYet []string
	configured := map[store.Ref]bool{}
	for _, d := range cfg.Destinations {
		r := store.Ref{Account: d.Account, ID: d.ID}
		configured[r] = true
		if !d.Connector.IsAWS() {
			continue
		}
		ext := stored[r]
		if ext == "" {
			notYet = append(notYet, d.ID)
			continue
		}
		note := "lives only in Redis: pin it"
		switch want := d.ConfiguredExternalID(); {
		case want != "" && want != ext:
			note = "the config gives " + want + " and is refused until it pins this one"
		case d.PinnedExternalID != "":
			note = "pinned"
		case d.DerivedExternalID != "":
			note = "derived from identity.external_id_secret"
		}
		fmt.Fprintf(w, "  - id: %s\n    external_id: %s   # %s, account %s: %s\n", d.ID, ext, d.Connector, d.Account, note)
	}
	for _, id := range notYet {
		fmt.Fprintf(w, "# %s: no ExternalId issued yet (serve stores one when it first sees the destination)\n", id)
	}
	var others []store.IssuedExternalID
	for _, s := range all {
		if !configured[s.Ref] {
			others = append(others, s)
		}
	}
	slices.SortFunc(others, func(a, b store.IssuedExternalID) int {
		return strings.Compare(a.Account+"\x00"+a.ID, b.Account+"\x00"+b.ID)
	})
	if len(others) > 0 {
		fmt.Fprintln(w, "# In Redis but not in this config (state kept for when it comes back; pin an AWS one then):")
	}
	for _, s := range others {
		fmt.Fprintf(w, "#   - id: %s   # account %s\n#     external_id: %s\n", s.ID, s.Account, s.ExternalID)
	}
}

// loadWithStore loads the config at path and connects to the Redis it names: what the
// commands that read Redis without serving start with.
func loadWithStore(path string, getenv func(string) string) (*config.Config, *store.Store, error) {
	cfg, err := config.Load(path, getenv)
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Connect(storeOptions(cfg.Redis))
	if err != nil {
		return nil, nil, fmt.Errorf("redis.url: %w", err)
	}
	return cfg, st, nil
}
