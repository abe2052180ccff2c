package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/client"
)

func watchCmd(e env) *cobra.Command {
	var flags apiFlags
	var maxHeld int
	cmd := &cobra.Command{
		Use:   "watch CHANNEL",
		Short: "Follow a channel (destination:<id> or account:<id>) and print each change",
		Long: `watch follows one channel of a running relay the way the API contract says a client
must: it subscribes, loads the snapshot, applies each event once and in sequence order,
fills gaps by replay, loads a new snapshot when its cursor expired or the relay says
resync.required, and reconnects (with Last-Event-ID) whenever the connection drops. It
prints the destinations' status from each snapshot, then one line per event applied.
It stops on Ctrl-C, or when the relay refuses the token or the channel.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			updates := c.Follow(cmd.Context(), args[0], client.FollowOptions{MaxHeld: maxHeld,
				Logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			for u, err := range updates {
				switch {
				case err != nil:
					return err
				case u.Snapshot:
					printSnapshot(e.stdout, u)
				default:
					printEvent(e.stdout, *u.Event, u.Card)
				}
			}
			return nil
		},
	}
	flags.register(cmd)
	cmd.Flags().IntVar(&maxHeld, "max-held", 1000, "early events held while a gap fills, before a new snapshot is loaded instead")
	return cmd
}

func printSnapshot(w io.Writer, v client.Update) {
	fmt.Fprintf(w, "snapshot %s at sequence %d\n", v.Channel, v.Sequence)
	for _, id := range slices.Sorted(maps.Keys(v.Destinations)) {
		fmt.Fprintln(w, "  "+cardLine(v.Destinations[id]))
	}
}

func cardLine(c client.Card) string {
	s := fmt.Sprintf("%s (%s): %s, %d consecutive failures", c.ID, c.Connector, c.Status, c.ConsecutiveFailures)
	if c.Disabled != nil {
		s += "; disabled: " + c.Disabled.Reason
	} else if f := c.LastFailure; f != nil {
		s += "; last failure " + string(f.Class) + ": " + f.Message
	}
	return s
}

// printEvent prints one applied event on one line: sequence, time, type, then what it
// did to its destination.
func printEvent(w io.Writer, ev client.ChannelEvent, card *client.Card) {
	var data struct {
		EventID string `json:"event_id"`
		Message string `json:"message"`
		Reason  string `json:"reason"`
		Test    bool   `json:"test"`
	}
	raw, _ := json.Marshal(ev.Data)
	_ = json.Unmarshal(raw, &data)
	typ := string(ev.Type)
	parts := []string{fmt.Sprintf("#%d", ev.Sequence), ev.Time.Format(time.RFC3339), typ}
	if card != nil {
		parts = append(parts, fmt.Sprintf("%s → %s, %d failures", card.ID, card.Status, card.ConsecutiveFailures))
	}
	if data.EventID != "" {
		parts = append(parts, "event "+data.EventID)
	}
	if data.Test {
		parts = append(parts, "(test)")
	}
	switch {
	case typ == "destination.replayed" && data.Message != "":
		// "replay from 2024-05-01T12:00:00Z asked for", and whether it waits for an activation.
		parts = append(parts, "— "+data.Message)
	case strings.HasPrefix(typ, "delivery.") && typ != "delivery.succeeded" && data.Message != "":
		// delivery.retried too: "retry of attempt 7: delivered", or the bus's refusal.
		parts = append(parts, "— "+data.Message)
	case data.Reason != "":
		parts = append(parts, "— "+data.Reason)
	}
	fmt.Fprintln(w, strings.Join(parts, "  "))
}
