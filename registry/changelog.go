package registry

import (
	"cmp"
	"slices"
	"sort"
	"strings"
)

// changeHistory is how many Job changes the store keeps for paged lists. A paged list must
// finish before that many changes follow its first page: kubectl pages 30,000 runs in a few
// seconds, and even a busy install changes a few Jobs a second. A change costs 48 bytes and
// keeps the record it replaced alive, some 300 bytes.
const changeHistory = 4096

// indexStaleness is how many changes the sorted key index may lag behind the store before a
// page rebuilds it. A page applies the changes since the index from the log, which costs a
// little per change; a rebuild sorts every record.
const indexStaleness = 1024

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
	// total counts the changes ever added; the newest is number total.
	total uint64
	// floor is the highest resourceVersion of a change dropped from the ring: the log can undo
	// back to any version at or after it.
	floor uint64
}

// add appends c, dropping the oldest change when the ring is full.
func (l *changeLog) add(c jobChange) {
	l.total++
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

// since calls f with the key of every change numbered after seq, which must still be kept:
// seq is at most changeHistory changes old.
func (l *changeLog) since(seq uint64, f func(jobKey)) {
	for i := len(l.ring) - int(l.total-seq); i < len(l.ring); i++ {
		f(l.ring[(l.next+i)%len(l.ring)].key)
	}
}

// compareKeys orders Job keys by namespace, then name: the order of lists.
func compareKeys(a, b jobKey) int {
	return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
}

// keyIndex is the store's records sorted by key as they were after change number seq: a shared,
// read-only order that a page enters at the key it continues after, instead of sorting the
// store. The changes since seq are applied to it from the log.
type keyIndex struct {
	records []*jobRecord
	seq     uint64
}

// keyIndexLocked returns the index, rebuilt when the changes since it are more than
// indexStaleness. The caller holds the store's read lock, which keeps writers out while it
// sorts; indexMu keeps two readers from sorting at once.
func (s *jobStore) keyIndexLocked() *keyIndex {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if idx := s.index; idx != nil && s.changes.total-idx.seq <= indexStaleness {
		return idx
	}
	all := make([]keyed, 0, len(s.byName))
	for k, r := range s.byName {
		all = append(all, keyed{key: k, r: r})
	}
	slices.SortFunc(all, func(a, b keyed) int { return compareKeys(a.key, b.key) })
	idx := &keyIndex{records: make([]*jobRecord, len(all)), seq: s.changes.total}
	for i, e := range all {
		idx.records[i] = e.r
	}
	s.index = idx
	return idx
}

// keyed is a record with its key.
type keyed struct {
	key jobKey
	r   *jobRecord
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

// ordered walks the snapshot's records in key order: the index's, but those whose key has
// another record at the snapshot (changed since the snapshot or since the index), merged
// with those records.
type ordered struct {
	index []*jobRecord
	i     int
	// over holds the record at the snapshot of each key whose index entry is not it; nil
	// when the Job did not exist then.
	over map[jobKey]*jobRecord
	// extra is over's records, sorted, from j on.
	extra []keyed
	j     int
}

// orderedLocked returns the walk of sn from the first key after after, with idx the store's
// index. The caller holds the store's read lock.
func (sn snapshot) orderedLocked(idx *keyIndex, after jobKey) ordered {
	w := ordered{index: idx.records}
	if len(sn.undo) > 0 || sn.store.changes.total > idx.seq {
		w.over = make(map[jobKey]*jobRecord, len(sn.undo))
		for k, r := range sn.undo {
			w.over[k] = r
		}
		// A Job changed since the index but not since the snapshot is at the snapshot as it
		// is now. The index is within indexStaleness changes, so the log has them all.
		sn.store.changes.since(idx.seq, func(k jobKey) {
			if _, ok := w.over[k]; !ok {
				w.over[k] = sn.store.byName[k]
			}
		})
		for k, r := range w.over {
			if r != nil && compareKeys(k, after) > 0 {
				w.extra = append(w.extra, keyed{key: k, r: r})
			}
		}
		slices.SortFunc(w.extra, func(a, b keyed) int { return compareKeys(a.key, b.key) })
	}
	w.i = sort.Search(len(w.index), func(i int) bool { return compareKeys(keyOf(w.index[i]), after) > 0 })
	return w
}

// next returns the next record of the walk and its key; false at the end.
func (w *ordered) next() (keyed, bool) {
	var fromIndex keyed
	for w.i < len(w.index) {
		r := w.index[w.i]
		k := keyOf(r)
		if _, changed := w.over[k]; !changed {
			fromIndex = keyed{key: k, r: r}
			break
		}
		w.i++
	}
	switch {
	case fromIndex.r == nil && w.j == len(w.extra):
		return keyed{}, false
	case fromIndex.r == nil || w.j < len(w.extra) && compareKeys(w.extra[w.j].key, fromIndex.key) < 0:
		w.j++
		return w.extra[w.j-1], true
	}
	w.i++
	return fromIndex, true
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
// store at rv in namespace ("" for all) that keep selects; false when the store's log no
// longer reaches rv. It walks the shared key index from after, so that a page costs what it
// returns and what it reads past, not the whole store, and it copies no list.
func (s *jobStore) batchAt(rv uint64, namespace string, after jobKey, n int, keep func(*jobRecord) bool) (batch, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sn, ok := s.snapshotLocked(rv)
	if !ok {
		return batch{}, false
	}
	if namespace != "" && compareKeys(after, jobKey{namespace: namespace}) < 0 {
		after = jobKey{namespace: namespace}
	}
	w := sn.orderedLocked(s.keyIndexLocked(), after)
	b := batch{siblings: map[string][]*jobRecord{}}
	for {
		e, ok := w.next()
		if !ok || namespace != "" && e.key.namespace != namespace {
			break
		}
		if !keep(e.r) {
			continue
		}
		if len(b.records) == n {
			b.more = true
			break
		}
		b.records = append(b.records, e.r)
	}
	for _, r := range b.records {
		if key := r.ownerKey(); b.siblings[key] == nil {
			b.siblings[key] = sn.siblings(key)
		}
	}
	return b, true
}
