package destination

import (
	"encoding/json"
	"testing"
)

var bodyCases = []struct {
	name string
	m    Message
}{
	{"compact data", Message{ID: "msg_0a1b", Type: "job.completed", EventID: "fetcher.job.completed.j1",
		CreatedAt: "2025-11-30T00:00:00.123Z", Data: json.RawMessage(`{"jobId":"j1","metadata":{"store_id":"s"},"n":[1,2.5,null,true]}`)}},
	{"no data", Message{ID: "msg_1", Type: TestType, EventID: "e", CreatedAt: "t"}},
	{"empty data", Message{ID: "msg_1", Type: "t", EventID: "e", CreatedAt: "t", Data: json.RawMessage{}}},
	{"null data", Message{ID: "msg_1", Type: "t", Data: json.RawMessage(`null`)}},
	{"scalar data", Message{ID: "msg_1", Type: "t", Data: json.RawMessage(`"x"`)}},
	{"spaces inside strings kept", Message{ID: "m", Data: json.RawMessage(`{"a":"b c\td"}`)}},
	{"whitespace between tokens removed", Message{ID: "m", Data: json.RawMessage("{ \"a\" : [ 1 ,\n2 ] }\n")}},
	{"html characters escaped", Message{ID: "m", Data: json.RawMessage(`{"a":"<b> & </b>"}`)}},
	{"line and paragraph separators escaped", Message{ID: "m", Data: json.RawMessage("{\"a\":\"x\u2028y\u2029z\"}")}},
	{"other non-ascii kept", Message{ID: "m", Data: json.RawMessage(`{"a":"é–€😀"}`)}},
	{"escapes kept as sent", Message{ID: "m", Data: json.RawMessage(`{"a":"\u003c\"\\\/\u00e9"}`)}},
	{"invalid utf-8 in data kept", Message{ID: "m", Data: json.RawMessage("{\"a\":\"\xff\"}")}},
	{"quote in a field", Message{ID: "m", EventID: `a"b`, Data: json.RawMessage(`{}`)}},
	{"backslash in a field", Message{ID: "m", Type: `a\b`, Data: json.RawMessage(`{}`)}},
	{"html in a field", Message{ID: "m", CreatedAt: "<&>", Data: json.RawMessage(`{}`)}},
	{"control character in a field", Message{ID: "m\n", Data: json.RawMessage(`{}`)}},
	{"non-ascii in a field", Message{ID: "m", EventID: "é\u2028", Data: json.RawMessage(`{}`)}},
	{"invalid utf-8 in a field", Message{ID: "m", EventID: "a\xffb", Data: json.RawMessage(`{}`)}},
}

// marshalled is Body as json.Marshal writes it: Body must give the same bytes.
func marshalled(m Message) []byte {
	data := m.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return marshalBody(m, data)
}

func TestBodyIsJSONMarshalsBytes(t *testing.T) {
	for _, c := range bodyCases {
		t.Run(c.name, func(t *testing.T) {
			want := marshalled(c.m)
			if want == nil {
				t.Fatal("json.Marshal failed on the case")
			}
			if got := c.m.Body(); string(got) != string(want) {
				t.Fatalf("Body =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestBodyHasTheContractFields(t *testing.T) {
	m := bodyCases[0].m
	var got map[string]any
	if err := json.Unmarshal(m.Body(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got["id"] != m.ID || got["type"] != m.Type || got["event_id"] != m.EventID ||
		got["created_at"] != m.CreatedAt || got["data"].(map[string]any)["jobId"] != "j1" {
		t.Fatalf("body %s", m.Body())
	}
}

func FuzzBody(f *testing.F) {
	for _, c := range bodyCases {
		f.Add(c.m.ID, c.m.Type, c.m.EventID, c.m.CreatedAt, []byte(c.m.Data))
	}
	f.Fuzz(func(t *testing.T, id, typ, eventID, createdAt string, data []byte) {
		if len(data) > 0 && !json.Valid(data) {
			return // Body takes data ingest verified
		}
		m := Message{ID: id, Type: typ, EventID: eventID, CreatedAt: createdAt, Data: data}
		if got, want := m.Body(), marshalled(m); string(got) != string(want) {
			t.Fatalf("Body =\n%q\njson.Marshal writes\n%q", got, want)
		}
	})
}

func TestBodyBytesAreCompactedAndHTMLEscaped(t *testing.T) {
	m := Message{ID: "msg_1", Type: "job.completed", EventID: "e1", CreatedAt: "2025-11-30T00:00:00Z",
		Data: json.RawMessage("{ \"a\" : \"<x> & y\",\n \"b\" : [ 1 , 2 ] }")}
	want := `{"id":"msg_1","type":"job.completed","data":{"a":"\u003cx\u003e \u0026 y","b":[1,2]},"event_id":"e1","created_at":"2025-11-30T00:00:00Z"}`
	if got := m.Body(); string(got) != want {
		t.Fatalf("Body =\n%s\nwant\n%s", got, want)
	}
	m.Data = json.RawMessage(`{"a":"\u003cx\u003e y","b":[1,2]}`) // already as Marshal writes it: copied
	want = `{"id":"msg_1","type":"job.completed","data":{"a":"\u003cx\u003e y","b":[1,2]},"event_id":"e1","created_at":"2025-11-30T00:00:00Z"}`
	if got := m.Body(); string(got) != want {
		t.Fatalf("Body =\n%s\nwant\n%s", got, want)
	}
}
