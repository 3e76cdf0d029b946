package registry

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"
)

// Paged lists. A page is computed from the Job records of a snapshot: the store's current
// records with the changes newer than the snapshot's resourceVersion undone (see changeLog).
// Each page takes the first records after the last key the previous page returned, with the
// snapshot's records of their objects, so that a run is computed among the siblings it had at
// that version. The continue token carries the snapshot's resourceVersion and that key, which
// any replica can serve: they all follow the same Jobs.

// catchUpWait is how long a page at a resourceVersion the server has not reached yet waits for
// it: another replica issued the token, and this one is a few events behind.
const catchUpWait = 3 * time.Second

// catchUpPoll is how often such a page looks again.
const catchUpPoll = 10 * time.Millisecond

// tokenVersion marks the form of continue tokens; a token of another form is malformed.
const tokenVersion = 1

// newestRV in a continue token asks for the newest snapshot: the token offered with a 410 Gone
// when the snapshot's changes are no longer kept.
const newestRV = -1

// continueToken is the content of a continue parameter, as base64 (URL alphabet) of its JSON.
type continueToken struct {
	Version int `json:"v"`
	// RV is the snapshot's resourceVersion, or newestRV.
	RV int64 `json:"rv"`
	// Namespace and Name are the key of the last item returned.
	Namespace string `json:"ns"`
	Name      string `json:"name"`
}

// encodeContinue returns the continue token of the page that ended at last, in the snapshot
// at rv.
func encodeContinue(rv int64, last jobKey) (string, error) {
	b, err := json.Marshal(continueToken{Version: tokenVersion, RV: rv, Namespace: last.namespace, Name: last.name})
	if err != nil {
		return "", apierrors.NewInternalError(fmt.Errorf("encoding the continue token: %w", err))
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// decodeContinue reads a continue token; the error says what is wrong with it.
func decodeContinue(value string) (continueToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		return continueToken{}, fmt.Errorf("not base64: %w", err)
	}
	var t continueToken
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return continueToken{}, fmt.Errorf("not a token of this server: %w", err)
	}
	if dec.More() {
		return continueToken{}, errors.New("not a token of this server: data after the token")
	}
	switch {
	case t.Version != tokenVersion:
		return continueToken{}, fmt.Errorf("unknown token version %d", t.Version)
	case t.RV <= 0 && t.RV != newestRV:
		return continueToken{}, errors.New("no resourceVersion")
	case t.Namespace == "" || t.Name == "":
		return continueToken{}, errors.New("no last key")
	}
	return t, nil
}

// listRequest is how a list reads the Jobs: at once from the current records, or through a
// snapshot, a page at a time.
type listRequest struct {
	// paged is set when the list is read through a snapshot: limit, continue or an exact
	// resourceVersion.
	paged bool
	// limit is the most items a page holds; 0 for all.
	limit int
	// at is the snapshot's resourceVersion; 0 for the newest.
	at uint64
	// after is the key of the last item of the previous page; zero on the first page.
	after jobKey
	// continued is set when the request carries a continue token.
	continued bool
}

// listRequestOf reads limit, continue, resourceVersion and resourceVersionMatch of a list in
// namespace ("" for all). The API server has already refused resourceVersionMatch without
// resourceVersion or with continue. A resourceVersion is a number; with continue it may only be
// "" or "0", since the token fixes the snapshot. An exact resourceVersion (match Exact, or any
// but "0" with limit and no match) reads the snapshot at it; otherwise the newest is read.
func listRequestOf(namespace string, o *metainternalversion.ListOptions) (listRequest, error) {
	var req listRequest
	if o == nil {
		return req, nil
	}
	if o.Limit > 0 {
		req.paged, req.limit = true, int(min(o.Limit, math.MaxInt32))
	}
	if o.Continue != "" {
		if o.ResourceVersion != "" && o.ResourceVersion != "0" {
			return req, apierrors.NewBadRequest("resourceVersion may not be set with continue: the continue token names the list's resourceVersion")
		}
		t, err := decodeContinue(o.Continue)
		if err != nil {
			return req, apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v; list again without continue", err))
		}
		if namespace != "" && t.Namespace != namespace {
			return req, apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: it continues a list of namespace %q, not %q", t.Namespace, namespace))
		}
		req.paged, req.continued, req.after = true, true, jobKey{namespace: t.Namespace, name: t.Name}
		if t.RV > 0 {
			req.at = uint64(t.RV)
		}
		return req, nil
	}
	if o.ResourceVersion == "" {
		return req, nil
	}
	rv, err := strconv.ParseUint(o.ResourceVersion, 10, 64)
	if err != nil {
		return req, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: not a number", o.ResourceVersion))
	}
	exact := o.ResourceVersionMatch == metav1.ResourceVersionMatchExact ||
		o.ResourceVersionMatch == "" && req.limit > 0
	if exact && rv > 0 {
		req.paged, req.at = true, rv
	}
	return req, nil
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

// snapshotOf returns the resourceVersion of the snapshot a request reads.
func (s *Source) snapshotOf(ctx context.Context, req listRequest) (uint64, error) {
	if req.at == 0 {
		rv, _ := strconv.ParseUint(s.listRV(), 10, 64)
		return rv, nil
	}
	return req.at, s.awaitRV(ctx, req.at)
}

// expired is the answer to a request whose snapshot's changes are no longer kept: 410 Gone,
// and for a continued list a token that continues it at the newest snapshot, as the API
// server offers one.
func expired(req listRequest, rv uint64) error {
	if !req.continued {
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d; list again", rv))
	}
	err := apierrors.NewResourceExpired(fmt.Sprintf(
		"the continue token has expired: the server no longer keeps the changes since resourceVersion %d; "+
			"start the list again without continue, or follow the continue token of this answer to list the rest as it is now", rv))
	token, tokenErr := encodeContinue(newestRV, req.after)
	if tokenErr != nil {
		return tokenErr
	}
	err.ErrStatus.ListMeta.Continue = token
	return err
}

// viewsFunc computes the items of selected, records of one owner key, that the selection
// selects, among siblings: the snapshot's records of that key.
type viewsFunc[T any] func(selected, siblings []*jobRecord, now time.Time) []T

// listPage reads one page of runs or plans of the selection: at most req.limit items after
// req.after, sorted by namespace and name, of the snapshot at req.at (or the newest), and the
// list metadata with the snapshot's resourceVersion and, when more may follow, the continue
// token. Records whose items a field selector on a computed field rejects are read past, in
// steps that double, so that a selective list takes a few steps, not one per item.
func listPage[T metav1.Object](ctx context.Context, s *Source, req listRequest, sel selection, views viewsFunc[T]) ([]T, metav1.ListMeta, error) {
	rv, err := s.snapshotOf(ctx, req)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	meta := metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	limit := req.limit
	if limit == 0 {
		limit = math.MaxInt
	}
	var out []T
	cursor, step := req.after, limit
	now := s.now()
	for {
		b, ok := s.jobs.batchAt(rv, sel.namespace, cursor, step, sel.keepsRecord)
		if !ok {
			return nil, metav1.ListMeta{}, expired(req, rv)
		}
		items := itemsOf(b, views, now)
		take := min(len(items), limit-len(out))
		out = append(out, items[:take]...)
		if len(out) == limit {
			last := itemKey(out[len(out)-1])
			// Records of the batch after the last item may still make items, and so may the
			// records after the batch.
			if b.more || compareKeys(last, keyOf(b.records[len(b.records)-1])) < 0 {
				if meta.Continue, err = encodeContinue(int64(rv), last); err != nil {
					return nil, metav1.ListMeta{}, err
				}
			}
			return out, meta, nil
		}
		if !b.more {
			return out, meta, nil
		}
		cursor = keyOf(b.records[len(b.records)-1])
		if step < math.MaxInt/4 {
			step *= 2
		}
	}
}

// itemsOf computes the items of a batch, sorted by namespace and name.
func itemsOf[T metav1.Object](b batch, views viewsFunc[T], now time.Time) []T {
	byOwner := map[string][]*jobRecord{}
	var owners []string
	for _, r := range b.records {
		key := r.ownerKey()
		if _, ok := byOwner[key]; !ok {
			owners = append(owners, key)
		}
		byOwner[key] = append(byOwner[key], r)
	}
	var out []T
	for _, key := range owners {
		out = append(out, views(byOwner[key], b.siblings[key], now)...)
	}
	slices.SortFunc(out, func(a, b T) int { return compareKeys(itemKey(a), itemKey(b)) })
	return out
}

// itemKey is the key of a run or plan: its Job's.
func itemKey(obj metav1.Object) jobKey {
	return jobKey{namespace: obj.GetNamespace(), name: obj.GetName()}
}
