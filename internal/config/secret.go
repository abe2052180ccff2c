package config

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// Secret references: "env:NAME" reads an environment variable, "file:PATH" reads a file
// (trailing newlines trimmed), anything else is the value itself. A problem names the
// variable or the path, never what it holds.

// secret resolves ref for the field at path. ok is false when a problem was reported;
// an empty ref resolves to "" with ok true (the caller says whether it is required).
func (p *parser) secret(path, ref string) (value string, ok bool) {
	switch {
	case strings.HasPrefix(ref, "env:"):
		name := strings.TrimPrefix(ref, "env:")
		if name == "" {
			p.add(path, "env: must name an environment variable, like env:RELAY_REDIS_URL")
			return "", false
		}
		v := p.getenv(name)
		if v == "" {
			p.add(path, "environment variable %s is not set", name)
			return "", false
		}
		return v, true
	case strings.HasPrefix(ref, "file:"):
		name := strings.TrimPrefix(ref, "file:")
		if name == "" {
			p.add(path, "file: must name a file, like file:/run/secrets/redis-url")
			return "", false
		}
		b, mode, err := p.readSecret(name)
		if err != nil {
			p.add(path, "cannot read file %s: %s", name, readError(err))
			return "", false
		}
		if len(b) > MaxSecretFile {
			p.add(path, "file %s is larger than %d bytes: a secret file holds one value", name, MaxSecretFile)
			return "", false
		}
		if mode.Perm()&0o077 != 0 {
			p.warnings = append(p.warnings, Problem{Path: path, Message: fmt.Sprintf(
				"file %s can be read by others than its owner (mode %04o): chmod 600 it, or 640 for a group you trust", name, mode.Perm())})
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			p.add(path, "file %s is empty", name)
			return "", false
		}
		return v, true
	}
	return ref, true
}

// MaxSecretFile is the most a file: secret may hold. A secret is one value; the bound
// keeps file:/dev/zero or a mistaken path to a large file from filling the memory.
const MaxSecretFile = 64 << 10

// errTooLarge is why readSecretFile refused a file past MaxSecretFile.
var errTooLarge = fmt.Errorf("it is larger than %d bytes: a secret file holds one value", MaxSecretFile)

// readSecretFile reads a file: secret from disk: a regular file (a symlink to one is
// fine: mounted secrets are), at most MaxSecretFile bytes. It never opens anything
// else, so a FIFO cannot block the load and /dev/zero cannot fill the memory.
func readSecretFile(path string) ([]byte, fs.FileMode, error) {
	b, mode, err := readRegularFile(path, MaxSecretFile)
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		return nil, 0, errTooLarge
	}
	return b, mode, err
}

// readError says why a file could not be read without repeating anything the error may
// have picked up beyond the path.
func readError(err error) string {
	var pe *fs.PathError
	var notRegular *NotRegularError
	var tooLarge *TooLargeError
	switch {
	case errors.As(err, &notRegular), errors.As(err, &tooLarge), errors.Is(err, errTooLarge):
		return err.Error()
	case errors.Is(err, fs.ErrNotExist):
		return "it does not exist"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.As(err, &pe):
		return pe.Err.Error()
	}
	return "it could not be read"
}
