package testpeer

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a private Redis Cluster of 3 masters with one replica each, on
// loopback ports below 32768 (the cluster bus on its own --cluster-port). Its methods
// are not safe for concurrent use.
type RedisCluster struct {
	dir   string
	nodes []*clusterNode
}

type clusterNode struct {
	port, busPort int
	dir           string
	proc          *proc
}

// start runs the node's redis-server; its nodes.conf keeps its place in the cluster.
func (n *clusterNode) start() error {
	p, err := startProc(filepath.Join(n.dir, "redis.log"), nil, "redis-server",
		"--port", strconv.Itoa(n.port), "--cluster-port", strconv.Itoa(n.busPort), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(n.dir, "nodes.conf"),
		"--cluster-node-timeout", "2000", "--dir", n.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", "")
	n.proc = p
	return err
}

func (n *clusterNode) waitPing() error {
	r := &Redis{port: n.port}
	return waitReady(n.proc, 10*time.Second, 10*time.Millisecond, r.ping, filepath.Join(n.dir, "redis.log"))
}

func (n *clusterNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// StartRedisCluster starts a private Redis Cluster (6 redis-server nodes, then
// redis-cli --cluster create) with its files under t.TempDir(), and kills it when the
// test ends. It returns once every node reports cluster_state:ok and every replica is
// in sync with its master (~3 s).
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	Need(t, "redis-server")
	Need(t, "redis-cli")
	c := &RedisCluster{dir: t.TempDir()}
	t.Cleanup(c.kill)
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	return c
}

// NewRedisCluster starts a Redis Cluster like StartRedisCluster, with its files under
// dir, for a program rather than a test (cmd/loadtest's cluster drill and bench). The
// caller ends it with Close; its nodes also die with the calling program (Pdeathsig).
func NewRedisCluster(dir string) (*RedisCluster, error) {
	c := &RedisCluster{dir: dir}
	if err := c.start(); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// Close kills every node (SIGKILL); the files stay in the directory it was given.
func (c *RedisCluster) Close() { c.kill() }

// sharedCluster is the cluster SharedRedisCluster starts, once per test binary. Like
// the shared broker, it dies with the test binary through Pdeathsig.
var sharedCluster sharedPeer[*RedisCluster]

// SharedRedisCluster starts one Redis Cluster for the whole test binary (lazily, once)
// and returns it emptied (FLUSHALL on every master), so each test starts from nothing.
// Tests that use it must not run in parallel with each other, nor kill its nodes (use
// StartRedisCluster for that).
func SharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	Need(t, "redis-server")
	Need(t, "redis-cli")
	c, err := sharedCluster.get("testpeer-rediscluster", func(dir string) (*RedisCluster, error) {
		c := &RedisCluster{dir: dir}
		if err := c.start(); err != nil {
			c.kill()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		t.Fatalf("testpeer: shared Redis Cluster: %v", err)
	}
	cl := c.Client()
	defer cl.Close()
	ctx := context.Background()
	if err := cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.FlushAll(ctx).Err()
	}); err != nil {
		t.Fatalf("testpeer: flush the shared Redis Cluster: %v", err)
	}
	return c
}

// Addrs are the host:port of every node, masters first as created.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr()
	}
	return out
}

// URL is a cluster URL naming every node: redis://first?addr=second&addr=….
func (c *RedisCluster) URL() string {
	addrs := c.Addrs()
	return "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
}

// Client returns a new cluster client over every node; the caller closes it.
func (c *RedisCluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: time.Second})
}

// start picks 12 distinct free ports, starts the nodes, creates the cluster, and waits.
func (c *RedisCluster) start() error {
	seen := map[int]bool{}
	port := func() (int, error) {
		for {
			p, err := freePort()
			if err != nil || !seen[p] {
				seen[p] = true
				return p, err
			}
		}
	}
	for i := range 6 {
		n := &clusterNode{dir: filepath.Join(c.dir, "node"+strconv.Itoa(i))}
		var err error
		if n.port, err = port(); err != nil {
			return err
		}
		if n.busPort, err = port(); err != nil {
			return err
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
		if err := n.start(); err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.waitPing(); err != nil {
			return err
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	return c.waitOK(30*time.Second, true)
}

// waitOK waits until every live node says cluster_state:ok and sees every slot held by
// a live master, and every live replica's link to its master is up; withReplicas also
// waits until each node sees a replica for every slot.
func (c *RedisCluster) waitOK(limit time.Duration, withReplicas bool) error {
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		err := c.ok(ctx, withReplicas)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis cluster not ready after %v: %w", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *RedisCluster) ok(ctx context.Context, withReplicas bool) error {
	for _, n := range c.nodes {
		if !n.proc.running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		var repl string
		if err == nil {
			repl, err = cl.Info(ctx, "replication").Result()
		}
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = cl.ClusterSlots(ctx).Result()
		}
		cl.Close()
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", n.addr(), err)
		case !strings.Contains(info, "cluster_state:ok"):
			return fmt.Errorf("%s: cluster_state not ok", n.addr())
		case strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up"):
			return fmt.Errorf("%s: replica not in sync", n.addr())
		}
		covered := 0
		for _, s := range slots {
			if c.live(s.Nodes[0].Addr) && (!withReplicas || len(s.Nodes) > 1 && c.live(s.Nodes[1].Addr)) {
				covered += s.End - s.Start + 1
			}
		}
		if covered != 16384 {
			return fmt.Errorf("%s: live masters (with replicas: %v) hold %d of 16384 slots", n.addr(), withReplicas, covered)
		}
	}
	return nil
}

// live reports whether addr is a node of c whose process runs.
func (c *RedisCluster) live(addr string) bool {
	for _, n := range c.nodes {
		if n.addr() == addr {
			return n.proc.running()
		}
	}
	return false
}

// node returns the node at addr.
func (c *RedisCluster) node(addr string) (*clusterNode, error) {
	for _, n := range c.nodes {
		if n.addr() == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("testpeer: %s is not a node of the cluster", addr)
}

// MasterOf returns host:port of the master that holds key's slot now.
func (c *RedisCluster) MasterOf(t testing.TB, key string) string {
	t.Helper()
	addr, err := c.masterOf(key)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func (c *RedisCluster) masterOf(key string) (string, error) {
	cl := c.Client()
	defer cl.Close()
	m, err := cl.MasterForKey(context.Background(), key)
	if err != nil {
		return "", err
	}
	return m.Options().Addr, nil
}

// Masters returns host:port of every node that is a master now, as the live nodes see it.
func (c *RedisCluster) Masters() ([]string, error) {
	cl := c.Client()
	defer cl.Close()
	var mu sync.Mutex
	var out []string
	err := cl.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		out = append(out, m.Options().Addr)
		mu.Unlock()
		return nil
	})
	slices.Sort(out)
	return out, err
}

// ReplicaOf returns host:port of the replica of the master that holds key's slot.
func (c *RedisCluster) ReplicaOf(t testing.TB, key string) string {
	t.Helper()
	master := c.MasterOf(t, key)
	cl := redis.NewClient(&redis.Options{Addr: master})
	defer cl.Close()
	slots, err := cl.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.Nodes[0].Addr == master && len(s.Nodes) > 1 {
			return s.Nodes[1].Addr
		}
	}
	t.Fatalf("testpeer: master %s has no replica", master)
	return ""
}

// KillMasterOf sends SIGKILL to the master that holds key's slot and waits until its
// replica has been promoted and the cluster is ok again (~4 s). It returns the killed
// master's address.
func (c *RedisCluster) KillMasterOf(t testing.TB, key string) string {
	t.Helper()
	addr, err := c.FailMasterOf(key)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FailMasterOf is KillMasterOf for a program: it returns an error rather than failing a test.
func (c *RedisCluster) FailMasterOf(key string) (string, error) {
	addr, err := c.masterOf(key)
	if err != nil {
		return "", err
	}
	n, err := c.node(addr)
	if err != nil {
		return "", err
	}
	if err := n.proc.signal(syscall.SIGKILL, 10*time.Second); err != nil {
		return addr, err
	}
	return addr, c.waitOK(30*time.Second, false)
}

// Restart starts the killed node at addr again and waits until it has rejoined (as the
// replica of the master that took its slots over) and every master has a replica in sync.
func (c *RedisCluster) Restart(t testing.TB, addr string) {
	t.Helper()
	if err := c.Rejoin(addr); err != nil {
		t.Fatal(err)
	}
}

// Rejoin is Restart for a program: it returns an error rather than failing a test.
func (c *RedisCluster) Rejoin(addr string) error {
	n, err := c.node(addr)
	if err != nil {
		return err
	}
	if n.proc.running() {
		return fmt.Errorf("testpeer: %s is running", addr)
	}
	if err := n.start(); err != nil {
		return err
	}
	if err := n.waitPing(); err != nil {
		return err
	}
	// A master restarted after its replica took its slots over normally turns itself
	// into that replica within a second or two; now and then (redis/redis#6755) it
	// stays a master of no slots, and the promoted one keeps no replica. An operator
	// then sends CLUSTER REPLICATE; so does Rejoin, when the node has not turned within
	// 10 s.
	if err := c.waitOK(10*time.Second, true); err == nil {
		return nil
	}
	if err := c.replicateOrphan(n); err != nil {
		return err
	}
	return c.waitOK(60*time.Second, true)
}

// replicateOrphan makes n, when it is a master of no slots, the replica of the master
// that has none (CLUSTER REPLICATE), as an operator would.
func (c *RedisCluster) replicateOrphan(n *clusterNode) error {
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
	defer cl.Close()
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	// A line: id addr flags master-id ping pong epoch link [slots...].
	replicas := map[string]bool{} // master ids that have a live replica
	var self []string
	var masters [][]string
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := f[2]
		switch {
		case strings.Contains(flags, "myself"):
			self = f
		case strings.Contains(flags, "slave") && !strings.Contains(flags, "fail"):
			replicas[f[3]] = true
		case strings.Contains(flags, "master") && !strings.Contains(flags, "fail") && len(f) > 8:
			masters = append(masters, f)
		}
	}
	if self == nil || !strings.Contains(self[2], "master") || len(self) > 8 {
		return nil // a replica already, or a master of slots: nothing an operator would do
	}
	for _, m := range masters {
		if !replicas[m[0]] {
			return cl.Do(ctx, "cluster", "replicate", m[0]).Err()
		}
	}
	return nil
}

// Pause stops the node at addr (SIGSTOP) until the returned resume is called (SIGCONT):
// a replica that holds still acknowledges nothing.
func (c *RedisCluster) Pause(t testing.TB, addr string) (resume func()) {
	t.Helper()
	n, err := c.node(addr)
	if err != nil {
		t.Fatal(err)
	}
	pid := n.proc.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// kill ends every node with SIGKILL.
func (c *RedisCluster) kill() {
	for _, n := range c.nodes {
		n.proc.signal(syscall.SIGKILL, 10*time.Second)
	}
}
