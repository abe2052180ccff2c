package config

import (
	"errors"
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
		b, err := p.readFile(name)
		if err != nil {
			p.add(path, "cannot read file %s: %s", name, readError(err))
			return "", false
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

// readError says why a file could not be read without repeating anything the error may
// have picked up beyond the path.
func readError(err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "it does not exist"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case errors.As(err, &pe):
		return pe.Err.Error()
	}
	return "it could not be read"
}
