package main

import (
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/api"
)

// accountsCmd is `relay accounts`: the accounts routes of the API (an admin token).
func accountsCmd(e env) *cobra.Command {
	var flags apiFlags
	var tenants, sources []string
	var storeIDPath string
	body := func(cmd *cobra.Command) map[string]any {
		b := map[string]any{}
		if cmd.Flags().Changed("tenants") {
			b["tenants"] = tenants
		}
		if cmd.Flags().Changed("sources") {
			b["sources"] = sources
		}
		if cmd.Flags().Changed("store-id-path") {
			b["store_id_path"] = storeIDPath
		}
		return b
	}
	show := func(a api.Account) {
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
			var out struct {
				Accounts []api.Account `json:"accounts"`
			}
			if err := callAPI(cmd.Context(), &flags, e, http.MethodGet, "/v1/accounts", nil, &out, ""); err != nil {
				return err
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ACCOUNT\tTENANTS\tDESTINATIONS\tMANAGED BY")
			for _, a := range out.Accounts {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", a.ID, strings.Join(a.Tenants, ","), a.Destinations, a.ManagedBy)
			}
			return w.Flush()
		},
	}
	flags.register(cmd)
	create := &cobra.Command{
		Use: "create ID --tenants T,… [--sources S,…] [--store-id-path P]", Short: "Add an account", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b := body(cmd)
			b["id"] = args[0]
			var a api.Account
			if err := callAPI(cmd.Context(), &flags, e, http.MethodPost, "/v1/accounts", b, &a, ""); err != nil {
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
			if len(b) == 0 {
				return fmt.Errorf("nothing to change: pass --tenants, --sources or --store-id-path")
			}
			var a api.Account
			if err := callAPI(cmd.Context(), &flags, e, http.MethodPatch, "/v1/accounts/"+args[0], b, &a, ""); err != nil {
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
			if err := callAPI(cmd.Context(), &flags, e, http.MethodDelete, "/v1/accounts/"+args[0], nil, nil, ""); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s deleted\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, change, del)
	return cmd
}
