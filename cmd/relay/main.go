// Command relay takes signed job events off RabbitMQ and writes each one into
// customers' own event buses. `relay --help` lists its subcommands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}

// env is what a command may read of the process: its environment and standard streams.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "relay",
		Short: "Relay signed job events from RabbitMQ into customers' event buses",
		Long: `relay consumes the Fetcher Worker's signed job events from a RabbitMQ exchange,
verifies each one, keeps it durably in Redis, and writes it to every matching customer
destination (Amazon EventBridge, Amazon Kinesis, Google Pub/Sub), in arrival order.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionLine(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(serveCmd(e), checkConfigCmd(e), deriveKeyCmd(e), publishCmd(e), watchCmd(e), destinationsCmd(e), externalIDsCmd(e), exportCmd(e), accountsCmd(e), signInLinkCmd(e), setupTemplateCmd(e), versionCmd(e), upgradeCmd(e))
	return root.ExecuteContext(ctx)
}
