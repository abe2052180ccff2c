package dispatch

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/mercamap/relay/internal/destination"
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
		StoreID:       storeID(e.Data, d.storePaths[dest.Account]),
		Account:       dest.Account,
	}
}

// storeID reads the event's store id by the first of paths (dotted, e.g.
// metadata.store_id) that names a string or a number.
func storeID(data []byte, paths []string) string {
	if len(paths) == 0 {
		paths = []string{"metadata.store_id", "metadata.storeId"}
	}
	var body map[string]any
	if json.Unmarshal(data, &body) != nil {
		return ""
	}
	for _, path := range paths {
		var v any = body
		for _, part := range strings.Split(path, ".") {
			obj, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = obj[part]
		}
		switch v := v.(type) {
		case string:
			if v != "" {
				return v
			}
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ""
}
