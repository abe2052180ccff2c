package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/destination"
)

func setupTemplateCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "setup-template eventbridge|kinesis",
		Short: "Print a connector's parameterised CloudFormation template, for the cards' quick-create links",
		Long: `setup-template prints the CloudFormation template (YAML) that creates a customer's role
for any one destination of the connector: our principal, the ExternalId, the bus or
stream (and, for kinesis, an optional KMS key) and the role's name and path are its
parameters, and its policies are the ones the cards show. Upload it once to S3, readable
by everyone, and name its URL in identity.aws_template_url with {connector} where the
connector's name goes: every AWS card then has a quick-create link (setup.quick_create_url)
that opens it in the customer's CloudFormation console with this destination's values.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{string(destination.EventBridge), string(destination.Kinesis)},
		RunE: func(_ *cobra.Command, args []string) error {
			body, err := destination.SetupTemplate(destination.Connector(args[0]))
			if err != nil {
				return err
			}
			_, err = io.WriteString(e.stdout, body)
			return err
		},
	}
}
