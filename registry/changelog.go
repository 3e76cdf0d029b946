package registry

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// changeHistory is how many Job changes the store keeps for paged lists. A paged list must
// finish before that many changes follow its first page: kubectl pages 30,000 runs in a few
// seconds, and even a busy install changes a few Jobs a second. A change costs 48 bytes and
// keeps the record it replaced alive, some 300 bytes.
const changeHistory = 4096

// jobChange is one change of the store: the Job's key, its record before the change (nil when
// the change added it) and the resourceVersion of the change.
type jobChange struct {
	rv     uint64
	key    jobKey
	before *jobRecord
}

// changeLog is the ring of the store's recent changes, oldest first. Undoing the changes newer
// than a resourceVersion gives the store as it was at that version; the runs computed from
// those records are the runs at that version (see snapshot).
type changeLog struct {
	ring []jobChange
	// next is the index of the oldest change once the ring is full, where the next one goes.
	next int
	// floor is the highest resourceVersion of a change dropped from the ring: the log can undo
	// back to any version at or after it.
	floor uint64
}

// add appends c, dropping the oldest change when the ring is full.
func (l *changeLog) add(c jobChange) {
	if len(l.ring) < changeHistory {
		l.ring = append(l.ring, c)
		return
	}
	l.floor = max(l.floor, l.ring[l.next].rv)
	l.ring[l.next] = c
	l.next = (l.next + 1) % len(l.ring)
}

// reaches reports whether the log holds every change after rv.
func (l *changeLog) reaches(rv uint64) bool { return l.floor <= rv }

// undo returns, for each Job changed after rv, its record at rv (nil when it did not exist
// then): the before of its oldest change after rv. The caller checks reaches first.
func (l *changeLog) undo(rv uint64) map[jobKey]*jobRecord {
	var out map[jobKey]*jobRecord
	for i := range l.ring {
		c := l.ring[(l.next+i)%len(l.ring)]
		if c.rv <= rv {
			continue
		}
		if out == nil {
			out = map[jobKey]*jobRecord{}
		}
		if _, ok := out[c.key]; !ok {
			out[c.key] = c.before
		}
	}
	return out
}

// compareKeys orders Job keys by namespace, then name: the order of lists.
func compareKeys(a, b jobKey) int {
	return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
}

// snapshot is the store at a resourceVersion: its current records with the newer changes
// undone. It is read under the store's lock.
type snapshot struct {
	store *jobStore
	undo  map[jobKey]*jobRecord
	// undoneByOwner holds the records of undo by owner key.
	undoneByOwner map[string][]*jobRecord
}

// snapshotLocked returns the store at rv; false when its log no longer reaches rv. The caller
// holds the read lock.
func (s *jobStore) snapshotLocked(rv uint64) (snapshot, bool) {
	if !s.changes.reaches(rv) {
		return snapshot{}, false
	}
	sn := snapshot{store: s, undo: s.changes.undo(rv)}
	for _, r := range sn.undo {
		if r != nil {
			if sn.undoneByOwner == nil {
				sn.undoneByOwner = map[string][]*jobRecord{}
			}
			sn.undoneByOwner[r.ownerKey()] = append(sn.undoneByOwner[r.ownerKey()], r)
		}
	}
	return sn, true
}

// each calls f with every record of the snapshot in namespace ("" for all), in no order.
func (sn snapshot) each(namespace string, f func(*jobRecord)) {
	visit := func(r *jobRecord) {
		if _, changed := sn.undo[keyOf(r)]; !changed {
			f(r)
		}
	}
	if namespace == "" {
		for _, r := range sn.store.byName {
			visit(r)
		}
	} else {
		prefix := namespace + "/"
		for key, list := range sn.store.byOwner {
			if strings.HasPrefix(key, prefix) {
				for _, r := range list {
					visit(r)
				}
			}
		}
	}
	for _, r := range sn.undo {
		if r != nil && (namespace == "" || r.namespace() == namespace) {
			f(r)
		}
	}
}

// siblings returns the snapshot's records of the object with ownerKey.
func (sn snapshot) siblings(ownerKey string) []*jobRecord {
	list := sn.store.byOwner[ownerKey]
	out := make([]*jobRecord, 0, len(list)+len(sn.undoneByOwner[ownerKey]))
	for _, r := range list {
		if _, changed := sn.undo[keyOf(r)]; !changed {
			out = append(out, r)
		}
	}
	return append(out, sn.undoneByOwner[ownerKey]...)
}

// batch is the records of one step of a page, sorted by key, with the snapshot's records of
// their objects.
type batch struct {
	records  []*jobRecord
	siblings map[string][]*jobRecord
	// more is set when the snapshot has selected records after the last of records.
	more bool
}

// batchAt returns the first n records after the key after (the zero key for the first) of the
// store at rv that keep selects; false when the store's log no longer reaches rv. It holds the
// store's read lock for one pass over the records and keeps n of them at most twice: the
// records, not a copy of the list, are the page's.
func (s *jobStore) batchAt(rv uint64, namespace string, after jobKey, n int, keep func(*jobRecord) bool) (batch, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sn, ok := s.snapshotLocked(rv)
	if !ok {
		return batch{}, false
	}
	first := firstAfter{after: after, n: n, keep: keep}
	sn.each(namespace, first.offer)
	b := batch{records: first.result(), more: first.seen > n, siblings: map[string][]*jobRecord{}}
	for _, r := range b.records {
		if key := r.ownerKey(); b.siblings[key] == nil {
			b.siblings[key] = sn.siblings(key)
		}
	}
	return b, true
}

// firstAfter keeps the n smallest keys after a key among the records offered, in a buffer of
// at most 2n that is sorted and cut to n when full.
type firstAfter struct {
	after jobKey
	n     int
	keep  func(*jobRecord) bool

	buf []*jobRecord
	// bound, once set, is the largest key kept: a larger one cannot be among the first n.
	bound    jobKey
	hasBound bool
	// seen counts the records after the key that keep selects.
	seen int
}

func (f *firstAfter) offer(r *jobRecord) {
	k := keyOf(r)
	if compareKeys(k, f.after) <= 0 || !f.keep(r) {
		return
	}
	f.seen++
	if f.hasBound && compareKeys(k, f.bound) >= 0 {
		return
	}
	f.buf = append(f.buf, r)
	if f.n <= math.MaxInt/2 && len(f.buf) >= 2*f.n {
		f.cut()
	}
}

func (f *firstAfter) cut() {
	slices.SortFunc(f.buf, func(a, b *jobRecord) int { return compareKeys(keyOf(a), keyOf(b)) })
	if len(f.buf) > f.n {
		clear(f.buf[f.n:])
		f.buf = f.buf[:f.n]
	}
	if len(f.buf) == f.n {
		f.bound, f.hasBound = keyOf(f.buf[f.n-1]), true
	}
}

// result returns the first n records, sorted.
func (f *firstAfter) result() []*jobRecord {
	f.cut()
	return f.buf
}
