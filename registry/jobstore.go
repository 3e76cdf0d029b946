package registry

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// jobKey names a Job in the store. Its strings are the record's own, so a key costs no
// allocation.
type jobKey struct{ namespace, name string }

// jobStore holds the records of the managed Jobs by namespace and name and by owner key. It
// takes the place of an informer's store and its indexes, whose key strings and index sets
// cost more per Job than the compact record itself. It keeps only the current records, and
// never publishes; see jobFeed.
type jobStore struct {
	mu      sync.RWMutex
	byName  map[jobKey]*jobRecord
	byOwner map[string][]*jobRecord
}

func newJobStore() *jobStore {
	return &jobStore{byName: map[jobKey]*jobRecord{}, byOwner: map[string][]*jobRecord{}}
}

func keyOf(r *jobRecord) jobKey { return jobKey{namespace: r.namespace(), name: r.name} }

// recordOf returns the record of a Job, a record or a deletion tombstone of either.
func recordOf(obj any) (*jobRecord, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	obj, _ = transformJob(obj)
	r, ok := obj.(*jobRecord)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T in the Job store", obj)
	}
	return r, nil
}

// put stores r in place of the record of the same Job, which it returns (nil when new).
func (s *jobStore) put(r *jobRecord) (before *jobRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(r)
}

func (s *jobStore) putLocked(r *jobRecord) (before *jobRecord) {
	k := keyOf(r)
	before = s.byName[k]
	s.byName[k] = r
	if before != nil {
		s.unlinkLocked(before)
	}
	owner := r.ownerKey()
	s.byOwner[owner] = append(s.byOwner[owner], r)
	return before
}

// remove drops the record of the Job r names, which it returns (nil when absent).
func (s *jobStore) remove(r *jobRecord) (before *jobRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := keyOf(r)
	before = s.byName[k]
	if before != nil {
		delete(s.byName, k)
		s.unlinkLocked(before)
	}
	return before
}

// versionOf is the record's resourceVersion as a number; 0 when it is none, which no change of
// the API server's has.
func versionOf(r *jobRecord) uint64 {
	rv, _ := strconv.ParseUint(r.resourceVersion, 10, 64)
	return rv
}

// unlinkLocked removes r from its owner's list; an object has few Jobs, so a scan is cheap.
func (s *jobStore) unlinkLocked(r *jobRecord) {
	owner := r.ownerKey()
	list := s.byOwner[owner]
	for i, x := range list {
		if x == r {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(s.byOwner, owner)
		return
	}
	s.byOwner[owner] = list
}

// get returns the record of a Job by namespace and name.
func (s *jobStore) get(namespace, name string) (*jobRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.byName[jobKey{namespace: namespace, name: name}]
	return r, ok
}

// ofOwner returns the records of the Jobs of one object.
func (s *jobStore) ofOwner(ownerKey string) []*jobRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := s.byOwner[ownerKey]
	out := make([]*jobRecord, len(list))
	copy(out, list)
	return out
}

// ownerKeys returns the owner keys of the objects that have Jobs.
func (s *jobStore) ownerKeys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.byOwner))
	for k := range s.byOwner {
		out = append(out, k)
	}
	return out
}

// len is the number of Jobs.
func (s *jobStore) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byName)
}

// jobFeed is what the Reflector of the managed Jobs writes to: it stores each change in the
// jobStore and publishes it through the Source, one change at a time, in the order of the
// watch. The Reflector hands it Jobs already reduced to records (Transformer). It stores only
// runs (jobRecord.isRun): a Job with the managed label but without a controller reference to an
// object that runs Jobs is no run and is never shown, and a run whose Job loses that reference
// (orphaned, or edited) leaves the store as if deleted.
type jobFeed struct {
	src    *Source
	synced atomic.Bool
}

var _ cache.TransformingStore = &jobFeed{}

// Transformer implements cache.TransformingStore: the Reflector's own buffers keep records.
func (f *jobFeed) Transformer() cache.TransformFunc { return transformJob }

// Add implements cache.ReflectorStore.
func (f *jobFeed) Add(obj any) error { return f.Update(obj) }

// Update implements cache.ReflectorStore.
func (f *jobFeed) Update(obj any) error {
	r, err := recordOf(obj)
	if err != nil {
		return err
	}
	if !r.isRun() {
		return f.Delete(r)
	}
	before := f.src.jobs.put(r)
	if before == nil || before.resourceVersion != r.resourceVersion {
		f.src.onJobEvent(before, r)
	}
	return nil
}

// Delete implements cache.ReflectorStore. The run's last state is the Job of the delete
// event, at the version of its deletion (see lastState).
func (f *jobFeed) Delete(obj any) error {
	r, err := recordOf(obj)
	if err != nil {
		return err
	}
	if before := f.src.jobs.remove(r); before != nil {
		f.src.onJobEvent(lastState(before, r), nil)
	}
	return nil
}

// Replace implements cache.ReflectorStore: the store becomes list, and each difference is a
// change. The first Replace is the initial list; after it the feed has synced. A Job missing
// from a relist was deleted at some version up to the list's, resourceVersion: its deletion is
// published at that version, after the updates the list brings, so that watchers that resume
// count it as newer than what they saw.
func (f *jobFeed) Replace(list []any, resourceVersion string) error {
	records := make(map[jobKey]*jobRecord, len(list))
	ordered := make([]*jobRecord, 0, len(list))
	for _, obj := range list {
		r, err := recordOf(obj)
		if err != nil {
			return err
		}
		records[keyOf(r)] = r
		ordered = append(ordered, r)
	}
	s := f.src.jobs
	s.mu.RLock()
	var gone []*jobRecord
	for k, r := range s.byName {
		if _, ok := records[k]; !ok {
			gone = append(gone, r)
		}
	}
	s.mu.RUnlock()
	for _, r := range ordered {
		if err := f.Update(r); err != nil {
			return err
		}
	}
	listRV, _ := strconv.ParseUint(resourceVersion, 10, 64)
	for _, r := range gone {
		if listRV > versionOf(r) {
			at := r.DeepCopyObject().(*jobRecord)
			at.resourceVersion = resourceVersion
			r = at
		}
		if err := f.Delete(r); err != nil {
			return err
		}
	}
	f.synced.Store(true)
	return nil
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (f *jobFeed) Resync() error { return nil }

// hasSynced reports whether the initial list has been stored.
func (f *jobFeed) hasSynced() bool { return f.synced.Load() }
