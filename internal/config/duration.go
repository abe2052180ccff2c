package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a YAML duration written the way time.ParseDuration reads it: 72h, 5m, 1s.
type Duration time.Duration

// UnmarshalYAML reads a duration string; a bare number is refused (which unit?).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("must be a duration like 72h, 5m or 1s")
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%q is not a duration: write it like 72h, 5m or 1s", n.Value)
	}
	*d = Duration(v)
	return nil
}
