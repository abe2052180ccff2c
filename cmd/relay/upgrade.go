package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/mercamap/relay"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/upgrade"
)

// knownReleases is every release this build knows, oldest first; the last is this one.
func knownReleases() []upgrade.Release { return upgrade.Releases(relay.Version()) }

// thisRelease is this build's release: what its heartbeat says.
func thisRelease() upgrade.Release {
	known := knownReleases()
	return known[len(known)-1]
}

// revision is the commit the binary was built from, as the Go toolchain recorded it
// ("" when built outside a checkout).
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

// buildInfo is relay_build_info: 1, labelled with the release, the commit and Go's version.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "relay_build_info",
		Help:        "Always 1; its labels name this replica's release, the commit it was built from and the Go version.",
		ConstLabels: prometheus.Labels{"version": relay.Version(), "revision": revision(), "goversion": runtime.Version()}})
	g.Set(1)
	return g
}

// versionLine is what relay version and relay --version print.
func versionLine() string {
	line := "relay " + relay.Version()
	if rev := revision(); rev != "" {
		line += " (" + rev + ")"
	}
	r := thisRelease()
	return fmt.Sprintf("%s, %s; rolls over relay %s; state formats: reads %v, writes %v", line, runtime.Version(), upgrade.Label(r.Previous), r.Reads, r.Writes)
}

func versionCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this release's version, the release it rolls over and the state formats it reads and writes",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, versionLine())
			return err
		},
	}
}

func upgradeCmd(e env) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Show or finish a rolling upgrade: each replica's release and the state format in force",
		Long: `A rolling upgrade runs replicas of two releases side by side on the same Redis and
RabbitMQ. The state format in force is the one every replica writes; a release that
brings a newer one keeps writing the old one until every live replica can read the new,
then switches by itself (a heartbeat after the last old replica's has lapsed).

  relay upgrade status   each live replica, its release and formats; the format in force; what is pending
  relay upgrade finish   switch to this release's newest format now (refused while a live replica cannot read it)

Both read the config for redis: and delivery.lease_ttl (how long a heartbeat counts as live).`,
	}
	cmd.PersistentFlags().StringVar(&path, "config", "relay.yaml", "path of the YAML config")
	open := func(ctx context.Context) (*store.Store, time.Duration, error) {
		cfg, err := config.Load(path, e.getenv)
		if err != nil {
			return nil, 0, err
		}
		o := storeOptions(cfg.Redis)
		o.CheckTimeout = redisCheckTimeout
		st, err := store.Connect(o)
		if err != nil {
			return nil, 0, fmt.Errorf("redis.url: %w", err)
		}
		return st, cfg.Delivery.LeaseTTL, nil
	}
	// withStore runs do with the deployment's Redis, bounded like check-config's look.
	withStore := func(c *cobra.Command, do func(ctx context.Context, st *store.Store, ttl time.Duration) error) error {
		st, ttl, err := open(c.Context())
		if err != nil {
			return err
		}
		defer st.Close()
		ctx, cancel := context.WithTimeout(c.Context(), redisCheckTimeout)
		defer cancel()
		return do(ctx, st, ttl)
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Each live replica and its release, the state format in force and what is pending",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withStore(c, func(ctx context.Context, st *store.Store, ttl time.Duration) error {
				s, err := upgrade.ReadStatus(ctx, st, ttl)
				if err != nil {
					return err
				}
				printStatus(e.stdout, s, thisRelease(), time.Now())
				return nil
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "finish",
		Short: "Switch the deployment to this release's newest state format now",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withStore(c, func(ctx context.Context, st *store.Store, ttl time.Duration) error {
				said, err := upgrade.Finish(ctx, st, ttl, thisRelease())
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(e.stdout, said)
				return err
			})
		},
	})
	return cmd
}

// printStatus writes relay upgrade status's report.
func printStatus(w io.Writer, s upgrade.Status, me upgrade.Release, now time.Time) {
	release := s.Release
	if release == "" {
		release = upgrade.Label(upgrade.Unnumbered) + " (no numbered release has started here)"
	}
	since := "always"
	if s.FormatSince != "" {
		since = fmt.Sprintf("since relay %s switched to it at %s", s.FormatSince, s.SwitchedAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "this command: relay %s (reads formats %v, writes %v)\n", me.Version, me.Reads, me.Writes)
	fmt.Fprintf(w, "deployment:   newest release started relay %s\n", release)
	fmt.Fprintf(w, "state format: %d in force (%s)\n", s.Format, since)
	fmt.Fprintf(w, "replicas:     %d live\n", len(s.Replicas))
	for _, r := range s.Replicas {
		fmt.Fprintf(w, "  %-40s relay %-10s reads %v writes %v  heartbeat %s ago\n", r.Owner, r.Release.Version,
			r.Release.Reads, r.Release.Writes, now.Sub(r.Seen).Round(time.Millisecond))
	}
	if p := s.Pending(me); p != "" {
		fmt.Fprintf(w, "pending:      %s\n", p)
	} else {
		fmt.Fprintf(w, "pending:      nothing: every replica writes format %d\n", s.Format)
	}
}
