package api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/registry"
)

// Accounts through the API (admin only): the file's are listed and read-only; the API's
// live in the registry and reach every replica's routing through its change stream.

// Account is an account as the API answers it (the CLI decodes the same).
type Account struct {
	ID           string     `json:"id"`
	Tenants      []string   `json:"tenants"`
	Sources      []string   `json:"sources"`
	StoreIDPath  string     `json:"store_id_path"`
	ManagedBy    string     `json:"managed_by"`
	Destinations int        `json:"destinations"`
	CreatedAt    *time.Time `json:"created_at"`
}

// accountBody is a create's or a change's body.
type accountBody struct {
	ID          *string   `json:"id"`
	Tenants     *[]string `json:"tenants"`
	Sources     *[]string `json:"sources"`
	StoreIDPath *string   `json:"store_id_path"`
}

// accountApplyWait bounds how long a create or delete waits for this replica's routing
// to show it (the registry's change comes back through this replica's follower).
const accountApplyWait = 2 * time.Second

// adminOnly answers 403 to any token but an admin's.
func adminOnly(w http.ResponseWriter, p principal) bool {
	if !p.admin {
		writeError(w, errForbidden("only an admin token manages accounts"))
		return false
	}
	return true
}

// accountOut is a as answered: how many destinations it has, and where it is defined
// (the API's have a creation time, the file's none).
func (s *Server) accountOut(a config.Account, counts map[string]int, created *time.Time) Account {
	managed := destination.ManagedByConfig
	if created != nil {
		managed = destination.ManagedByAPI
	}
	return Account{ID: a.ID, Tenants: nonNil(a.Tenants), Sources: nonNil(a.Sources), StoreIDPath: a.StoreIDPath,
		ManagedBy: managed, Destinations: counts[a.ID], CreatedAt: created}
}

// destinationCounts counts every destination by account (kept by the dispatcher).
func (s *Server) destinationCounts() map[string]int {
	return s.opts.Destinations.DestinationCounts()
}

func (s *Server) listAccounts(w http.ResponseWriter, r *http.Request, p principal) {
	if !adminOnly(w, p) {
		return
	}
	counts := s.destinationCounts()
	created := s.createdTimes(r)
	out := []Account{}
	for _, a := range s.cfg.Load().Accounts {
		out = append(out, s.accountOut(a, counts, created[a.ID]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"accounts": out})
}

// createdTimes are the API's accounts' creation times.
func (s *Server) createdTimes(r *http.Request) map[string]*time.Time {
	out := map[string]*time.Time{}
	if s.opts.Registry == nil {
		return out
	}
	recs, err := s.opts.Registry.AllAccounts(r.Context())
	if err != nil {
		return out
	}
	for _, rec := range recs {
		t := rec.CreatedAt
		out[rec.ID] = &t
	}
	return out
}

// findAccount answers 404 for an account no source defines.
func (s *Server) findAccount(w http.ResponseWriter, r *http.Request) (config.Account, bool) {
	id := r.PathValue("id")
	a, ok := s.cfg.Load().Account(id)
	if !ok {
		writeError(w, errNotFound("no account "+strconv.Quote(id)))
	}
	return a, ok
}

func (s *Server) getAccount(w http.ResponseWriter, r *http.Request, p principal) {
	if !adminOnly(w, p) {
		return
	}
	a, ok := s.findAccount(w, r)
	if !ok {
		return
	}
	var created *time.Time // the API's record of this one account, not every account's
	if s.opts.Registry != nil {
		rec, err := s.opts.Registry.GetAccount(r.Context(), a.ID)
		switch {
		case err == nil:
			created = &rec.CreatedAt
		case !errors.Is(err, destination.ErrNotFound):
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.accountOut(a, s.destinationCounts(), created))
}

func (s *Server) createAccount(w http.ResponseWriter, r *http.Request, p principal) {
	if !adminOnly(w, p) {
		return
	}
	if s.opts.Registry == nil {
		writeError(w, errConflict("this relay takes its accounts from its config file only"))
		return
	}
	var b accountBody
	if e := decodeStrict(r, &b, "the account's fields (id, tenants, sources, store_id_path)"); e != nil {
		writeError(w, e)
		return
	}
	a := config.Account{ID: val(b.ID), StoreIDPath: val(b.StoreIDPath)}
	if b.Tenants != nil {
		a.Tenants = *b.Tenants
	}
	if b.Sources != nil {
		a.Sources = *b.Sources
	}
	cfg := s.cfg.Load()
	if ps := cfg.CheckAccount(a); len(ps) > 0 {
		writeError(w, errFields("the account has problems; nothing was made", fieldsOf(ps)))
		return
	}
	taken := errExists("account id " + strconv.Quote(a.ID) + " is taken: choose another")
	if _, ok := cfg.Account(a.ID); ok {
		writeError(w, taken)
		return
	}
	rec := registry.AccountRecord{ID: a.ID, Tenants: a.Tenants, Sources: a.Sources, StoreIDPath: a.StoreIDPath,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	switch err := s.opts.Registry.CreateAccount(r.Context(), rec); {
	case errors.Is(err, registry.ErrExists):
		writeError(w, taken)
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.waitAccount(r, a.ID, func(_ config.Account, ok bool) bool { return ok })
	s.log.Info("account created through the api", "account", a.ID)
	writeJSON(w, http.StatusCreated, s.accountOut(a, nil, &rec.CreatedAt))
}

// waitAccount waits, up to accountApplyWait, until this replica's routing shows the
// change to account id (routed says so of what it holds, ok false when it has none): the
// answer comes once events of its tenants go where the change says, here.
func (s *Server) waitAccount(r *http.Request, id string, routed func(a config.Account, ok bool) bool) {
	deadline := time.Now().Add(accountApplyWait)
	for {
		a, ok := s.cfg.Load().Account(id)
		if routed(a, ok) || time.Now().After(deadline) || r.Context().Err() != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// managedAccount answers 409 for an account the file defines; the registry's record
// otherwise.
func (s *Server) managedAccount(w http.ResponseWriter, r *http.Request, a config.Account) (registry.AccountRecord, bool) {
	if s.opts.Registry != nil {
		rec, err := s.opts.Registry.GetAccount(r.Context(), a.ID)
		if err == nil {
			return rec, true
		}
		if !errors.Is(err, destination.ErrNotFound) {
			s.fail(w, r, err)
			return rec, false
		}
	}
	writeError(w, errConflict("account "+strconv.Quote(a.ID)+" is defined in "+s.fileWhere()+": it is changed or removed there, by the platform's operators"))
	return registry.AccountRecord{}, false
}

// apiAccount is the account of the path, for a change or a delete: an admin's, and one
// the API made (a 403, 404 or 409 answered otherwise).
func (s *Server) apiAccount(w http.ResponseWriter, r *http.Request, p principal) (config.Account, registry.AccountRecord, bool) {
	if !adminOnly(w, p) {
		return config.Account{}, registry.AccountRecord{}, false
	}
	a, ok := s.findAccount(w, r)
	if !ok {
		return a, registry.AccountRecord{}, false
	}
	rec, ok := s.managedAccount(w, r, a)
	return a, rec, ok
}

func (s *Server) patchAccount(w http.ResponseWriter, r *http.Request, p principal) {
	a, rec, ok := s.apiAccount(w, r, p)
	if !ok {
		return
	}
	var b accountBody
	if e := decodeStrict(r, &b, "the account's fields (id, tenants, sources, store_id_path)"); e != nil {
		writeError(w, e)
		return
	}
	if b.ID != nil && *b.ID != a.ID {
		writeError(w, errFields("an account's id never changes; nothing was changed", []fieldProblem{{"id", "id never changes: make a new account"}}))
		return
	}
	if b.Tenants != nil {
		rec.Tenants = *b.Tenants
	}
	if b.Sources != nil {
		rec.Sources = *b.Sources
	}
	if b.StoreIDPath != nil {
		rec.StoreIDPath = *b.StoreIDPath
	}
	if ps := s.cfg.Load().CheckAccount(rec.Account()); len(ps) > 0 {
		writeError(w, errFields("the change has problems; nothing was changed", fieldsOf(ps)))
		return
	}
	if err := s.opts.Registry.UpdateAccount(r.Context(), rec); err != nil {
		s.fail(w, r, err)
		return
	}
	s.waitAccount(r, a.ID, func(cur config.Account, _ bool) bool { return slices.Equal(cur.Tenants, rec.Tenants) })
	s.log.Info("account changed through the api", "account", a.ID)
	writeJSON(w, http.StatusOK, s.accountOut(rec.Account(), s.destinationCounts(), &rec.CreatedAt))
}

func (s *Server) deleteAccount(w http.ResponseWriter, r *http.Request, p principal) {
	a, _, ok := s.apiAccount(w, r, p)
	if !ok {
		return
	}
	busy := func(n int) {
		writeError(w, errConflict("account "+strconv.Quote(a.ID)+" has "+strconv.Itoa(n)+" destinations: delete them first"))
	}
	if n := s.destinationCounts()[a.ID]; n > 0 {
		busy(n)
		return
	}
	// Its console sessions and links end first: an account made again under this id must
	// not find them alive, and a delete that could not end them deletes nothing (ending
	// them again later is harmless).
	if s.opts.Store != nil {
		if err := s.opts.Store.EndSessions(r.Context(), a.ID); err != nil {
			s.log.Warn("the account's console sessions could not be ended: redis did not answer; nothing deleted", "account", a.ID, "error", err)
			writeError(w, errUnavailable("the account's console sessions could not be ended (Redis did not answer); nothing was deleted: try again"))
			return
		}
	}
	switch err := s.opts.Registry.DeleteAccount(r.Context(), a.ID); {
	case errors.Is(err, registry.ErrBusy):
		busy(max(1, s.destinationCounts()[a.ID]))
		return
	case errors.Is(err, destination.ErrNotFound):
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.waitAccount(r, a.ID, func(_ config.Account, ok bool) bool { return !ok })
	s.log.Info("account deleted through the api", "account", a.ID)
	writeJSON(w, http.StatusOK, map[string]any{"deleted": a.ID})
}
