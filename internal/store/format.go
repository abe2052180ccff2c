package store

// SetStateFormat tells the store which state format the deployment writes now
// (upgrade.Keeper.Writes): what only a later format may write waits for it
// (CounterLifetime). Without it the store writes format 1, which every release reads.
func (s *Store) SetStateFormat(writes func() int) { s.format.Store(&writes) }

// stateFormat is the state format in force, as SetStateFormat's function says.
func (s *Store) stateFormat() int {
	if f := s.format.Load(); f != nil && *f != nil {
		return (*f)()
	}
	return 1
}
