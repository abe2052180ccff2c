package store

import (
	"strconv"
	"strings"
)

// What ended past a destination's cursor (state format 2). With writes of different
// ordering keys in flight together, events past the oldest unfinished one end before
// it; the cursor stays at the last event before it, and the `done` field of the
// destination's hash names those that ended after it, so a holder that takes over
// writes again only what was in flight or not yet committed. The field names the epoch
// and cursor it counts from: a cursor moved by hand (a replay, an activation) leaves it
// unread. Format 1 holders never write it and never read it; they resume at the cursor
// and send again what ended past it (at least once, each key still in order).
//
// Its text is "<epoch>|<cursor>|<id>,<id>…", each id relative to the cursor's: its
// milliseconds minus the cursor's, then "-" and its sequence ("3-0,3-1,17-0"): a few
// bytes an event however long the ids.

// EncodeDone is the done field for ids (ascending, each after cursor) ended past cursor
// under epoch.
func EncodeDone(epoch, cursor string, ids []string) string {
	var b strings.Builder
	b.WriteString(epoch)
	b.WriteByte('|')
	b.WriteString(cursor)
	b.WriteByte('|')
	base, _ := splitID(cursor)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		ms, seq := splitID(id)
		b.WriteString(strconv.FormatInt(ms-base, 10))
		b.WriteByte('-')
		b.WriteString(strconv.FormatInt(seq, 10))
	}
	return b.String()
}

// DecodeDone is the ids a done field names as ended past cursor under epoch: none when
// it counts from another epoch or cursor, or does not read.
func DecodeDone(done, epoch, cursor string) []string {
	e, rest, ok := strings.Cut(done, "|")
	if !ok || e != epoch {
		return nil
	}
	c, list, ok := strings.Cut(rest, "|")
	if !ok || c != cursor || list == "" {
		return nil
	}
	base, _ := splitID(cursor)
	var ids []string
	for part := range strings.SplitSeq(list, ",") {
		d, seq, ok := strings.Cut(part, "-")
		dms, err1 := strconv.ParseInt(d, 10, 64)
		s, err2 := strconv.ParseInt(seq, 10, 64)
		if !ok || err1 != nil || err2 != nil || dms < 0 || s < 0 {
			return nil
		}
		ids = append(ids, strconv.FormatInt(base+dms, 10)+"-"+strconv.FormatInt(s, 10))
	}
	return ids
}
