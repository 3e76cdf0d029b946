package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/captf/captf/jobs"
)

// stateSecretPath matches the state Secret of one namespace and its backend secret suffix.
var stateSecretPath = regexp.MustCompile(`^/api/v1/namespaces/([^/]+)/secrets/tfstate-default-([^/]+)$`)

// stateKey is where the kubernetes backend keeps the gzip'd state in its Secret.
const stateKey = "tfstate"

// maxStateRequestBytes bounds a state write the state API reads: the largest state in parts,
// base64-encoded in JSON, with room for the Secret's metadata.
const maxStateRequestBytes = jobs.MaxStateParts*jobs.MaxStatePartBytes*4/3 + 1<<20

// stateParts serves the backend's reads and writes of its state Secret, keeping a state larger
// than one Secret holds in part Secrets (jobs.SplitState) and joining it on read, so OpenTofu
// sees one Secret whatever the size.
type stateParts struct {
	client kubernetes.Interface
	// partsWait bounds the wait for the controller to create parts a write asks for.
	partsWait, poll time.Duration
	// repair reads a head whose parts do not make its state as no state, so that a restore's
	// forced push, which reads the state before it writes, can replace a broken one.
	repair bool
}

// transient reports the errors a state API request retries: the API server was busy, restarting
// or unreachable. Part reads and writes are safe to repeat (a write goes to the slot no head
// names), and a failed save would lose what the apply just created.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || utilnet.IsConnectionReset(err) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err)
}

// stateRetry spreads the attempts of a state request over about 6 s: long enough for an API
// server's restart or a burst of throttling, short against the run.
var stateRetry = wait.Backoff{Steps: 6, Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1}

// getSecret reads a Secret, retrying transient errors.
func (s *stateParts) getSecret(ctx context.Context, namespace, name string) (secret *corev1.Secret, err error) {
	err = retry.OnError(stateRetry, transient, func() error {
		secret, err = s.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	return secret, err
}

// updateSecret writes a Secret, retrying transient errors; a conflict is returned as it is.
func (s *stateParts) updateSecret(ctx context.Context, secret *corev1.Secret) (out *corev1.Secret, err error) {
	err = retry.OnError(stateRetry, transient, func() error {
		out, err = s.client.CoreV1().Secrets(secret.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

// serve handles a GET or PUT of the state Secret of namespace and suffix.
func (s *stateParts) serve(w http.ResponseWriter, r *http.Request, namespace, suffix string) {
	name := "tfstate-default-" + suffix
	var obj *corev1.Secret
	var err error
	if r.Method == http.MethodGet {
		obj, err = s.read(r.Context(), namespace, suffix, name)
	} else {
		obj, err = s.write(r.Context(), r.Body, namespace, suffix, name)
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	obj.Kind, obj.APIVersion = "Secret", "v1"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

// read returns the state Secret with the state joined from its parts when the head holds a
// manifest.
func (s *stateParts) read(ctx context.Context, namespace, suffix, name string) (*corev1.Secret, error) {
	head, err := s.getSecret(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	manifest, ok := jobs.StatePartsOf(head.Data[stateKey])
	if !ok {
		return head, nil
	}
	joined, err := s.join(ctx, namespace, suffix, manifest)
	switch {
	case err != nil && s.repair && errors.Is(err, jobs.ErrStateParts):
		delete(head.Data, stateKey)
		return head, nil
	case err != nil:
		return nil, apierrors.NewInternalError(err)
	}
	head.Data[stateKey] = joined
	return head, nil
}

// join reads the parts a manifest names and checks them against it (jobs.JoinStateParts).
func (s *stateParts) join(ctx context.Context, namespace, suffix string, manifest jobs.StateParts) ([]byte, error) {
	return jobs.JoinStateParts(suffix, manifest, func(name string) ([]byte, bool, error) {
		part, err := s.getSecret(ctx, namespace, name)
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		return part.Data[stateKey], true, nil
	})
}

// write stores the state Secret the backend sent. A state that fits is written as sent; a larger
// one goes into the parts of the slot the current head does not name, and then the head takes a
// manifest of them, conditional on the resourceVersion the backend read, as the backend's own
// write is.
func (s *stateParts) write(ctx context.Context, body io.Reader, namespace, suffix, name string) (*corev1.Secret, error) {
	data, err := io.ReadAll(io.LimitReader(body, maxStateRequestBytes+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(data) > maxStateRequestBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a state write above %d MiB", maxStateRequestBytes>>20))
	}
	var sent corev1.Secret
	if err := json.Unmarshal(data, &sent); err != nil {
		return nil, apierrors.NewBadRequest("decoding the state Secret: " + err.Error())
	}
	if sent.Name != name || (sent.Namespace != "" && sent.Namespace != namespace) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body names %s/%s, not the state Secret %s/%s", sent.Namespace, sent.Name, namespace, name))
	}
	sent.Namespace = namespace
	current, err := s.getSecret(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	if sent.ResourceVersion != "" && sent.ResourceVersion != current.ResourceVersion {
		// The head moved since the backend read it: its write is bound to conflict, so no part
		// is touched.
		return nil, apierrors.NewConflict(corev1.Resource("secrets"), name, errors.New("the state changed since it was read"))
	}
	previous, chunked := jobs.StatePartsOf(current.Data[stateKey])
	payload := sent.Data[stateKey]
	if len(payload) > jobs.MaxStatePartBytes {
		slot := jobs.OtherStatePartSlot(previous.Slot)
		parts, manifest, err := jobs.SplitState(payload, slot)
		if err != nil {
			return nil, apierrors.NewRequestEntityTooLargeError(err.Error())
		}
		existing, err := s.partsOf(ctx, namespace, suffix, slot, len(parts))
		if err != nil {
			return nil, err
		}
		for i, part := range existing {
			part.Data = map[string][]byte{stateKey: parts[i]}
			if _, err := s.updateSecret(ctx, part); err != nil {
				return nil, fmt.Errorf("writing state part %d of %d: %w", i+1, len(parts), err)
			}
		}
		sent.Data[stateKey] = manifest
	}
	written, err := s.updateSecret(ctx, &sent)
	if err != nil {
		return nil, err
	}
	if chunked {
		// The previous state's parts are no longer named: emptied, they keep no copy of an
		// older state (one in the clear, say, before encryption) beside the current one.
		s.empty(ctx, namespace, suffix, previous)
	}
	return written, nil
}

// empty clears the parts of a manifest the head no longer names, as far as it can: a part left
// as it was holds an older state, and harms nothing else.
func (s *stateParts) empty(ctx context.Context, namespace, suffix string, old jobs.StateParts) {
	for i := range min(old.Count, jobs.MaxStateParts) {
		part, err := s.getSecret(ctx, namespace, jobs.StatePartName(suffix, old.Slot, i))
		if err != nil || len(part.Data) == 0 {
			continue
		}
		part.Data = nil
		_, _ = s.updateSecret(ctx, part)
	}
}

// partsOf reads the first n parts of a slot, asking the controller for them when some do not
// exist yet and waiting, with a deadline, until they do.
func (s *stateParts) partsOf(ctx context.Context, namespace, suffix, slot string, n int) ([]*corev1.Secret, error) {
	var parts []*corev1.Secret
	var missing error
	read := func(ctx context.Context) (bool, error) {
		parts = parts[:0]
		for i := range n {
			part, err := s.getSecret(ctx, namespace, jobs.StatePartName(suffix, slot, i))
			switch {
			case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
				// Not created yet, or not yet granted: the controller makes the parts' Role with
				// them, and the authorizer may see it a moment later.
				missing = err
				return false, nil
			case err != nil:
				return false, fmt.Errorf("reading state part %d: %w", i+1, err)
			}
			parts = append(parts, part)
		}
		return true, nil
	}
	if done, err := read(ctx); err != nil || done {
		return parts, err
	}
	if err := s.askForParts(ctx, namespace, suffix, n); err != nil {
		return nil, err
	}
	if err := wait.PollUntilContextTimeout(ctx, s.poll, s.partsWait, false, read); err != nil {
		return nil, fmt.Errorf("waiting %s for the controller to create the %d state parts this state needs (%w): %w", s.partsWait, n, missing, err)
	}
	return parts, nil
}

// askForParts annotates the lock Lease with the number of parts a slot needs. The backend reads
// the Lease anew before each update of its own, so the annotation never costs it a conflict.
func (s *stateParts) askForParts(ctx context.Context, namespace, suffix string, n int) error {
	leases := s.client.CoordinationV1().Leases(namespace)
	name := "lock-tfstate-default-" + suffix
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("asking for state parts: %w", err)
		}
		if asked, _ := strconv.Atoi(lease.Annotations[jobs.AnnotationStatePartsWanted]); asked >= n {
			return nil
		}
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[jobs.AnnotationStatePartsWanted] = strconv.Itoa(n)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
}

// writeStatus answers with the API status of err, as the API server would; a wrapped one keeps
// its code and carries the whole message.
func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code == 0 {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	st.Message = err.Error()
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

// stateSecretOf returns the namespace and suffix of a request for a state Secret.
func stateSecretOf(r *http.Request) (namespace, suffix string, ok bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodPut {
		return "", "", false
	}
	m := stateSecretPath.FindStringSubmatch(r.URL.Path)
	if m == nil || strings.Contains(m[2], "/") {
		return "", "", false
	}
	return m[1], m[2], true
}
