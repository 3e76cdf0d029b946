package cache

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// ownInformer is an informer the controller runs beside the manager's cache, to hold a kind in a
// compact type of its own (JobCache). It is a manager runnable that fills on every replica, like
// the manager's cache, and its Source is a watch the controllers wait for.
type ownInformer struct {
	informer toolscache.SharedIndexInformer
	// notSynced is the error of a read or a wait before the informer has listed its kind.
	notSynced error
}

// newOwnInformer returns the informer of lw's kind T, of which example is an object, storing
// what compact returns for each object; what names the cache in errors.
func newOwnInformer[T runtime.Object](lw toolscache.ListerWatcher, example T, indexers toolscache.Indexers, compact func(T) any, notSynced error, what string) (ownInformer, error) {
	informer := toolscache.NewSharedIndexInformer(lw, example, 0, indexers)
	if err := informer.SetTransform(func(obj any) (any, error) {
		if o, ok := obj.(T); ok {
			return compact(o), nil
		}
		return obj, nil // a tombstone
	}); err != nil {
		return ownInformer{}, fmt.Errorf("setting the %s's transform: %w", what, err)
	}
	return ownInformer{informer: informer, notSynced: notSynced}, nil
}

// Start runs the informer until ctx ends.
func (o ownInformer) Start(ctx context.Context) error {
	o.informer.RunWithContext(ctx)
	return nil
}

// HasSynced reports whether the informer has listed its kind.
func (o ownInformer) HasSynced() bool { return o.informer.HasSynced() }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (o ownInformer) NeedLeaderElection() bool { return false }

// Source is the watch of the cached objects for a controller, with h mapping an object to
// requests. The controller waits for the informer to have listed its kind before it starts.
func (o ownInformer) Source(h handler.EventHandler) source.Source {
	return &syncedSource{Informer: source.Informer{Informer: o.informer, Handler: h}, synced: o.informer.HasSynced, notSynced: o.notSynced}
}

// syncedSource is a source.Informer the controller waits for.
type syncedSource struct {
	source.Informer
	synced    func() bool
	notSynced error
}

// WaitForSync implements source.SyncingSource.
func (s syncedSource) WaitForSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), s.synced) {
		return fmt.Errorf("waiting for the cache: %w", s.notSynced)
	}
	return nil
}
