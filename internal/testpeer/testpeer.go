// Package testpeer starts real Redis and RabbitMQ servers for tests: each on its own
// loopback ports, with its files under t.TempDir(), stopped when the test ends.
// It is test support only; the relay itself never imports it.
package testpeer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitServer is run directly: the /usr/sbin wrapper would switch to the rabbitmq user.
const rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// Need reports a missing peer binary: t.Skip on a laptop without it, t.Fatal when CI env var is set.
// binary is a name looked up in PATH or an absolute path.
func Need(t testing.TB, binary string) {
	t.Helper()
	var err error
	if filepath.IsAbs(binary) {
		var fi os.FileInfo
		if fi, err = os.Stat(binary); err == nil && fi.Mode()&0o111 == 0 {
			err = errors.New("not executable")
		}
	} else {
		_, err = exec.LookPath(binary)
	}
	if err == nil {
		return
	}
	msg := fmt.Sprintf("peer %s unavailable (%v); install with scripts/peers.sh install", binary, err)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// FreePort returns a free loopback TCP port below 32768.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// freePort picks random candidates in 20000–32000, below the kernel's ephemeral range, and
// keeps the first one it can listen on. The port is free now; a server must bind it soon.
func freePort() (int, error) {
	for range 100 {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free port in 20000-32000 after 100 tries")
}

// proc is one server process. Its output goes to a log file for diagnosing failures.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// startProc runs name in its own process group, so signals for the test binary's group miss it,
// with Pdeathsig so it dies with the test binary even when no Cleanup runs (a panic, a timeout,
// or the package-shared broker). Pdeathsig fires when the forking OS thread exits; Go keeps its
// threads unless a goroutine exits while locked to one, which the tests here do not do.
func startProc(logPath string, env []string, name string, args ...string) (*proc, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig and waits up to limit for the exit, then kills the process group.
// SIGKILL goes to the whole group, so helpers such as erl_child_setup go too.
func (p *proc) signal(sig syscall.Signal, limit time.Duration) error {
	if !p.running() {
		return nil
	}
	pid := p.cmd.Process.Pid
	if sig == syscall.SIGKILL {
		pid = -pid
	}
	syscall.Kill(pid, sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(limit):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s ignored %v for %v; killed", filepath.Base(p.cmd.Path), sig, limit)
	}
}

// waitReady polls ready every interval until it succeeds, p exits, or limit passes.
// The error carries the tail of each log.
func waitReady(p *proc, limit, interval time.Duration, ready func() error, logs ...string) error {
	deadline := time.Now().Add(limit)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		name := filepath.Base(p.cmd.Path)
		switch {
		case !p.running():
			err = fmt.Errorf("%s exited (%v) before it was ready: %v", name, p.cmd.ProcessState, err)
		case time.Now().After(deadline):
			err = fmt.Errorf("%s not ready after %v: %v", name, limit, err)
		default:
			time.Sleep(interval)
			continue
		}
		return fmt.Errorf("%w%s", err, tails(logs))
	}
}

// tails returns the last lines of each log, for a failure message.
func tails(paths []string) string {
	var b strings.Builder
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-30):]
		fmt.Fprintf(&b, "\n--- tail of %s ---\n%s", path, strings.Join(lines, "\n"))
	}
	return b.String()
}

// dialTCP waits until something accepts connections on addr.
func dialTCP(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// Redis is a private redis-server. Its methods are not safe for concurrent use.
type Redis struct {
	port int
	dir  string
	aof  bool
	proc *proc
}

// RedisOption changes how StartRedis runs the server.
type RedisOption func(*Redis)

// WithAOF runs Redis with --appendonly yes --appendfsync always, so data written before
// Stop or Kill is there again after Start.
func WithAOF() RedisOption { return func(r *Redis) { r.aof = true } }

// StartRedis starts a private redis-server on a free loopback port with its files in
// t.TempDir(), and kills it when the test ends. It returns once PING answers.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	Need(t, "redis-server")
	r := &Redis{port: FreePort(t), dir: t.TempDir()}
	for _, o := range opts {
		o(r)
	}
	// Nothing outlives the test, so the end is a SIGKILL: no reason to wait for a clean stop.
	t.Cleanup(func() { r.proc.signal(syscall.SIGKILL, 10*time.Second) })
	// The port was free when picked; another test binary may bind it first. A few fresh
	// ports before giving up.
	for try := 1; ; try++ {
		err := r.start()
		if err == nil {
			return r
		}
		if try == 5 || !r.lostPort() {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(r.dir, "redis.log")) // so lostPort reads only the next start
		r.port = FreePort(t)
	}
}

// lostPort reports whether the last start failed because the port was taken.
func (r *Redis) lostPort() bool {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	return bytes.Contains(b, []byte("Address already in use"))
}

// RedisURL returns a fresh private Redis for the test (StartRedis(t).URL()); cheap (~20 ms).
// With RELAY_TEST_REDIS=cluster it returns instead the URL of the test binary's shared
// Redis Cluster, emptied (SharedRedisCluster): make test runs the ingest suite that way
// too. Tests that use it then must not run in parallel.
func RedisURL(t testing.TB) string {
	t.Helper()
	switch kind := os.Getenv("RELAY_TEST_REDIS"); kind {
	case "", "single":
		return StartRedis(t).URL()
	case "cluster":
		return SharedRedisCluster(t).URL()
	default:
		t.Fatalf("RELAY_TEST_REDIS=%q: want single or cluster", kind)
		return ""
	}
}

// Addr returns host:port of the server.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// URL returns redis://127.0.0.1:P/0.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Start starts the server again on the same port and dir, and waits until PING answers.
func (r *Redis) Start(t testing.TB) {
	t.Helper()
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
}

func (r *Redis) start() error {
	if r.proc.running() {
		return errors.New("testpeer: Redis.Start: already running")
	}
	appendonly := "no"
	if r.aof {
		appendonly = "yes"
	}
	logPath := filepath.Join(r.dir, "redis.log")
	p, err := startProc(logPath, nil, "redis-server",
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", appendonly, "--appendfsync", "always",
		"--daemonize", "no", "--logfile", "")
	if err != nil {
		return err
	}
	r.proc = p
	return waitReady(p, 10*time.Second, 10*time.Millisecond, r.ping, logPath)
}

// ping sends PING and expects +PONG; a Redis still loading its AOF answers -LOADING.
func (r *Redis) ping() error {
	c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Stop sends SIGTERM and waits for the exit (the port is closed when it returns).
func (r *Redis) Stop(t testing.TB) {
	t.Helper()
	if err := r.proc.signal(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Kill sends SIGKILL and waits for the exit.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	if err := r.proc.signal(syscall.SIGKILL, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// RabbitMQ is a private broker with its own epmd, or one node of a RabbitCluster (which
// owns the epmd then). Its methods are not safe for concurrent use.
type RabbitMQ struct {
	dir                      string
	node                     string // Erlang node name, testpeer@localhost unless clustered
	port, distPort, epmdPort int
	ownEpmd                  bool  // false for a cluster's node: the cluster runs the epmd
	epmd, proc               *proc // epmd is nil for a cluster's node
}

// StartRabbitMQ starts a private broker (own epmd, own ports, own dirs under t.TempDir())
// and kills it when the test ends. It returns once an AMQP connection succeeds (8–9 s cold).
func StartRabbitMQ(t testing.TB) *RabbitMQ {
	t.Helper()
	Need(t, rabbitServer)
	Need(t, "epmd")
	b, err := newRabbitMQ(t.TempDir(), "testpeer@localhost", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.kill)
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	return b
}

// sharedPeer is a peer started once per test binary, for all its tests. No test's Cleanup
// can stop it, since it serves tests that end after the first: it dies with the test
// binary through Pdeathsig. Its directory in os.TempDir() (prefix-<pid>-…) is removed by
// the next test binary that starts one with the same prefix.
type sharedPeer[T any] struct {
	once sync.Once
	v    T
	err  error
}

// get starts the peer on the first call (start gets a fresh directory) and returns it.
func (s *sharedPeer[T]) get(prefix string, start func(dir string) (T, error)) (T, error) {
	s.once.Do(func() {
		removeStaleSharedDirs(prefix)
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s-%d-", prefix, os.Getpid()))
		if err != nil {
			s.err = err
			return
		}
		s.v, s.err = start(dir)
	})
	return s.v, s.err
}

// shared is the broker SharedRabbitMQ starts when RELAY_TEST_AMQP_URL is unset.
var shared sharedPeer[string]

// SharedRabbitMQ returns RELAY_TEST_AMQP_URL when set, else starts one broker for the whole test binary (lazily, once) and returns its URL. Tests that use it must use unique exchange/queue names.
func SharedRabbitMQ(t testing.TB) string {
	t.Helper()
	if url := os.Getenv("RELAY_TEST_AMQP_URL"); url != "" {
		return url
	}
	Need(t, rabbitServer)
	Need(t, "epmd")
	url, err := shared.get("testpeer-rabbitmq", func(dir string) (string, error) {
		b, err := newRabbitMQ(dir, "testpeer@localhost", 0)
		if err == nil {
			err = b.start()
		}
		if err != nil {
			b.kill()
			return "", err
		}
		return b.URL(), nil
	})
	if err != nil {
		t.Fatalf("testpeer: shared RabbitMQ: %v", err)
	}
	return url
}

// removeStaleSharedDirs deletes the directories of shared peers (named prefix-pid-…)
// whose test binary, named by the pid, is gone.
func removeStaleSharedDirs(prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*-*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.Split(strings.TrimPrefix(filepath.Base(dir), prefix+"-"), "-")[0])
		if err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(dir)
		}
	}
}

// newRabbitMQ picks distinct free ports (epmd's too unless epmdPort is given: a cluster's
// nodes share one epmd) and writes the broker's config under dir. The consistent-hash
// exchange plugin is enabled: rabbitmq.partitions uses it.
func newRabbitMQ(dir, node string, epmdPort int) (*RabbitMQ, error) {
	b := &RabbitMQ{dir: dir, node: node, epmdPort: epmdPort, ownEpmd: epmdPort == 0}
	seen := map[int]bool{}
	for _, p := range []*int{&b.port, &b.distPort, &b.epmdPort} {
		for *p == 0 || seen[*p] {
			var err error
			if *p, err = freePort(); err != nil {
				return b, err
			}
		}
		seen[*p] = true
	}
	files := map[string]string{
		"rabbitmq.conf":     fmt.Sprintf("loopback_users = none\nlisteners.tcp.1 = 127.0.0.1:%d\n", b.port),
		"enabled_plugins":   "[rabbitmq_consistent_hash_exchange].\n",
		"rabbitmq-env.conf": "", // keeps /etc/rabbitmq/rabbitmq-env.conf out
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return b, err
		}
	}
	for _, sub := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return b, err
		}
	}
	return b, nil
}

// URL returns amqp://guest:guest@127.0.0.1:P/.
func (b *RabbitMQ) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", b.port) }

// Start starts the broker again on the same ports and mnesia dir, so durable queues and
// persistent messages are back, and waits until an AMQP connection succeeds.
func (b *RabbitMQ) Start(t testing.TB) {
	t.Helper()
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
}

// Stop sends SIGTERM to the broker (a clean shutdown, ~1 s) and waits for the exit.
// Its epmd keeps running for the next Start.
func (b *RabbitMQ) Stop(t testing.TB) {
	t.Helper()
	if err := b.proc.signal(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

// start runs epmd when it is not running, then the broker, and waits for both.
func (b *RabbitMQ) start() error {
	if b.proc.running() {
		return errors.New("testpeer: RabbitMQ.Start: already running")
	}
	// Our own epmd first, so we own its pid; the broker would otherwise start an unowned one.
	// A cluster's node has none of its own: the cluster started the shared one.
	if b.ownEpmd && !b.epmd.running() {
		logPath := filepath.Join(b.dir, "epmd.log")
		p, err := startProc(logPath, nil, "epmd", "-address", "127.0.0.1", "-port", strconv.Itoa(b.epmdPort))
		if err != nil {
			return err
		}
		b.epmd = p
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.epmdPort))
		if err := waitReady(p, 10*time.Second, 20*time.Millisecond, func() error { return dialTCP(addr) }, logPath); err != nil {
			return err
		}
	}
	outLog := filepath.Join(b.dir, "rabbitmq.out")
	p, err := startProc(outLog, b.env(), rabbitServer, "-noinput")
	if err != nil {
		return err
	}
	b.proc = p
	return waitReady(p, 60*time.Second, 200*time.Millisecond, b.dial,
		outLog, filepath.Join(b.dir, "log", b.node+".log"))
}

// env is the broker's environment: its node name, ports and files.
func (b *RabbitMQ) env() []string {
	d := b.dir
	return append(os.Environ(),
		"HOME="+d, // the Erlang cookie lives here
		"RABBITMQ_NODENAME="+b.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(b.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(b.distPort),
		"ERL_EPMD_PORT="+strconv.Itoa(b.epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE="+filepath.Join(d, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(d, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(d, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(d, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(d, "rabbitmq-env.conf"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		// The script then execs the Erlang VM instead of running it under a signal-forwarding
		// shell, so SIGTERM and Pdeathsig reach the broker itself; -noinput keeps it off stdin.
		"RABBITMQ_ALLOW_INPUT=true",
	)
}

// ctl runs rabbitmqctl against the broker with its environment (its cookie), on a
// private range of distribution ports.
func (b *RabbitMQ) ctl(args ...string) ([]byte, error) {
	lo, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(rabbitCtl, append([]string{"-n", b.node}, args...)...)
	cmd.Env = append(b.env(),
		"RABBITMQ_CTL_DIST_PORT_MIN="+strconv.Itoa(lo),
		"RABBITMQ_CTL_DIST_PORT_MAX="+strconv.Itoa(lo+10),
		"RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("rabbitmqctl -n %s %s: %v: %s", b.node, strings.Join(args, " "), err, out.String())
	}
	return out.Bytes(), nil
}

// MemoryAlarm raises the broker's memory alarm (on: a high watermark of 1 MB, below
// what any node uses) or clears it (the default watermark, 0.4 of RAM). While it is
// raised the broker blocks every connection that publishes: it stops reading from it.
func (b *RabbitMQ) MemoryAlarm(t testing.TB, on bool) {
	t.Helper()
	args := []string{"set_vm_memory_high_watermark", "0.4"}
	if on {
		args = []string{"set_vm_memory_high_watermark", "absolute", "1MB"}
	}
	if _, err := b.ctl(args...); err != nil {
		t.Fatal(err)
	}
}

// dial opens and closes one AMQP connection.
func (b *RabbitMQ) dial() error {
	c, err := amqp.DialConfig(b.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return c.Close()
}

// kill ends the broker and its epmd with SIGKILL; their files are thrown away.
func (b *RabbitMQ) kill() {
	b.proc.signal(syscall.SIGKILL, 10*time.Second)
	b.epmd.signal(syscall.SIGKILL, 10*time.Second)
}
