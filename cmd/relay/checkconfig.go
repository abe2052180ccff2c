package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/config"
)

func checkConfigCmd(e env) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "check-config",
		Short: "Validate a config file and print every problem with its path",
		Long: `check-config reads the YAML config (and every env: / file: secret it references),
prints each problem on its own line as "path: message", and exits non-zero when there is any.
A warning ("path: warning: message", such as a secret file others can read) does not fail it.
serve refuses to start on the same problems. An AWS destination must pin its
external_id or have it derived from identity.external_id_secret (an id that lived only in
Redis would change if Redis were lost; relay external-ids prints the pins of the ids Redis
holds). When the file is valid and has AWS
destinations, it also reads redis.url (a few seconds at most) and refuses a file that would
change an ExternalId Redis already holds; when Redis cannot be reached it says the
comparison was not made, and serve makes it at start and on reload.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(path, e.getenv)
			var problems config.Problems
			if errors.As(err, &problems) {
				for _, p := range problems {
					fmt.Fprintln(e.stdout, p.String()) // as serve and a refused reload log them
				}
				return fmt.Errorf("%s: %d problem(s)", path, len(problems))
			} else if err != nil {
				return err
			}
			// The file is valid; every AWS destination's ExternalId must be kept by the
			// file (pinned or derived), and must not change one Redis already holds (when
			// Redis can be reached from here).
			problems = cfg.UnkeptExternalIDs(path)
			issued, skipped := checkIssued(cmd.Context(), cfg)
			problems = append(problems, issued...)
			for _, p := range problems {
				fmt.Fprintf(e.stdout, "%s: %s\n", p.Path, p.Message)
			}
			if len(problems) > 0 {
				return fmt.Errorf("%s: %d problem(s)", path, len(problems))
			}
			if skipped != "" {
				fmt.Fprintln(e.stdout, skipped)
			}
			for _, w := range cfg.Warnings {
				fmt.Fprintf(e.stdout, "%s: warning: %s\n", w.Path, w.Message)
			}
			fmt.Fprintf(e.stdout, "%s: ok (%d accounts, %d destinations)\n", path, len(cfg.Accounts), len(cfg.Destinations))
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "relay.yaml", "path of the YAML config")
	return cmd
}
