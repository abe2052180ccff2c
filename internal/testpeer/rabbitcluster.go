package testpeer

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rabbitCtl is called directly: the /usr/sbin wrapper resets HOME, and so the cookie.
const rabbitCtl = "/usr/lib/rabbitmq/bin/rabbitmqctl"

// RabbitCluster is three RabbitMQ nodes on loopback (rc1@localhost…rc3@localhost) joined
// into one cluster: one epmd, one Erlang cookie, each node with its own ports and dirs.
// Its methods are not safe for concurrent use.
type RabbitCluster struct {
	dir      string
	epmdPort int
	epmd     *proc
	nodes    []*RabbitMQ
}

var sharedRabbitCluster sharedPeer[*RabbitCluster]

// SharedRabbitCluster starts one 3-node cluster for the whole test binary (lazily, once;
// ~10 s and ~420 MB) and returns it. Like SharedRabbitMQ it dies with the test binary.
// Tests that use it must use unique exchange and queue names, and a test that kills a
// node starts it again before it ends (StartNode), so the next test finds three nodes.
func SharedRabbitCluster(t testing.TB) *RabbitCluster {
	t.Helper()
	Need(t, rabbitServer)
	Need(t, rabbitCtl)
	Need(t, "epmd")
	c, err := sharedRabbitCluster.get("testpeer-rabbitcluster", func(dir string) (*RabbitCluster, error) {
		c := &RabbitCluster{dir: dir}
		if err := c.start(); err != nil {
			c.kill()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		t.Fatalf("testpeer: shared RabbitMQ cluster: %v", err)
	}
	return c
}

// NewRabbitCluster starts a 3-node cluster like SharedRabbitCluster, with its files under
// dir, for a program rather than a test (cmd/loadtest's cluster drill). The caller ends
// it with Close; its nodes also die with the calling program (Pdeathsig).
func NewRabbitCluster(dir string) (*RabbitCluster, error) {
	c := &RabbitCluster{dir: dir}
	if err := c.start(); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// Close kills every node and the epmd (SIGKILL); the files stay in the directory.
func (c *RabbitCluster) Close() { c.kill() }

// start runs the epmd and the three nodes at once, then joins rc2 and rc3 to rc1.
func (c *RabbitCluster) start() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	c.epmdPort = port
	logPath := filepath.Join(c.dir, "epmd.log")
	if c.epmd, err = startProc(logPath, nil, "epmd", "-address", "127.0.0.1", "-port", strconv.Itoa(port)); err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitReady(c.epmd, 10*time.Second, 20*time.Millisecond, func() error { return dialTCP(addr) }, logPath); err != nil {
		return err
	}
	var cookie [20]byte
	_, _ = rand.Read(cookie[:])
	for i := range 3 {
		node := fmt.Sprintf("rc%d@localhost", i+1)
		dir := filepath.Join(c.dir, node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// One cookie for every node: Erlang nodes only talk to nodes with the same one.
		if err := os.WriteFile(filepath.Join(dir, ".erlang.cookie"), []byte(hex.EncodeToString(cookie[:])), 0o400); err != nil {
			return err
		}
		b, err := newRabbitMQ(dir, node, port)
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, b)
	}
	if err := c.parallel(c.nodes, (*RabbitMQ).start); err != nil {
		return err
	}
	// Two joins at once race in mnesia's schema copy: the joins go one after the other,
	// the stops and starts around them at once.
	first, joining := c.nodes[0].node, c.nodes[1:]
	ctl := func(args ...string) func(*RabbitMQ) error {
		return func(b *RabbitMQ) error { _, err := b.ctl(args...); return err }
	}
	if err := c.parallel(joining, ctl("stop_app")); err != nil {
		return err
	}
	for _, b := range joining {
		if err := ctl("join_cluster", first)(b); err != nil {
			return err
		}
	}
	return c.parallel(joining, ctl("start_app"))
}

// parallel runs f on each node at once and returns the first error.
func (c *RabbitCluster) parallel(nodes []*RabbitMQ, f func(*RabbitMQ) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, b := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(b) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// URLs returns each node's amqp:// URL, rc1's first.
func (c *RabbitCluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, b := range c.nodes {
		urls[i] = b.URL()
	}
	return urls
}

// Node returns node i's broker (0, 1 or 2).
func (c *RabbitCluster) Node(i int) *RabbitMQ { return c.nodes[i] }

// Leader returns the index of the node leading quorum queue queue, asking a running node.
func (c *RabbitCluster) Leader(t testing.TB, queue string) int {
	t.Helper()
	i, err := c.LeaderOf(queue)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// LeaderOf is Leader for a program: it returns an error rather than failing a test.
func (c *RabbitCluster) LeaderOf(queue string) (int, error) {
	for _, b := range c.nodes {
		if !b.proc.running() {
			continue
		}
		out, err := b.ctl("list_queues", "name", "leader", "--formatter", "json", "--quiet")
		if err != nil {
			return -1, err
		}
		var rows []struct{ Name, Leader string }
		if err := json.Unmarshal(out, &rows); err != nil {
			return -1, fmt.Errorf("testpeer: list_queues: %v: %s", err, out)
		}
		for _, r := range rows {
			if r.Name != queue {
				continue
			}
			for i, n := range c.nodes {
				if n.node == r.Leader {
					return i, nil
				}
			}
			return -1, fmt.Errorf("testpeer: queue %s is led by %q, not a node of the cluster", queue, r.Leader)
		}
		return -1, fmt.Errorf("testpeer: no queue %s on the cluster", queue)
	}
	return -1, errors.New("testpeer: no node of the cluster is running")
}

// KillNode sends SIGKILL to node i's Erlang VM (and its helpers) and waits for the exit.
func (c *RabbitCluster) KillNode(t testing.TB, i int) {
	t.Helper()
	if err := c.Kill(i); err != nil {
		t.Fatal(err)
	}
}

// Kill is KillNode for a program: it returns an error rather than failing a test.
func (c *RabbitCluster) Kill(i int) error {
	return c.nodes[i].proc.signal(syscall.SIGKILL, 10*time.Second)
}

// StartNode starts node i again; it rejoins the cluster it remembers.
func (c *RabbitCluster) StartNode(t testing.TB, i int) {
	t.Helper()
	if err := c.Start(i); err != nil {
		t.Fatal(err)
	}
}

// Start is StartNode for a program: it returns an error rather than failing a test.
func (c *RabbitCluster) Start(i int) error { return c.nodes[i].start() }

// Name is node i's Erlang node name (rc1@localhost…).
func (c *RabbitCluster) Name(i int) string { return c.nodes[i].node }

// kill ends every node and the epmd with SIGKILL.
func (c *RabbitCluster) kill() {
	for _, b := range c.nodes {
		b.proc.signal(syscall.SIGKILL, 10*time.Second)
	}
	c.epmd.signal(syscall.SIGKILL, 10*time.Second)
}
