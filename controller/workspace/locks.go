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
	Created   string `json:"Created"`
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

// StateLock is a held state lock, as the kubernetes backend records it on the lock Lease: the
// lock ID as the Lease's holder, and the lock details in LockInfoAnnotation.
type StateLock struct {
	// Holder is the Lease's spec.holderIdentity.
	Holder string
	// Readable is set when the details parse and name a lock ID of OpenTofu's size; ID,
	// Operation, Who (user@hostname) and Created are then the details' fields.
	Readable                    bool
	ID, Operation, Who, Created string
}

// ReadStateLock reads the lock a lock Lease records; held is false when there is none (no
// holder: the backend clears it when it unlocks).
func ReadStateLock(lease *coordinationv1.Lease) (lock StateLock, held bool) {
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return StateLock{}, false
	}
	lock.Holder = *lease.Spec.HolderIdentity
	var info lockInfo
	if err := json.Unmarshal([]byte(lease.Annotations[LockInfoAnnotation]), &info); err != nil || info.ID == "" || len(info.ID) > maxLockIDBytes {
		return lock, true
	}
	lock.Readable, lock.ID, lock.Operation, lock.Who, lock.Created = true, info.ID, info.Operation, info.Who, info.Created
	return lock, true
}

// Host is the hostname in Who, the pod name when a Job's pod took the lock; "" when Who names
// no host.
func (l StateLock) Host() string {
	at := strings.LastIndex(l.Who, "@")
	if !l.Readable || at < 0 {
		return ""
	}
	return l.Who[at+1:]
}

// OwnPod is the pod of the Jobs of the object kind/name that took the lock, "" when the holder
// is anything else (jobs.OwnsPod: the Job name keeps pod names within the hostname limit so that
// the host in Who is the pod name).
func (l StateLock) OwnPod(kind jobs.Kind, name string) string {
	if host := l.Host(); host != "" && jobs.OwnsPod(kind, name, host) {
		return host
	}
	return ""
}

// PodDone reports whether a pod can no longer hold a lock: it is gone (nil), or Succeeded or
// Failed and not being deleted (a pod being deleted may still run).
func PodDone(pod *corev1.Pod) bool {
	if pod == nil {
		return true
	}
	finished := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	return finished && pod.DeletionTimestamp == nil
}

// LockVerdict is what a held state lock means for the object's next Job.
type LockVerdict struct {
	// StaleID is the ID of a lock left by a pod of this object's own Jobs that is gone or
	// finished: the next Job releases it (--force-unlock).
	StaleID string
	// HeldBy describes a holder that is not known to be stale; the Job starts anyway and waits
	// lockTimeoutSeconds for it.
	HeldBy string
}

// JudgeStateLock is the stale-lock rule: a lock is stale only when its details are readable,
// the host in Who is a pod of the Jobs of the object kind/name (OwnPod), and that pod is done
// (PodDone; ownPod is the pod OwnPod names as read, nil when it is gone). Any other holder is
// never released by the controller.
func JudgeStateLock(lock StateLock, kind jobs.Kind, name string, ownPod *corev1.Pod) LockVerdict {
	pod := lock.OwnPod(kind, name)
	switch {
	case !lock.Readable:
		return LockVerdict{HeldBy: fmt.Sprintf("lock %s with unreadable details", jobs.TruncateUTF8(lock.Holder, maxLockIDBytes))}
	case pod == "":
		return LockVerdict{HeldBy: fmt.Sprintf("lock %s held by %s for %s", lock.ID, quoteBounded(lock.Who, maxLockWhoBytes),
			jobs.TruncateUTF8(lock.Operation, maxLockOperationBytes))}
	case PodDone(ownPod):
		return LockVerdict{StaleID: lock.ID}
	}
	return LockVerdict{HeldBy: fmt.Sprintf("lock %s held by the running pod %s of this object's Jobs", lock.ID, pod)}
}

// checkStateLock reads the state lock Lease live before a Job starts (the run Lease is held, so
// no other run of this object is active) and judges it (JudgeStateLock).
//
// The backend labels the lock Lease with the owner labels and removes the lock details when it
// unlocks, so when the metadata cache shows no Lease or no details there is no lock to read: a
// lock taken since the cache last heard of it is a live run's, which the Job waits for anyway,
// and a stale one is older than any cache lag.
func (p *pass) checkStateLock(ctx context.Context) (LockVerdict, error) {
	key := client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: state.LockLeaseName(p.stateSuffix())}
	if p.r.Metadata != nil {
		m, found, err := cachedMetadata(ctx, p.r.Metadata, leaseGVK, key)
		if err != nil {
			return LockVerdict{}, fmt.Errorf("reading the state lock %s from the cache: %w", key.Name, err)
		}
		if !found {
			return LockVerdict{}, nil
		}
		if _, locked := m.Annotations[LockInfoAnnotation]; !locked {
			return LockVerdict{}, nil
		}
	}
	var lease coordinationv1.Lease
	switch err := p.r.APIReader.Get(ctx, key, &lease); {
	case apierrors.IsNotFound(err):
		return LockVerdict{}, nil
	case err != nil:
		return LockVerdict{}, fmt.Errorf("reading the state lock %s: %w", key.Name, err)
	}
	lock, held := ReadStateLock(&lease)
	if !held {
		return LockVerdict{}, nil
	}
	var ownPod *corev1.Pod
	if name := lock.OwnPod(p.r.Kind, p.obj.GetName()); name != "" {
		var pod corev1.Pod
		switch err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: p.obj.GetNamespace(), Name: name}, &pod); {
		case err == nil:
			ownPod = &pod
		case !apierrors.IsNotFound(err):
			return LockVerdict{}, fmt.Errorf("reading pod %s, which holds the state lock: %w", name, err)
		}
	}
	return JudgeStateLock(lock, p.r.Kind, p.obj.GetName(), ownPod), nil
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
