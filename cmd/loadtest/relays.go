package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// replica is one `relay serve` process the load runs, restarted when it dies.
type replica struct {
	name, bin, config, logDir string
	env                       []string
	debug                     bool // log at debug: the drill counts every delivery attempt, delivered ones too

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	starts   int
	killed   int // by us, SIGKILL
	selfExit []string
}

func (r *replica) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	f, err := os.Create(filepath.Join(r.logDir, fmt.Sprintf("%s.%d.log", r.name, r.starts)))
	if err != nil {
		return err
	}
	args := []string{"serve", "--config", r.config}
	if r.debug {
		args = append(args, "--log-level", "debug")
	}
	cmd := exec.Command(r.bin, args...)
	cmd.Env = append(os.Environ(), r.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	r.cmd, r.done = cmd, done
	go func() {
		err := cmd.Wait()
		f.Close()
		r.mu.Lock()
		if r.cmd == cmd && !isKilled(err) {
			r.selfExit = append(r.selfExit, fmt.Sprintf("%s (start %d): %v", time.Now().Format("15:04:05"), r.starts, err))
		}
		r.mu.Unlock()
		close(done)
	}()
	return nil
}

func isKilled(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGTERM)
}

func (r *replica) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// running reports whether the current process is alive.
func (r *replica) running() bool {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// kill sends sig to the current process and waits for it to end.
func (r *replica) kill(sig syscall.Signal) {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	if sig == syscall.SIGKILL {
		r.killed++
	}
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(25 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (r *replica) exits() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.selfExit...)
}
