package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// signInLinkCmd is `relay sign-in-link ACCOUNT`: a console sign-in link for the account,
// minted through the API with an admin token.
func signInLinkCmd(e env) *cobra.Command {
	var flags apiFlags
	cmd := &cobra.Command{
		Use:   "sign-in-link ACCOUNT",
		Short: "Mint a single-use console sign-in link for an account (an admin token)",
		Long: `sign-in-link asks a running relay for a link that signs one person into the console as
the account, without a token of the config file: the code in the link's fragment is good
once, within api.sign_in_link_ttl (5m by default), and opens a session of
api.session_ttl (8h). The link is printed on the first line, its expiry on the second.
Hand it over as you would a password; the platform's backend calls the same route
(POST /v1/accounts/{id}/sign-in-links). DELETE /v1/accounts/{id}/sessions ends every
session of the account and every link not used yet.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			link, err := c.SignInLink(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, link.URL)
			fmt.Fprintf(e.stdout, "expires at %s (in %s); good once\n", link.ExpiresAt.Format(time.RFC3339),
				time.Until(link.ExpiresAt).Round(time.Second))
			return nil
		},
	}
	flags.register(cmd)
	return cmd
}
