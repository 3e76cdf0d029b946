package registry

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/jobs"
)

// Only the controller's own Jobs count. A Job is a run of an object only through its controller
// owner reference to it (jobs.ControllerOf): the captf labels alone, which anyone who may create
// Jobs can copy, make no run. The store keeps only such Jobs (see jobFeed), and the Jobs of one
// owner key are split by the UID their reference names, so that the Jobs of an earlier object
// of the same name, or a reference with a made-up UID, never enter the history of the object
// the server knows.

// isRun reports whether the record's Job is a run of some object: its controller reference
// names a kind that runs Jobs in the infrastructure group.
func (r *jobRecord) isRun() bool {
	ref := r.target.Value().ref
	return ref.set && jobs.IsTargetReference(ref.apiVersion, ref.kind)
}

// objectUID is the UID of the object the record's Job is a run of; see isRun.
func (r *jobRecord) objectUID() types.UID { return r.target.Value().ref.uid }

// objectRuns splits records, all of one owner key, into the runs of each object they name. When
// owner, the object the server knows by that key, is not nil, only its runs are returned, as
// one slice: the others belong to an object of the same name that is gone (the controller
// ignores them and garbage collection removes them), or to none. When owner is nil, each UID's
// records are one object's runs. records is not changed; a slice is shared when all of it is
// one object's.
func objectRuns(records []*jobRecord, owner *ownerRecord) [][]*jobRecord {
	if len(records) == 0 {
		return nil
	}
	if owner != nil {
		own := recordsOf(records, owner.UID)
		if len(own) == 0 {
			return nil
		}
		return [][]*jobRecord{own}
	}
	first := records[0].objectUID()
	if len(recordsOf(records, first)) == len(records) {
		return [][]*jobRecord{records}
	}
	index := map[types.UID]int{}
	var out [][]*jobRecord
	for _, r := range records {
		uid := r.objectUID()
		i, ok := index[uid]
		if !ok {
			i = len(out)
			index[uid] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	return out
}

// recordsOf returns the records of runs of the object with uid; records itself when all are.
func recordsOf(records []*jobRecord, uid types.UID) []*jobRecord {
	for i, r := range records {
		if r.objectUID() == uid {
			continue
		}
		out := append(make([]*jobRecord, 0, len(records)-1), records[:i]...)
		for _, x := range records[i+1:] {
			if x.objectUID() == uid {
				out = append(out, x)
			}
		}
		return out
	}
	return records
}

// lastState is the record to publish as the last state of a run whose Job left the store:
// gone, the delete event's record or the update that made the Job no run, when it is still a
// run of the same object, and otherwise the stored record at gone's version, so that the
// DELETED event is published in the group the run was shown in.
func lastState(stored, gone *jobRecord) *jobRecord {
	if gone.isRun() && gone.ownerKey() == stored.ownerKey() && gone.objectUID() == stored.objectUID() {
		return gone
	}
	out := stored.DeepCopyObject().(*jobRecord)
	out.resourceVersion = gone.resourceVersion
	return out
}
