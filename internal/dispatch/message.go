package dispatch

import (
	"encoding/json"
	"strings"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/jsonscan"
	"github.com/mercamap/relay/internal/store"
)

// message builds what the sink writes for one log entry at one destination.
func (d *Dispatcher) message(dest destination.Destination, e store.LogEntry) destination.Message {
	return destination.Message{
		ID:            destination.MessageID(dest.ID, e.EventID),
		Type:          e.Type,
		EventID:       e.EventID,
		CreatedAt:     e.Time,
		Data:          json.RawMessage(e.Data),
		SchemaVersion: e.SchemaVersion,
		StoreID:       storeID(e.Data, (*d.storePaths.Load())[dest.Account]),
		Account:       dest.Account,
	}
}

// storeID reads the event's store id by the first of paths (dotted, e.g.
// metadata.store_id) that names a non-empty string or a number, a number exactly as
// written. It answers as decoding data into a map[string]any with UseNumber would,
// without building it (and, as plain decoding, finds none in a body holding a number
// beyond float64's range): ingest verified data is JSON, so a scan reads only the
// objects on the path.
func storeID(data []byte, paths []string) string {
	if len(paths) == 0 {
		paths = []string{"metadata.store_id", "metadata.storeId"}
	}
	var top string // the first segment last looked up, and its member in data
	var topRaw []byte
	var topOK bool
	for i, path := range paths {
		first, rest, nested := strings.Cut(path, ".")
		// Reading the top level scans the whole body: paths that start alike (the
		// defaults do) read it once.
		if i == 0 || first != top {
			top = first
			topRaw, topOK = jsonscan.Member(data, first)
		}
		v, ok := topRaw, topOK
		if ok && nested {
			for part := range strings.SplitSeq(rest, ".") {
				if v, ok = jsonscan.Member(v, part); !ok {
					break
				}
			}
		}
		if !ok {
			continue
		}
		switch c := v[0]; {
		case c == '"':
			if s := jsonscan.Unquote(v); len(s) > 0 {
				return string(s)
			}
		case c == '-' || (c >= '0' && c <= '9'):
			// A number is its own text: 1234567890123456789 stays that, digit for digit
			// (through a float64 it would become 1234567890123456800).
			return string(v)
		}
	}
	return ""
}
