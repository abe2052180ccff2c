package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	logPath := filepath.Join(r.logDir, fmt.Sprintf("%s.%d.log", r.name, r.starts))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	args := []string{"serve", "--config", r.config}
	if r.debug {
		args = append(args, "--log-level", "debug")
	}
	cmd := exec.Command(r.bin, args...)
	// LOADTEST_RELAY_ENV (VAR=value …) reaches the relays only, not the load or the bare
	// paths: an experiment such as GOMAXPROCS=1 or GOGC=200 on the relay alone.
	cmd.Env = append(append(os.Environ(), r.env...), strings.Fields(os.Getenv("LOADTEST_RELAY_ENV"))...)
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
			// Why it went is in its last lines: the report carries them.
			r.selfExit = append(r.selfExit, fmt.Sprintf("%s (start %d): %v; its last log lines (%s):\n%s",
				time.Now().Format("15:04:05"), r.starts, err, logPath, lastLines(logPath, exitLogLines)))
		}
		r.mu.Unlock()
		close(done)
	}()
	return nil
}

// exitLogLines is how many of its last log lines a replica that exited on its own
// shows in the report.
const exitLogLines = 8

// lastLines returns the last n lines of the file at path, each indented for the report.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "      (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "      " + strings.Join(lines, "\n      ")
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
