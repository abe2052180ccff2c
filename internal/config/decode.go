package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A yaml.v3 node walk rather than a struct decode: it reports every unknown key and every
// wrong type at its own path and goes on, where a decode stops or loses the path.

// fields maps each known key of a mapping to what reads its value.
type fields map[string]func(v *yaml.Node, path string)

type walker struct {
	problems Problems
	wrong    map[string]bool // paths whose value could not be read at all

	// budget bounds how many nodes the walk visits. Aliases (*name) can make a few
	// kilobytes expand to millions of values; a real file visits each node a few times.
	budget    int
	exhausted bool
}

// visitBudget allows every node of the document to be visited many times over (anchors
// and merge keys reuse nodes), and no more.
func visitBudget(root *yaml.Node) int {
	nodes := 0
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		nodes++
		for _, c := range n.Content {
			count(c)
		}
	}
	count(root)
	return 20*nodes + 10000
}

func (w *walker) add(path, format string, args ...any) {
	w.problems = append(w.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// unreadable reports a value of the wrong type. Later checks say nothing more about that
// path: "is required" after "must be a single value" would only repeat it.
func (w *walker) unreadable(path, format string, args ...any) {
	if w.wrong == nil {
		w.wrong = map[string]bool{}
	}
	w.wrong[path] = true
	w.add(path, format, args...)
}

// resolve follows aliases; it returns nil for an absent or null value (the key is then
// treated as not written, so its default stays).
func (w *walker) resolve(n *yaml.Node, path string) *yaml.Node {
	if w.exhausted {
		return nil
	}
	if w.budget--; w.budget < 0 {
		w.exhausted = true
		w.add(path, "the file's aliases (*name) expand to too many values: write the values out")
		return nil
	}
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return w.resolve(n.Content[0], path)
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// object reads a mapping, calling the reader of each known key in file order. An unknown
// key is a problem (an operator's typo must not be silently ignored), and so is a key
// written twice. Merge keys (<<: *base) are honoured; written keys win over merged ones.
func (w *walker) object(n *yaml.Node, path string, fs fields) {
	n = w.resolve(n, path)
	if n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		w.unreadable(path, "must be a mapping of keys (%s), not %s", strings.Join(sortedKeys(fs), ", "), kind(n))
		return
	}
	type entry struct{ key, value *yaml.Node }
	var written, merged []entry
	var collect func(m *yaml.Node, into *[]entry, depth int)
	collect = func(m *yaml.Node, into *[]entry, depth int) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				if depth > 8 {
					continue
				}
				src := w.resolve(v, path)
				var sources []*yaml.Node
				switch {
				case src == nil:
				case src.Kind == yaml.SequenceNode:
					for _, s := range src.Content {
						sources = append(sources, w.resolve(s, path))
					}
				default:
					sources = []*yaml.Node{src}
				}
				for _, s := range sources {
					if s == nil || s.Kind != yaml.MappingNode {
						w.add(path, "a merge key (<<) must name a mapping or a list of mappings")
						continue
					}
					collect(s, &merged, depth+1)
				}
				continue
			}
			*into = append(*into, entry{k, v})
		}
	}
	collect(n, &written, 0)

	seen := map[string]bool{}
	for _, e := range written {
		k := w.resolve(e.key, path)
		if k == nil || k.Kind != yaml.ScalarNode {
			w.add(path, "a key must be a plain name")
			continue
		}
		p := join(path, k.Value)
		if seen[k.Value] {
			w.add(p, "written twice: keep one")
			continue
		}
		seen[k.Value] = true
		read, ok := fs[k.Value]
		if !ok {
			w.add(p, "%s", unknownKey(k.Value, fs))
			continue
		}
		read(e.value, p)
	}
	for _, e := range merged {
		k := w.resolve(e.key, path)
		if k == nil || k.Kind != yaml.ScalarNode || seen[k.Value] {
			continue
		}
		seen[k.Value] = true
		p := join(path, k.Value)
		read, ok := fs[k.Value]
		if !ok {
			w.add(p, "%s (merged in with <<)", unknownKey(k.Value, fs))
			continue
		}
		read(e.value, p)
	}
}

func unknownKey(key string, fs fields) string {
	known := sortedKeys(fs)
	best, bestDist := "", 3 // suggest only a near miss
	for _, k := range known {
		if d := editDistance(strings.ToLower(key), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q: did you mean %q?", key, best)
	}
	return fmt.Sprintf("unknown key %q: known keys here are %s", key, strings.Join(known, ", "))
}

func sortedKeys(fs fields) []string {
	keys := make([]string, 0, len(fs))
	for k := range fs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a single value"
}

// list reads a sequence, calling item for each element with its indexed path.
func (w *walker) list(n *yaml.Node, path string, item func(v *yaml.Node, path string)) bool {
	n = w.resolve(n, path)
	if n == nil {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		w.unreadable(path, "must be a list, not %s", kind(n))
		return false
	}
	for i, v := range n.Content {
		item(v, index(path, i))
	}
	return true
}

// str reads a single value as text. The message never repeats the value: the field may
// be a secret.
func (w *walker) str(n *yaml.Node, path string, out *string) {
	n = w.resolve(n, path)
	if n == nil {
		return
	}
	if n.Kind != yaml.ScalarNode {
		w.unreadable(path, "must be a single value, not %s", kind(n))
		return
	}
	*out = n.Value
}

// strs reads a list of single values; an explicit empty list replaces the default.
func (w *walker) strs(n *yaml.Node, path string, out *[]string) {
	vals := []string{}
	if w.list(n, path, func(v *yaml.Node, p string) {
		s := ""
		if v = w.resolve(v, p); v != nil && v.Kind != yaml.ScalarNode {
			w.unreadable(p, "must be a single value, not %s", kind(v))
		} else if v != nil {
			s = v.Value
		}
		vals = append(vals, s)
	}) {
		*out = vals
	}
}

func (w *walker) integer(n *yaml.Node, path string, out *int) {
	n = w.resolve(n, path)
	if n == nil {
		return
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		w.unreadable(path, "must be a whole number")
		return
	}
	*out = v
}

func (w *walker) integer64(n *yaml.Node, path string, out *int64) {
	n = w.resolve(n, path)
	if n == nil {
		return
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		w.unreadable(path, "must be a whole number")
		return
	}
	*out = v
}

// ratio reads a number (0.25, 1); its range is the caller's to check.
func (w *walker) ratio(n *yaml.Node, path string, out **float64) {
	n = w.resolve(n, path)
	if n == nil {
		return
	}
	var v float64
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		w.unreadable(path, "must be a number, like 0.1")
		return
	}
	*out = &v
}

// number reads a number (0.5, 100); its range is the caller's to check.
func (w *walker) number(n *yaml.Node, path string, out *float64) {
	n = w.resolve(n, path)
	if n == nil {
		return
	}
	var v float64
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		w.unreadable(path, "must be a number, like 100 or 0.5")
		return
	}
	*out = v
}

// rate reads {count: N, per: DURATION}.
func (w *walker) rate(n *yaml.Node, path string, out *Rate) {
	w.object(n, path, fields{
		"count": func(v *yaml.Node, path string) { w.integer(v, path, &out.Count) },
		"per":   func(v *yaml.Node, path string) { w.duration(v, path, &out.Per) },
	})
}

// duration reads a Duration; every duration in the file must be longer than zero.
func (w *walker) duration(n *yaml.Node, path string, out *time.Duration) {
	n = w.resolve(n, path)
	if n == nil {
		return
	}
	var d Duration
	if err := n.Decode(&d); err != nil {
		w.unreadable(path, "%v", err)
		return
	}
	if d <= 0 {
		w.unreadable(path, "must be longer than zero")
		return
	}
	*out = time.Duration(d)
}

// stringMap reads a mapping of names to single values; allowed limits the names.
func (w *walker) stringMap(n *yaml.Node, path string, allowed []string, out map[string]string) {
	fs := fields{}
	for _, k := range allowed {
		fs[k] = func(v *yaml.Node, p string) {
			var s string
			w.str(v, p, &s)
			out[k] = s
		}
	}
	w.object(n, path, fs)
}
