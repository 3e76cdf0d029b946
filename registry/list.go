package registry

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"
)

// Lists are whole: a list answers every run or plan it selects at once, sorted by namespace and
// name. The API lets a server ignore limit ("servers may choose not to support the limit
// argument and will return all of the available results"), so a list never carries a continue
// token nor a remainingItemCount, and clients that page read it in one request.

// catchUpWait is how long a list at an exact resourceVersion the server has not reached yet
// waits for it: another replica answered with it, and this one is a few events behind.
const catchUpWait = 3 * time.Second

// catchUpPoll is how often such a list looks again.
const catchUpPoll = 10 * time.Millisecond

// listVersionOf reads the options of a list, which is answered whole, and returns the
// resourceVersion the list is at. limit is never read, but for telling an exact resourceVersion
// as the API does. A continue token is 410 Gone: this server issues none, and a token of
// another server's list continued with a whole list would show its items twice. A
// resourceVersion is a number; "" and "0" and any not matched exactly read the newest state.
// An exact resourceVersion (match Exact, or limit without a match) is waited for as long as
// catchUpWait, then served only when it is the current one: the server keeps no earlier state.
// The API server has already refused resourceVersionMatch without resourceVersion or with
// continue.
func (s *Source) listVersionOf(ctx context.Context, o *metainternalversion.ListOptions) (string, error) {
	if o == nil {
		return s.listRV(), nil
	}
	if o.Continue != "" {
		return "", apierrors.NewResourceExpired("this server returns every list whole and issues no continue token; list again without continue")
	}
	if o.ResourceVersion == "" || o.ResourceVersion == "0" {
		return s.listRV(), nil
	}
	rv, err := strconv.ParseUint(o.ResourceVersion, 10, 64)
	if err != nil {
		return "", apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: not a number", o.ResourceVersion))
	}
	exact := o.ResourceVersionMatch == metav1.ResourceVersionMatchExact ||
		o.ResourceVersionMatch == "" && o.Limit > 0
	if !exact || rv == 0 {
		return s.listRV(), nil
	}
	if err := s.awaitRV(ctx, rv); err != nil {
		return "", err
	}
	cur := s.listRV()
	if at, _ := strconv.ParseUint(cur, 10, 64); at != rv {
		return "", apierrors.NewResourceExpired(fmt.Sprintf(
			"resourceVersion %d is not the current resourceVersion %s of lists, and this server keeps no other state; list again", rv, cur))
	}
	return cur, nil
}

// currentRV is the newest resourceVersion the Source has caught up with: its list version, or
// the Job Reflector's when a bookmark took it further.
func (s *Source) currentRV() uint64 {
	cur := s.processedRV.Load()
	if s.jobReflector != nil {
		if rv, err := strconv.ParseUint(s.jobReflector.LastSyncResourceVersion(), 10, 64); err == nil {
			cur = max(cur, rv)
		}
	}
	return cur
}

// awaitRV waits up to s.catchUpWait for the Source to reach rv; past it, the answer is the
// API server's for a resourceVersion it has not reached (504, retry).
func (s *Source) awaitRV(ctx context.Context, rv uint64) error {
	cur := s.currentRV()
	if cur >= rv {
		return nil
	}
	deadline := time.NewTimer(s.catchUpWait)
	defer deadline.Stop()
	tick := time.NewTicker(catchUpPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return storage.NewTooLargeResourceVersionError(rv, cur, 1)
		case <-deadline.C:
			return storage.NewTooLargeResourceVersionError(rv, s.currentRV(), 1)
		case <-tick.C:
			if cur = s.currentRV(); cur >= rv {
				return nil
			}
		}
	}
}
