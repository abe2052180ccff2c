package api

import (
	"github.com/mercamap/relay/internal/config"
)

// apiLimitsOf fills what a config left at zero (a test's hand-made config) with the
// defaults; the tokens are left out, so they are not kept twice.
func apiLimitsOf(api config.API) config.API {
	def := config.DefaultAPI()
	api.Tokens = nil
	if api.SubscriptionsPerToken <= 0 {
		api.SubscriptionsPerToken = def.SubscriptionsPerToken
	}
	if api.SubscriptionsPerAccount <= 0 {
		api.SubscriptionsPerAccount = def.SubscriptionsPerAccount
	}
	if api.TestsPerDestination.Count <= 0 || api.TestsPerDestination.Per <= 0 {
		api.TestsPerDestination = def.TestsPerDestination
	}
	if api.TestsPerAccount.Count <= 0 || api.TestsPerAccount.Per <= 0 {
		api.TestsPerAccount = def.TestsPerAccount
	}
	return api
}
