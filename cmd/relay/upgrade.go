package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
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
				printStatus(e.stdout, s, thisRelease(), knownReleases(), time.Now())
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

// printStatus writes relay upgrade status's report. Every string read from Redis goes
// through upgrade.Shown or is a version that read strictly: nothing planted there
// reaches the terminal unescaped.
func printStatus(w io.Writer, s upgrade.Status, me upgrade.Release, known []upgrade.Release, now time.Time) {
	fmt.Fprintf(w, "this command: relay %s (reads formats %v, writes %v)\n", me.Version, me.Reads, me.Writes)
	fmt.Fprintf(w, "deployment:   newest release started relay %s\n", deploymentRelease(s))
	fmt.Fprintf(w, "state format: %s\n", formatInForce(s))
	fmt.Fprintf(w, "replicas:     %d live\n", len(s.Replicas))
	for _, r := range s.Replicas {
		fmt.Fprintf(w, "  %s\n", replicaLine(s, r, now))
	}
	for _, u := range s.Unreadable {
		fmt.Fprintf(w, "unreadable:   %s\n", u)
	}
	if others := s.WritingOther(); len(others) > 0 {
		fmt.Fprintf(w, "writing:      %s\n", writingLine(s, others))
	}
	fmt.Fprintf(w, "pending:      %s\n", pendingLine(s, me))
	// The guard's own sentence: what serve of this release would say here.
	if err := s.Refuse(me, known); err != nil {
		fmt.Fprintf(w, "start:        refused: %s\n", err)
	} else {
		fmt.Fprintf(w, "start:        relay %s may start beside this deployment\n", me.Version)
	}
}

// deploymentRelease names the newest release started here.
func deploymentRelease(s upgrade.Status) string {
	if s.DeploymentUnreadable("release") {
		return "unknown: the value Redis holds does not read (see unreadable below)"
	}
	if s.Release == "" {
		return upgrade.Label(upgrade.Unnumbered) + " (no numbered release has started here)"
	}
	return s.Release
}

// formatInForce is the state format line: the format and since when.
func formatInForce(s upgrade.Status) string {
	switch {
	case s.Format == 0:
		return "unknown: the value Redis holds does not read (see unreadable below)"
	case s.DeploymentUnreadable("format_since"), s.DeploymentUnreadable("switched_at"):
		return fmt.Sprintf("%d in force (when and by which release it was switched to does not read: see unreadable below)", s.Format)
	case s.FormatSince != "" && s.SwitchedAt.IsZero():
		return fmt.Sprintf("%d in force (since relay %s switched to it, at a time not recorded)", s.Format, s.FormatSince)
	case s.FormatSince != "":
		return fmt.Sprintf("%d in force (since relay %s switched to it at %s)", s.Format, s.FormatSince, s.SwitchedAt.UTC().Format(time.RFC3339))
	case s.Format != 1:
		return fmt.Sprintf("%d in force (no release is recorded as switching to it)", s.Format)
	}
	return fmt.Sprintf("%d in force (always)", s.Format)
}

// replicaLine is one live replica: its release and formats, or that its heartbeat does
// not read.
func replicaLine(s upgrade.Status, r upgrade.Replica, now time.Time) string {
	ago := now.Sub(r.Seen).Round(time.Millisecond)
	if r.Unreadable != nil {
		if r.Seen.UnixMilli() <= 0 {
			return fmt.Sprintf("%-40s heartbeat unreadable (see below); it may be live", upgrade.Shown(r.Owner))
		}
		return fmt.Sprintf("%-40s heartbeat unreadable (see below), %s ago", upgrade.Shown(r.Owner), ago)
	}
	line := fmt.Sprintf("%-40s relay %-10s reads %v writes %v  heartbeat %s ago", upgrade.Shown(r.Owner), r.Release.Version,
		r.Release.Reads, r.Release.Writes, ago)
	if s.Format > 0 && !slices.Equal(r.Release.Writes, []int{s.Format}) {
		line += fmt.Sprintf("  (not the format in force, %d)", s.Format)
	}
	return line
}

// writingLine names the replicas whose heartbeat says they write another format than
// the one in force.
func writingLine(s upgrade.Status, others []upgrade.Replica) string {
	names := make([]string, len(others))
	for i, r := range others {
		names[i] = fmt.Sprintf("%s writes format %v", upgrade.Shown(r.Owner), r.Release.Writes)
	}
	return fmt.Sprintf("not every replica writes format %d, the one in force: %s (a replica catches up at its next heartbeat after a switch; one that does not, does not follow this deployment)",
		s.Format, strings.Join(names, ", "))
}

// pendingLine says what a switch waits for, or that nothing is pending: "nothing" only
// when every value read and every replica writes the format in force.
func pendingLine(s upgrade.Status, me upgrade.Release) string {
	if p := s.Pending(me); p != "" {
		return p
	}
	switch {
	case s.Format > me.Target():
		return fmt.Sprintf("no switch this release can make: state format %d is in force, newer than relay %s writes", s.Format, me.Version)
	case len(s.Unreadable) > 0:
		return fmt.Sprintf("no switch pending, and none is made while a value above does not read; the replicas that read write format %d", s.Format)
	case len(s.WritingOther()) > 0:
		return "no switch pending, but not every replica writes the format in force (writing, above)"
	}
	return fmt.Sprintf("nothing: every replica writes format %d", s.Format)
}
