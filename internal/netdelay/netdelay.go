// Package netdelay is a TCP proxy that makes a server answer late: each chunk of its
// answers reaches the client a fixed delay after the server sent it, as a bus in another
// region would. It speaks no protocol (HTTP/1.1, HTTP/2, gRPC all pass), keeps the order
// of bytes, and only ever listens on and dials the addresses it is given: the sandbox
// and the tests put it in front of their local buses.
package netdelay

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection to Upstream, holding the upstream's bytes for Delay.
type Proxy struct {
	Upstream string
	Delay    time.Duration

	ln     net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on addr (e.g. "127.0.0.1:0") to upstream ("host:port").
func Listen(addr, upstream string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{Upstream: upstream, Delay: delay, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address: host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening and cuts every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.Upstream)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go p.pipe(up, c, 0)       // the request goes at once
		go p.pipe(c, up, p.Delay) // the answer arrives late
	}
}

// track lists a connection pair so Close can cut it; false once the proxy is closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// pipe copies from src to dst, each chunk delay after it was read: a reader goroutine
// stamps the chunks, so a slow answer does not slow the reading of the next one.
func (p *Proxy) pipe(dst, src net.Conn, delay time.Duration) {
	defer p.wg.Done()
	defer p.forget(dst)
	defer p.forget(src)
	if delay <= 0 {
		io.Copy(dst, src)
		return
	}
	type chunk struct {
		at   time.Time
		data []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{at: time.Now().Add(delay), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.data); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				src.Close()
			}
			for range chunks { // let the reader end
			}
			return
		}
	}
}
