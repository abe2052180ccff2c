package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/signature"
)

func deriveKeyCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "derive-key",
		Short: "Print the external HMAC key (hex) derived from APP_ENC_KEY",
		Long: `derive-key reads the Fetcher master key APP_ENC_KEY (standard base64) from the
environment, or from standard input when the variable is unset, and prints the external
HMAC key derived from it (HKDF-SHA256, info "fetcher-external-hmac-v1") in hex. Give the
relay that derived key (signature.keys) so it never needs the master key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			master := e.getenv("APP_ENC_KEY")
			if master == "" {
				line, err := bufio.NewReader(e.stdin).ReadString('\n')
				if err != nil && line == "" {
					return fmt.Errorf("APP_ENC_KEY is not set and nothing was read from standard input")
				}
				master = strings.TrimSpace(line)
			}
			key, err := signature.DeriveExternalKey(master)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, hex.EncodeToString(key))
			return nil
		},
	}
}
