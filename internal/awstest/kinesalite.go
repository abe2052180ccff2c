package awstest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/mercamap/relay/internal/testpeer"
)

// KinesaliteVersion is the npm package tests run (see the peers notes: it binds where told).
const KinesaliteVersion = "3.3.3"

// StartKinesalite starts a private in-memory kinesalite on a free loopback port and
// kills it when the test ends; it returns the endpoint (http://127.0.0.1:P) once it
// answers. kinesalite comes from $KINESALITE_DIR, or is npm-installed once into the
// user cache directory.
func StartKinesalite(t testing.TB) string {
	t.Helper()
	testpeer.Need(t, "node")
	dir := kinesaliteDir(t)
	port := testpeer.FreePort(t)
	logPath := filepath.Join(t.TempDir(), "kinesalite.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Its CLI binds every interface; the library call binds loopback only.
	script := fmt.Sprintf("require('kinesalite')({createStreamMs: 50, shardLimit: 10000}).listen(%d, '127.0.0.1')", port)
	cmd := exec.Command("node", "-e", script)
	cmd.Dir = dir // node -e resolves require() from the working directory
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, and killed with the test binary even if no Cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start kinesalite: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Any HTTP answer (it refuses an unsigned GET) means it is listening.
		resp, err := http.Get(endpoint)
		if err == nil {
			resp.Body.Close()
			return endpoint
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("kinesalite exited before it answered: %s", log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("kinesalite did not answer on %s within 20s: %v\n%s", endpoint, err, log)
		}
	}
}

// kinesaliteDir returns a directory whose node_modules holds kinesalite, installing it
// with npm under a file lock the first time, so parallel test binaries install it once.
func kinesaliteDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KINESALITE_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Fatalf("kinesalite: no cache directory (%v): set KINESALITE_DIR", err)
		}
		dir = filepath.Join(cache, "relay-test", "kinesalite-"+KinesaliteVersion)
	}
	installed := func() bool {
		_, err := os.Stat(filepath.Join(dir, "node_modules", "kinesalite", "package.json"))
		return err == nil
	}
	if installed() {
		return dir
	}
	testpeer.Need(t, "npm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if installed() { // another test binary installed it while we waited
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--no-save",
		"--prefix", dir, "kinesalite@"+KinesaliteVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install kinesalite@%s into %s: %v\n%s", KinesaliteVersion, dir, err, out)
	}
	if !installed() {
		t.Fatalf("npm install kinesalite@%s left no node_modules/kinesalite in %s", KinesaliteVersion, dir)
	}
	return dir
}

// KinesisClient is a client for kinesalite itself (dummy keys, one attempt), for
// creating and reading streams; the sinks under test use their own.
func KinesisClient(endpoint string) *kinesis.Client {
	return kinesis.New(kinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDKINESALITE", "secret", ""),
		Retryer:      aws.NopRetryer{},
	})
}

// CreateStream creates a one-shard stream (one shard keeps every record in one order)
// and waits until it is ACTIVE.
func CreateStream(t testing.TB, endpoint, name string) {
	t.Helper()
	c := KinesisClient(endpoint)
	ctx := t.Context()
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)})
		if err == nil && out.StreamDescription.StreamStatus == types.StreamStatusActive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s not ACTIVE within 10s (last error: %v)", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ReadStream returns every record on the stream's one shard, in order, polling until at
// least n are there (at most 10 s).
func ReadStream(t testing.TB, endpoint, name string, n int) []types.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		records := Records(t, endpoint, name)
		switch {
		case len(records) >= n:
			return records
		case time.Now().After(deadline):
			t.Fatalf("%d records on %s after 10s, want %d", len(records), name, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Records returns the records on the stream's one shard now, in order.
func Records(t testing.TB, endpoint, name string) []types.Record {
	t.Helper()
	c := KinesisClient(endpoint)
	ctx := t.Context()
	it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(name),
		ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatalf("shard iterator for %s: %v", name, err)
	}
	var records []types.Record
	for iter := it.ShardIterator; iter != nil; {
		out, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if len(out.Records) == 0 {
			return records // caught up with the shard
		}
		records = append(records, out.Records...)
		iter = out.NextShardIterator
	}
	return records
}
