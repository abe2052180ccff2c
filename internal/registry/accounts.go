package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
)

// accountsKey holds the accounts the API made: id → AccountRecord (JSON).
const accountsKey = "relay:{registry}:accounts"

// ErrBusy: the account still has destinations the API made.
var ErrBusy = errors.New("the account has destinations")

// AccountRecord is one account the API made, as stored.
type AccountRecord struct {
	ID          string    `json:"id"`
	Tenants     []string  `json:"tenants"`
	Sources     []string  `json:"sources,omitempty"`
	StoreIDPath string    `json:"store_id_path,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// Account is the record as routing takes it.
func (a AccountRecord) Account() config.Account {
	return config.Account{ID: a.ID, Tenants: a.Tenants, Sources: a.Sources, StoreIDPath: a.StoreIDPath}
}

// CreateAccount stores rec unless its id is taken (ErrExists).
func (g *Registry) CreateAccount(ctx context.Context, rec AccountRecord) error {
	return g.put(ctx, accountsKey, "put_account", rec.ID, rec, false)
}

// UpdateAccount replaces the stored record of rec.ID (destination.ErrNotFound when
// there is none).
func (g *Registry) UpdateAccount(ctx context.Context, rec AccountRecord) error {
	return g.put(ctx, accountsKey, "put_account", rec.ID, rec, true)
}

var deleteAccountScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0') > 0 then return -1 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'op', 'delete_account', 'id', ARGV[1])
return 1
`)

// DeleteAccount removes id's record: destination.ErrNotFound when there is none, ErrBusy
// while the registry holds destinations of it (checked in the same step, so a create
// cannot slip in between).
func (g *Registry) DeleteAccount(ctx context.Context, id string) error {
	n, err := deleteAccountScript.Run(ctx, g.rdb, []string{accountsKey, changesKey, countKey}, id, changesKept).Int()
	switch {
	case err != nil:
		return err
	case n == 0:
		return destination.ErrNotFound
	case n < 0:
		return ErrBusy
	}
	return nil
}

// GetAccount reads id's record (destination.ErrNotFound when there is none).
func (g *Registry) GetAccount(ctx context.Context, id string) (AccountRecord, error) {
	s, err := g.rdb.HGet(ctx, accountsKey, id).Result()
	if errors.Is(err, redis.Nil) {
		return AccountRecord{}, destination.ErrNotFound
	}
	if err != nil {
		return AccountRecord{}, err
	}
	var rec AccountRecord
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		return AccountRecord{}, fmt.Errorf("registry account %s: %w", id, err)
	}
	return rec, nil
}

// AllAccounts reads every account record.
func (g *Registry) AllAccounts(ctx context.Context) ([]AccountRecord, error) {
	m, err := g.rdb.HGetAll(ctx, accountsKey).Result()
	if err != nil {
		return nil, err
	}
	out := make([]AccountRecord, 0, len(m))
	for id, s := range m {
		var rec AccountRecord
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			return nil, fmt.Errorf("registry account %s: %w", id, err)
		}
		out = append(out, rec)
	}
	return out, nil
}
