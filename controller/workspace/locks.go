package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// LockInfoAnnotation is where the kubernetes backend keeps a held lock's details on the lock
// Lease: JSON with the lock ID and Who, user@hostname of the process that took it.
const LockInfoAnnotation = "app.terraform.io/lock-info"

// lockInfo is the part of the backend's lock details the controller reads.
type lockInfo struct {
	ID        string `json:"ID"`
	Operation string `json:"Operation"`
	Who       string `json:"Who"`
}

// Bounds of the lock details the controller shows. Whoever may write Leases in the namespace
// writes them, and they end up in the StateReadable message (the CRD caps a condition message
// at 32 KiB) and in a StateLocked event (an events.k8s.io note holds at most 1 KiB), so the text
// is cut to fit both with room for the rest of the message.
const (
	// maxLockWhoBytes bounds the holder text shown: OpenTofu writes user@hostname, a user name
	// of at most 32 bytes and a host name of at most 64 (a pod name of this object's Jobs, 63).
	maxLockWhoBytes = 256
	// maxLockIDBytes bounds a lock ID: OpenTofu's are 36-byte UUIDs. A longer one is not
	// OpenTofu's, so the lock reads as having unreadable details and is never released with it.
	maxLockIDBytes = 128
	// maxLockOperationBytes bounds the operation shown: OpenTofu's are OperationTypeApply and
	// the like.
	maxLockOperationBytes = 64
)

// lockVerdict is what the state lock means for the next Job.
type lockVerdict struct {
	// staleID is the ID of a lock left by a pod of this object's own Jobs that is gone or
	// finished: the next Job releases it (--force-unlock).
	staleID string
	// heldBy describes a holder that is not known to be stale; the Job starts anyway and waits
	// lockTimeoutSeconds for it.
	heldBy string
}

// checkStateLock reads the state lock Lease live before a Job starts (the run Lease is held, so
// no other run of this object is active). A lock is stale only when its details parse, the host
// in Who is a pod name of this object's Jobs (jobs.OwnsPod; the Job name keeps pod names within
// the hostname limit for this), and that pod is gone or Succeeded or Failed; a pod being deleted
// still counts as alive. Any other holder is never released.
//
// The backend labels the lock Lease with the owner labels and removes the lock details when it
// unlocks, so when the metadata cache shows no Lease or no details there is no lock to read: a
// lock taken since the cache last heard of it is a live run's, which the Job waits for anyway,
// and a stale one is older than any cache lag.
func (p *pass) checkStateLock(ctx context.Context) (lockVerdict, error) {
	key := client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: state.LockLeaseName(p.stateSuffix())}
	if p.r.Metadata != nil {
		m, found, err := cachedMetadata(ctx, p.r.Metadata, leaseGVK, key)
		if err != nil {
			return lockVerdict{}, fmt.Errorf("reading the state lock %s from the cache: %w", key.Name, err)
		}
		if !found {
			return lockVerdict{}, nil
		}
		if _, locked := m.Annotations[LockInfoAnnotation]; !locked {
			return lockVerdict{}, nil
		}
	}
	var lease coordinationv1.Lease
	switch err := p.r.APIReader.Get(ctx, key, &lease); {
	case apierrors.IsNotFound(err):
		return lockVerdict{}, nil
	case err != nil:
		return lockVerdict{}, fmt.Errorf("reading the state lock %s: %w", key.Name, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return lockVerdict{}, nil
	}
	holder := *lease.Spec.HolderIdentity
	var info lockInfo
	if err := json.Unmarshal([]byte(lease.Annotations[LockInfoAnnotation]), &info); err != nil || info.ID == "" || len(info.ID) > maxLockIDBytes {
		return lockVerdict{heldBy: fmt.Sprintf("lock %s with unreadable details", jobs.TruncateUTF8(holder, maxLockIDBytes))}, nil
	}
	at := strings.LastIndex(info.Who, "@")
	pod := info.Who[at+1:]
	if at < 0 || !jobs.OwnsPod(p.r.Kind, p.obj.GetName(), pod) {
		return lockVerdict{heldBy: fmt.Sprintf("lock %s held by %s for %s", info.ID, quoteBounded(info.Who, maxLockWhoBytes),
			jobs.TruncateUTF8(info.Operation, maxLockOperationBytes))}, nil
	}
	var running corev1.Pod
	switch err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: pod}, &running); {
	case apierrors.IsNotFound(err):
		return lockVerdict{staleID: info.ID}, nil
	case err != nil:
		return lockVerdict{}, fmt.Errorf("reading pod %s, which holds the state lock: %w", pod, err)
	}
	finished := running.Status.Phase == corev1.PodSucceeded || running.Status.Phase == corev1.PodFailed
	if finished && running.DeletionTimestamp == nil {
		return lockVerdict{staleID: info.ID}, nil
	}
	return lockVerdict{heldBy: fmt.Sprintf("lock %s held by the running pod %s of this object's Jobs", info.ID, pod)}, nil
}

// quoteBounded quotes s as %q does, cut so that the quoted text is at most limit bytes (a cut
// text ends in "..." after the quote): escapes can make the quoted text up to four times as long
// as s, and the bound is on what is shown.
func quoteBounded(s string, limit int) string {
	if q := strconv.Quote(s); len(q) <= limit {
		return q
	}
	// The longest prefix whose quoted text fits; the quoted length grows with the prefix, and
	// a prefix longer than limit never fits.
	fits := func(n int) bool { return len(strconv.Quote(jobs.TruncateUTF8(s, n)))+len("...") <= limit }
	lo, hi := 0, min(len(s), limit)
	for lo < hi {
		if mid := (lo + hi + 1) / 2; fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return strconv.Quote(jobs.TruncateUTF8(s, lo)) + "..."
}
