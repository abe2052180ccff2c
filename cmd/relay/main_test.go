package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runRelay(t *testing.T, env map[string]string, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut strings.Builder
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

func TestDeriveKeyPrintsTheExternalKeyFromEnvOrStdin(t *testing.T) {
	const master, want = "dGhpcy1pcy1hLTMyLWJ5dGUtbWFzdGVyLWtleTEyMzQ=", testKeyHex + "\n"
	if out, err := runRelay(t, map[string]string{"APP_ENC_KEY": master}, "", "derive-key"); err != nil || out != want {
		t.Fatalf("from env: %q, %v", out, err)
	}
	if out, err := runRelay(t, nil, master+"\n", "derive-key"); err != nil || out != want {
		t.Fatalf("from stdin: %q, %v", out, err)
	}
	if _, err := runRelay(t, map[string]string{"APP_ENC_KEY": "not base64!"}, "", "derive-key"); err == nil || strings.Contains(err.Error(), "not base64!") {
		t.Fatalf("bad master key: %v (want an error that does not echo the key)", err)
	}
}

func TestCheckConfigPrintsEveryProblemWithItsPathAndFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.yaml")
	bad := `
rabbitmq: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: fetcher.job.events}
redis: {url: env:RELAY_REDIS_URL}
signature: {keys: [env:HMAC]}
dedup_window: 1h
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: a, account: acct_1, connector: sqs}
  - {id: a, account: acct_2, connector: eventbridge, bus_arn: "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/x", role_arn: "arn:aws:iam::444455556666:role/r"}
`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runRelay(t, map[string]string{"HMAC": testKeyHex}, "", "check-config", "--config", path)
	if err == nil {
		t.Fatal("check-config exited zero on a bad file")
	}
	for _, want := range []string{"redis.url:", "dedup_window:", "destinations[0].connector:", "destinations[1].id:",
		"destinations[1].account:", "destinations[1].bus_arn:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	good := `
rabbitmq: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: fetcher.job.events}
redis: {url: "redis://127.0.0.1:6379/0"}
signature: {keys: [env:HMAC]}
accounts:
  - {id: acct_1, tenants: [single-tenant]}
`
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runRelay(t, map[string]string{"HMAC": testKeyHex}, "", "check-config", "--config", path); err != nil || !strings.Contains(out, ": ok") {
		t.Fatalf("a good file: %q, %v", out, err)
	}
}

func TestCheckConfigWarnsOfASecretFileOthersCanReadAndRefusesDevZero(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte("admin-token-s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tokenFile, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	cfg := func(ref string) string {
		path := filepath.Join(dir, "relay.yaml")
		doc := `
rabbitmq: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: fetcher.job.events}
redis: {url: "redis://127.0.0.1:6379/0"}
signature: {keys: [env:HMAC]}
api: {tokens: [{scope: admin, token: "file:` + ref + `"}]}
`
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	out, err := runRelay(t, map[string]string{"HMAC": testKeyHex}, "", "check-config", "--config", cfg(tokenFile))
	if err != nil || !strings.Contains(out, "api.tokens[0].token: warning: ") || !strings.Contains(out, "mode 0644") || !strings.Contains(out, ": ok") {
		t.Fatalf("a 0644 token file: want a warning and ok, got %q, %v", out, err)
	}
	if strings.Contains(out, "admin-token-s3cret") {
		t.Fatal("check-config printed the secret")
	}
	out, err = runRelay(t, map[string]string{"HMAC": testKeyHex}, "", "check-config", "--config", cfg("/dev/zero"))
	if err == nil || !strings.Contains(out, "api.tokens[0].token: cannot read file /dev/zero: it is not a regular file") {
		t.Fatalf("file:/dev/zero: want refused, got %q, %v", out, err)
	}
}
