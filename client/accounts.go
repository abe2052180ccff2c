package client

import (
	"context"
	"net/http"
)

// WhoAmI is the scope of the client's token.
func (c *Client) WhoAmI(ctx context.Context) (WhoAmI, error) {
	var out WhoAmI
	return out, c.do(ctx, call{method: http.MethodGet, path: "/v1/whoami"}, &out)
}

// Accounts lists every account, the file's and the API's (an admin token).
func (c *Client) Accounts(ctx context.Context) ([]Account, error) {
	var out AccountList
	return out.Accounts, c.do(ctx, call{method: http.MethodGet, path: "/v1/accounts"}, &out)
}

// Account is one account (an admin token).
func (c *Client) Account(ctx context.Context, id string) (Account, error) {
	var out Account
	return out, c.do(ctx, call{method: http.MethodGet, path: path("v1", "accounts", id)}, &out)
}

// CreateAccount adds an account (an admin token).
func (c *Client) CreateAccount(ctx context.Context, body AccountCreate) (Account, error) {
	var out Account
	return out, c.do(ctx, call{method: http.MethodPost, path: "/v1/accounts", body: body}, &out)
}

// ChangeAccount changes an account the API made (an admin token).
func (c *Client) ChangeAccount(ctx context.Context, id string, body AccountChange) (Account, error) {
	var out Account
	return out, c.do(ctx, call{method: http.MethodPatch, path: path("v1", "accounts", id), body: body}, &out)
}

// DeleteAccount deletes an account the API made, once it has no destination.
func (c *Client) DeleteAccount(ctx context.Context, id string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: path("v1", "accounts", id)}, nil)
}

// SignInLink mints a single-use console sign-in link for the account (an admin token).
func (c *Client) SignInLink(ctx context.Context, account string) (SignInLink, error) {
	var out SignInLink
	return out, c.do(ctx, call{method: http.MethodPost, path: path("v1", "accounts", account, "sign-in-links")}, &out)
}

// EndSessions ends every console session of the account and its unused links.
func (c *Client) EndSessions(ctx context.Context, account string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: path("v1", "accounts", account, "sessions")}, nil)
}

// OpenSession exchanges a sign-in link's code for a session; it needs no token. Use the
// session's Token in a new Client.
func (c *Client) OpenSession(ctx context.Context, code string) (Session, error) {
	var out Session
	return out, c.do(ctx, call{method: http.MethodPost, path: "/v1/sessions", body: SessionRequest{Code: code}}, &out)
}

// SignOut ends the session of the client's token.
func (c *Client) SignOut(ctx context.Context) error {
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/sessions/current"}, nil)
}
