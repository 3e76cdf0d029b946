package workspace

// WithStateMemo gives r the state memo the manager's reconcilers have, so that a test can run
// passes that take facts from caches.
func WithStateMemo(r *Reconciler) *Reconciler {
	r.states = newStateMemo()
	return r
}
