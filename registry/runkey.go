package registry

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/captf/captf/jobs/runkey"
)

// RunKeySecret is the default name of the Secret that holds the install's run key: the one the
// controller creates in its namespace on its first start (controller.RunKeySecret).
const RunKeySecret = "captf-run-key"

// runKeyData is the data key of the run key in its Secret, as the controller writes it.
const runKeyData = "key"

// RunKeyPollInterval is how often the server looks for the run key Secret until it exists.
const RunKeyPollInterval = 10 * time.Second

// RunKeys reads the install's run key, with which the controller signs its Jobs. The server's
// reads a Secret (NewSecretRunKeys); tests give their own.
type RunKeys interface {
	// RunKey returns the run key; found is false while there is none yet.
	RunKey(ctx context.Context) (key runkey.Key, found bool, err error)
}

// secretRunKeys reads the run key from one Secret with the server's own client, which may get
// that Secret and no other.
type secretRunKeys struct {
	secrets   corev1client.SecretsGetter
	namespace string
	name      string
}

// NewSecretRunKeys returns RunKeys that read the Secret name of namespace: its data key "key"
// (runkey.Size bytes).
func NewSecretRunKeys(secrets corev1client.SecretsGetter, namespace, name string) RunKeys {
	return secretRunKeys{secrets: secrets, namespace: namespace, name: name}
}

// RunKey implements RunKeys.
func (r secretRunKeys) RunKey(ctx context.Context) (runkey.Key, bool, error) {
	secret, err := r.secrets.Secrets(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return runkey.Key{}, false, nil
	case err != nil:
		return runkey.Key{}, false, fmt.Errorf("reading the run key Secret %s/%s: %w", r.namespace, r.name, err)
	}
	key, err := runkey.Of(secret.Data[runKeyData])
	if err != nil {
		return runkey.Key{}, false, fmt.Errorf("the run key Secret %s/%s: %w", r.namespace, r.name, err)
	}
	return key, true, nil
}

// LoadRunKey asks keys for the run key every interval until it gives one, then keeps it: the
// key never changes. Until then every plan is Unverified. It returns once the key is known or
// ctx is done.
func (s *Source) LoadRunKey(ctx context.Context, keys RunKeys, interval time.Duration) {
	log := klog.FromContext(ctx)
	// Each reason to wait is logged once, not every interval.
	said := ""
	say := func(why string, err error) {
		if why == said {
			return
		}
		said = why
		if err != nil {
			log.Error(err, "No run key yet: every plan is Unverified")
			return
		}
		log.Info("Waiting for the controller's run key Secret: every plan is Unverified until it exists")
	}
	_ = wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		key, found, err := keys.RunKey(ctx)
		switch {
		case err != nil:
			say(err.Error(), err)
			return false, nil
		case !found:
			say("not found", nil)
			return false, nil
		}
		s.setRunKey(key)
		log.Info("Run key loaded: plans are verified against the controller's signatures")
		return true, nil
	})
}

// setRunKey keeps key and publishes the plans whose phase it changes, as MODIFIED events that a
// watch starting at the current list resourceVersion also gets (as onOwnerEvent does).
func (s *Source) setRunKey(key runkey.Key) {
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	before := s.verifier()
	s.runKey.Store(&key)
	after := s.verifier()
	if !s.synced.Load() {
		return
	}
	now, rv := s.now(), s.processedRV.Load()
	for _, ownerKey := range s.jobs.ownerKeys() {
		records := s.siblings(ownerKey)
		if len(records) == 0 {
			continue
		}
		groups := s.groupsWith(records, s.ownerOf(records[0]), s.memo)
		_, oldPlans := s.views(withVerify(groups, before), now)
		_, newPlans := s.views(withVerify(groups, after), now)
		s.planHub.publish(changes(oldPlans, newPlans, rv, true))
	}
}

// withVerify returns groups with verify as their check of the plans' Jobs.
func withVerify(groups []group, verify func(*batchv1.Job) bool) []group {
	out := make([]group, len(groups))
	for i, g := range groups {
		g.verify = verify
		out[i] = g
	}
	return out
}

// verifier is the check of a plan's Job (PlanVerifier) under the run key, and while the key is
// not known one that no Job passes.
func (s *Source) verifier() func(*batchv1.Job) bool {
	if key := s.runKey.Load(); key != nil {
		return PlanVerifier(*key)
	}
	return verifyNothing
}

// PlanVerifier is the check of a plan's Job under the run key (jobs.PlanOwner.Verify): the Job
// must be as the controller last wrote it (its signature verifies) and its result must be the
// one its signed digest names. Under a key that holds none, no
// Job passes.
func PlanVerifier(key runkey.Key) func(*batchv1.Job) bool {
	if !key.Valid() {
		return verifyNothing
	}
	return func(job *batchv1.Job) bool { return key.JobSigned(job) && runkey.ResultIntact(job) }
}

// verifyNothing passes no Job: the check while the run key is not known.
func verifyNothing(*batchv1.Job) bool { return false }
