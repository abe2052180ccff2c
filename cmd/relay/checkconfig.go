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
serve refuses to start on the same problems.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(path, e.getenv)
			var problems config.Problems
			if errors.As(err, &problems) {
				for _, p := range problems {
					fmt.Fprintf(e.stdout, "%s: %s\n", p.Path, p.Message)
				}
				return fmt.Errorf("%s: %d problem(s)", path, len(problems))
			} else if err != nil {
				return err
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
