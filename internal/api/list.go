package api

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
)

// Destination list pages (GET /v1/connectors/{connector}/destinations).
const (
	defaultPageSize = 50
	maxPageSize     = 200
	// statusScanLimit bounds how many destinations one status-filtered page reads the
	// status of (statusScanChunk per pipelined round trip): past it, the page answers
	// what it found with a next_page_token to go on from.
	statusScanLimit = 1000
	statusScanChunk = 200
)

// listStatuses are the status filter's values: a card's status, or failing (a
// warning threshold of rejections in a row reached).
var listStatuses = map[string]bool{"active": true, "paused": true, "disabled": true, "pending": true, "failing": true}

// listQuery is a list's parameters. Paged is false when none is given: the whole list,
// as the contract has it.
type listQuery struct {
	paged    bool
	size     int
	after    string // the last id of the previous page
	account  string
	statuses map[string]bool
	search   string // lower-cased substring of the id
}

// pageSummary counts the page's cards by where they stand.
type pageSummary struct {
	Cards    int `json:"cards"`
	Active   int `json:"active"`
	Failing  int `json:"failing"`
	Paused   int `json:"paused"`
	Disabled int `json:"disabled"`
	Pending  int `json:"pending"`
}

func (p *pageSummary) add(c stream.Card) {
	p.Cards++
	switch c.Status {
	case store.Active:
		p.Active++
	case "paused":
		p.Paused++
	case "disabled":
		p.Disabled++
	case "pending":
		p.Pending++
	}
	if c.Failing != nil {
		p.Failing++
	}
}

type listAnswer struct {
	Destinations []stream.Card `json:"destinations"`
	// NextPageToken is given on a paged list while more may follow; null at the end.
	NextPageToken *string     `json:"next_page_token"`
	Summary       pageSummary `json:"summary"`
	// Matched is how many destinations match the filters but the status (known from
	// the config alone); on a paged list without a status filter it is the whole count.
	Matched int `json:"matched"`
}

func parseListQuery(r *http.Request) (listQuery, *apiError) {
	v := r.URL.Query()
	q := listQuery{size: defaultPageSize}
	for _, k := range []string{"page_size", "page_token", "account", "status", "q"} {
		if v.Has(k) {
			q.paged = true
		}
	}
	if s := v.Get("page_size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, errInvalid("page_size must be a whole number from 1 to " + strconv.Itoa(maxPageSize))
		}
		q.size = min(n, maxPageSize)
	}
	if tok := v.Get("page_token"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !strings.HasPrefix(string(b), "after:") {
			return q, errInvalid("page_token must be a next_page_token this list answered")
		}
		q.after = strings.TrimPrefix(string(b), "after:")
	}
	q.account = v.Get("account")
	q.search = strings.ToLower(strings.TrimSpace(v.Get("q")))
	if s := v.Get("status"); s != "" {
		q.statuses = map[string]bool{}
		for part := range strings.SplitSeq(s, ",") {
			if !listStatuses[part] {
				return q, errInvalid("status must be active, paused, disabled, pending or failing (several joined by commas)")
			}
			q.statuses[part] = true
		}
	}
	return q, nil
}

func pageToken(id string) *string {
	s := base64.RawURLEncoding.EncodeToString([]byte("after:" + id))
	return &s
}

// listDestinations answers a connector's cards. Everything but the status filters on
// the in-memory config (sorted by id); a status filter reads the status of at most
// statusScanLimit candidates per request, in pipelined HMGETs of two fields, and only
// the page's cards are read whole.
func (s *Server) listDestinations(w http.ResponseWriter, r *http.Request, p principal) {
	conn := destination.Connector(r.PathValue("connector"))
	if !conn.Known() {
		writeError(w, errNotFound("no connector "+strconv.Quote(string(conn))+": use eventbridge, kinesis or pubsub"))
		return
	}
	q, e := parseListQuery(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var candidates []destination.Destination
	from := s.visible(p) // sorted by id; an account token's own alone
	if q.account != "" && p.admin {
		from = s.opts.Destinations.AccountDestinations(q.account)
	}
	for _, d := range from {
		// Listed only under its own connector.
		if d.Connector != conn || (q.account != "" && d.Account != q.account) {
			continue
		}
		if q.search != "" && !strings.Contains(strings.ToLower(d.ID), q.search) {
			continue
		}
		candidates = append(candidates, d)
	}
	ans := listAnswer{Destinations: []stream.Card{}, Matched: len(candidates)}
	page := candidates
	if q.paged {
		start := 0
		for start < len(candidates) && q.after != "" && candidates[start].ID <= q.after {
			start++
		}
		var next string
		var err error
		if page, next, err = s.pageOf(r, candidates[start:], q); err != nil {
			s.internal(w, r, err)
			return
		}
		if next != "" {
			ans.NextPageToken = pageToken(next)
		}
	}
	cards, err := s.cardsOf(r, page)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	for _, card := range cards {
		ans.Destinations = append(ans.Destinations, card)
		ans.Summary.add(card)
	}
	writeJSON(w, http.StatusOK, ans)
}

// cardReaders is how many of a page's cards are read from Redis at once.
const cardReaders = 8

// cardsOf reads the cards of dests (with their lag), cardReaders at a time, in order;
// one removed from Redis under us is left out (the next reload makes it again).
func (s *Server) cardsOf(r *http.Request, dests []destination.Destination) ([]stream.Card, error) {
	cards := make([]stream.Card, len(dests))
	errs := make([]error, len(dests))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(cardReaders, len(dests)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				cards[i], errs[i] = s.cardWithLag(r.Context(), dests[i])
			}
		}()
	}
	for i := range dests {
		next <- i
	}
	close(next)
	wg.Wait()
	out := make([]stream.Card, 0, len(dests))
	for i, err := range errs {
		switch {
		case errors.Is(err, destination.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out = append(out, cards[i])
		}
	}
	return out, nil
}

// pageOf picks a page from rest (sorted, after the token): the first q.size that pass
// the status filter, and the id the next page starts after ("": none follows).
func (s *Server) pageOf(r *http.Request, rest []destination.Destination, q listQuery) ([]destination.Destination, string, error) {
	if q.statuses == nil {
		if len(rest) > q.size {
			return rest[:q.size], rest[q.size-1].ID, nil
		}
		return rest, "", nil
	}
	var page []destination.Destination
	scanned := 0
	for scanned < len(rest) && scanned < statusScanLimit {
		chunk := rest[scanned:min(scanned+statusScanChunk, len(rest), statusScanLimit)]
		refs := make([]store.Ref, len(chunk))
		for i, d := range chunk {
			refs[i] = store.Ref{Account: d.Account, ID: d.ID}
		}
		standings, err := s.opts.Store.Standings(r.Context(), refs)
		if err != nil {
			return nil, "", err
		}
		for i, st := range standings {
			status := st.Status
			if status == "" {
				status = store.Active // as a card shows it
			}
			if !st.Found || !(q.statuses[status] || (q.statuses["failing"] && st.Failing)) {
				continue
			}
			if len(page) == q.size {
				return page, page[len(page)-1].ID, nil // one more matches: a next page exists
			}
			page = append(page, chunk[i])
		}
		scanned += len(chunk)
	}
	if scanned < len(rest) {
		// The bound was reached: what was read so far, and a token to go on after the
		// last destination read (every match before it is on this page).
		return page, rest[scanned-1].ID, nil
	}
	return page, "", nil
}
