package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/testpeer"
)

// clusterPeers are the cluster drill's own peers, started the way the tests start theirs
// (internal/testpeer): a Redis Cluster of 3 masters with a replica each and a 3-node
// RabbitMQ cluster, all on loopback ports below 32768.
type clusterPeers struct {
	redis  *testpeer.RedisCluster
	rabbit *testpeer.RabbitCluster
}

// startClusterPeers starts both clusters at once, their files under dir.
func startClusterPeers(dir string) (*clusterPeers, error) {
	var p clusterPeers
	var redisErr, rabbitErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		d := filepath.Join(dir, "redis-cluster")
		if redisErr = os.MkdirAll(d, 0o755); redisErr == nil {
			p.redis, redisErr = testpeer.NewRedisCluster(d)
		}
	}()
	go func() {
		defer wg.Done()
		d := filepath.Join(dir, "rabbit-cluster")
		if rabbitErr = os.MkdirAll(d, 0o755); rabbitErr == nil {
			p.rabbit, rabbitErr = testpeer.NewRabbitCluster(d)
		}
	}()
	wg.Wait()
	if err := errors.Join(redisErr, rabbitErr); err != nil {
		p.close()
		return nil, err
	}
	return &p, nil
}

func (p *clusterPeers) close() {
	if p.redis != nil {
		p.redis.Close()
	}
	if p.rabbit != nil {
		p.rabbit.Close()
	}
}

// killRedisMaster SIGKILLs the master holding key's slot, waits for its replica's
// promotion, and after back starts the killed node again (it rejoins as the new
// master's replica, so redis.min_replicas: 1 can be met on that slot again).
func (p *clusterPeers) killRedisMaster(key string, back time.Duration, note func(string, ...any)) error {
	t0 := time.Now()
	addr, err := p.redis.FailMasterOf(key)
	if err != nil {
		return fmt.Errorf("SIGKILL the master of %s: %w", key, err)
	}
	promoted, _ := p.redis.Masters()
	note("Redis master %s (slot of %s) SIGKILLed; cluster ok again after %.1f s, masters now %v",
		addr, key, time.Since(t0).Seconds(), promoted)
	time.Sleep(back)
	t1 := time.Now()
	if err := p.redis.Rejoin(addr); err != nil {
		return fmt.Errorf("restart %s: %w", addr, err)
	}
	note("Redis node %s started again, in sync as a replica after %.1f s", addr, time.Since(t1).Seconds())
	return nil
}

// killRabbitLeader SIGKILLs the RabbitMQ node leading queue and after back starts it
// again (it rejoins the cluster it remembers).
func (p *clusterPeers) killRabbitLeader(queue string, back time.Duration, note func(string, ...any)) error {
	i, err := p.rabbit.LeaderOf(queue)
	if err != nil {
		return err
	}
	if err := p.rabbit.Kill(i); err != nil {
		return fmt.Errorf("SIGKILL %s: %w", p.rabbit.Name(i), err)
	}
	note("RabbitMQ node %s (leader of %s) SIGKILLed", p.rabbit.Name(i), queue)
	time.Sleep(back)
	t1 := time.Now()
	if err := p.rabbit.Start(i); err != nil {
		return fmt.Errorf("restart %s: %w", p.rabbit.Name(i), err)
	}
	leader := "?"
	if j, err := p.rabbit.LeaderOf(queue); err == nil {
		leader = p.rabbit.Name(j)
	}
	note("RabbitMQ node %s started again after %.1f s; %s is led by %s", p.rabbit.Name(i), time.Since(t1).Seconds(), queue, leader)
	return nil
}

// runRedisCluster starts a private Redis Cluster (3 masters + 3 replicas, internal/testpeer)
// for scripts/bench.sh, writes shell export lines to -env once it is ready, and holds it
// until SIGTERM or SIGINT:
//
//	BENCH_CLUSTER_REDIS_URL      redis://node?addr=node…
//	BENCH_CLUSTER_REDIS_MASTERS  master-PORT=pid,… (benchingest -peer-pids)
func runRedisCluster(ctx context.Context, args []string) error {
	var dir, envPath string
	fs := flag.NewFlagSet("redis-cluster", flag.ContinueOnError)
	fs.StringVar(&dir, "dir", "", "directory for the nodes' files")
	fs.StringVar(&envPath, "env", "", "file the export lines are written to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dir == "" || envPath == "" {
		return errors.New("redis-cluster: -dir and -env are required")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c, err := testpeer.NewRedisCluster(dir)
	if err != nil {
		return err
	}
	defer c.Close()
	masters, err := c.Masters()
	if err != nil {
		return err
	}
	var pids []string
	for _, addr := range masters {
		m := redis.NewClient(&redis.Options{Addr: addr})
		info, err := m.Info(ctx, "server").Result()
		m.Close()
		if err != nil {
			return err
		}
		pid := ""
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				pid = v
			}
		}
		_, port, _ := net.SplitHostPort(addr)
		pids = append(pids, "master-"+port+"="+pid)
	}
	env := fmt.Sprintf("export BENCH_CLUSTER_REDIS_URL='%s'\nexport BENCH_CLUSTER_REDIS_MASTERS='%s'\n", c.URL(), strings.Join(pids, ","))
	if err := os.WriteFile(envPath, []byte(env), 0o644); err != nil {
		return err
	}
	logf("Redis Cluster ready: %s", c.URL())
	<-ctx.Done()
	return nil
}
