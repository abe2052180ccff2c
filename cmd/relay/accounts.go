package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/client"
)

// accountsCmd is `relay accounts`: the accounts routes of the API (an admin token).
func accountsCmd(e env) *cobra.Command {
	var flags apiFlags
	var tenants, sources []string
	var storeIDPath string
	body := func(cmd *cobra.Command) client.AccountChange {
		var b client.AccountChange
		if cmd.Flags().Changed("tenants") {
			b.Tenants = &tenants
		}
		if cmd.Flags().Changed("sources") {
			b.Sources = &sources
		}
		b.StoreIDPath = flagValue(cmd)("store-id-path", storeIDPath)
		return b
	}
	show := func(a client.Account) {
		fmt.Fprintf(e.stdout, "%s: tenants %s, %d destinations, managed by %s\n", a.ID, strings.Join(a.Tenants, ","), a.Destinations, a.ManagedBy)
	}
	cmd := &cobra.Command{
		Use:   "accounts [list | create ID --tenants T,… | change ID … | delete ID]",
		Short: "List, create, change or delete accounts through the API (an admin token)",
		Long: `accounts manages the accounts of a running relay through its API, with an admin token.
list (the default) prints every account, the file's and the API's, with where each is
defined and how many destinations it has. create adds an account routed by its tenants
(and sources) on every replica at once; change sets its tenants, sources or
store_id_path; delete removes it once it has no destination. The file's accounts are
changed in the file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			accounts, err := c.Accounts(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ACCOUNT\tTENANTS\tDESTINATIONS\tMANAGED BY")
			for _, a := range accounts {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", a.ID, strings.Join(a.Tenants, ","), a.Destinations, a.ManagedBy)
			}
			return w.Flush()
		},
	}
	flags.register(cmd)
	create := &cobra.Command{
		Use: "create ID --tenants T,… [--sources S,…] [--store-id-path P]", Short: "Add an account", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			b := body(cmd)
			a, err := c.CreateAccount(cmd.Context(), client.AccountCreate{ID: args[0], Tenants: b.Tenants, Sources: b.Sources, StoreIDPath: b.StoreIDPath})
			if err != nil {
				return err
			}
			show(a)
			return nil
		},
	}
	change := &cobra.Command{
		Use: "change ID [--tenants T,…] [--sources S,…] [--store-id-path P]", Short: "Change an account the API made", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b := body(cmd)
			if b == (client.AccountChange{}) {
				return fmt.Errorf("nothing to change: pass --tenants, --sources or --store-id-path")
			}
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			a, err := c.ChangeAccount(cmd.Context(), args[0], b)
			if err != nil {
				return err
			}
			show(a)
			return nil
		},
	}
	for _, c := range []*cobra.Command{create, change} {
		c.Flags().StringSliceVar(&tenants, "tenants", nil, "the producer tenants routed to the account")
		c.Flags().StringSliceVar(&sources, "sources", nil, "only events of these ce-source values (default: all)")
		c.Flags().StringVar(&storeIDPath, "store-id-path", "", "where the event's store id is (default metadata.store_id)")
	}
	del := &cobra.Command{
		Use: "delete ID", Short: "Delete an account the API made, once it has no destination", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := flags.client(e.getenv)
			if err != nil {
				return err
			}
			if err := c.DeleteAccount(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s deleted\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, change, del)
	return cmd
}
