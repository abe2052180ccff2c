package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

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
