package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/captf/captf/jobs"
)

const (
	partsNS     = "ns"
	partsSuffix = "s"
	partsHead   = "tfstate-default-s"
)

// partsFixture is an API with the head and lock Lease the controller pre-creates and, when
// parts is set, the parts of both slots.
func partsFixture(parts int) *fake.Clientset {
	objects := []runtime.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: partsNS, Name: partsHead}, Data: map[string][]byte{}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: partsNS, Name: "lock-" + partsHead}},
	}
	for _, slot := range jobs.StatePartSlots {
		for i := range parts {
			objects = append(objects, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: partsNS, Name: jobs.StatePartName(partsSuffix, slot, i)}})
		}
	}
	return fake.NewClientset(objects...)
}

// write sends a state write of payload as the backend would, with the head as last read.
func write(t *testing.T, s *stateParts, payload []byte) (*corev1.Secret, error) {
	t.Helper()
	head, err := s.client.CoreV1().Secrets(partsNS).Get(context.Background(), partsHead, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head.Data = map[string][]byte{stateKey: payload}
	body, _ := json.Marshal(head)
	return s.write(context.Background(), bytes.NewReader(body), partsNS, partsSuffix, partsHead)
}

func randomPayload(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func TestStateParts(t *testing.T) {
	large := randomPayload(jobs.MaxStatePartBytes*2 + 1)
	tests := []struct {
		name string
		run  func(t *testing.T, s *stateParts, api *fake.Clientset)
	}{
		{"a state that fits one Secret is written inline, as sent", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			small := randomPayload(100)
			if _, err := write(t, s, small); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.read(context.Background(), partsNS, partsSuffix, partsHead); !bytes.Equal(got.Data[stateKey], small) {
				t.Fatal("the inline state does not read back")
			}
		}},
		{"a larger state is written to parts before the head that names them, and reads back whole", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			if _, err := write(t, s, large); err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, a := range api.Actions() {
				if u, ok := a.(k8stesting.UpdateAction); ok {
					order = append(order, u.GetObject().(metav1.Object).GetName())
				}
			}
			if len(order) != 4 || order[3] != partsHead {
				t.Fatalf("updates %v, want the three parts and then the head", order)
			}
			got, err := s.read(context.Background(), partsNS, partsSuffix, partsHead)
			if err != nil || !bytes.Equal(got.Data[stateKey], large) {
				t.Fatalf("read back %d bytes (%v), want %d", len(got.Data[stateKey]), err, len(large))
			}
		}},
		{"a write uses the slot the head does not name, so a failed head write leaves the last state readable", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			if _, err := write(t, s, large); err != nil {
				t.Fatal(err)
			}
			api.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.(k8stesting.UpdateAction).GetObject().(metav1.Object).GetName() == partsHead {
					return true, nil, apierrors.NewConflict(corev1.Resource("secrets"), partsHead, errors.New("changed"))
				}
				return false, nil, nil
			})
			if _, err := write(t, s, randomPayload(jobs.MaxStatePartBytes*2+2)); !apierrors.IsConflict(err) {
				t.Fatalf("err = %v, want the head's conflict", err)
			}
			got, err := s.read(context.Background(), partsNS, partsSuffix, partsHead)
			if err != nil || !bytes.Equal(got.Data[stateKey], large) {
				t.Fatalf("read %d bytes (%v), want the last state whole", len(got.Data[stateKey]), err)
			}
		}},
		{"a part that differs from the manifest fails the read", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			if _, err := write(t, s, large); err != nil {
				t.Fatal(err)
			}
			part, _ := api.CoreV1().Secrets(partsNS).Get(context.Background(), jobs.StatePartName(partsSuffix, "a", 1), metav1.GetOptions{})
			part.Data[stateKey][0] ^= 0xff
			_, _ = api.CoreV1().Secrets(partsNS).Update(context.Background(), part, metav1.UpdateOptions{})
			if _, err := s.read(context.Background(), partsNS, partsSuffix, partsHead); err == nil || !strings.Contains(err.Error(), "digest") {
				t.Fatalf("err = %v, want a digest mismatch", err)
			}
		}},
		{"a state larger than its parts may hold is refused as too large", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			_, err := write(t, s, randomPayload(jobs.MaxStatePartBytes*jobs.MaxStateParts+1))
			if !apierrors.IsRequestEntityTooLargeError(err) {
				t.Fatalf("err = %v, want 413", err)
			}
		}},
		{"a busy API server is asked again, so a save survives it", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			failed := 0
			api.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
				if failed < 2 {
					failed++
					return true, nil, apierrors.NewTooManyRequests("busy", 0)
				}
				return false, nil, nil
			})
			if _, err := write(t, s, large); err != nil || failed != 2 {
				t.Fatalf("err = %v after %d refusals", err, failed)
			}
		}},
		{"a write from a head that moved since the backend read it conflicts before any part is touched", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			head, _ := api.CoreV1().Secrets(partsNS).Get(context.Background(), partsHead, metav1.GetOptions{})
			head.ResourceVersion, head.Data = "1", map[string][]byte{stateKey: large}
			body, _ := json.Marshal(head)
			moved, _ := api.CoreV1().Secrets(partsNS).Get(context.Background(), partsHead, metav1.GetOptions{})
			moved.ResourceVersion = "2"
			_ = api.Tracker().Update(corev1.SchemeGroupVersion.WithResource("secrets"), moved, partsNS)
			api.ClearActions()
			if _, err := s.write(context.Background(), bytes.NewReader(body), partsNS, partsSuffix, partsHead); !apierrors.IsConflict(err) {
				t.Fatalf("err = %v, want a conflict", err)
			}
			for _, a := range api.Actions() {
				if a.GetVerb() == "update" {
					t.Fatalf("a part was written: %v", a)
				}
			}
		}},
		{"the parts the head no longer names are emptied, so no older state stays beside it", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			if _, err := write(t, s, large); err != nil {
				t.Fatal(err)
			}
			if _, err := write(t, s, randomPayload(100)); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				part, _ := api.CoreV1().Secrets(partsNS).Get(context.Background(), jobs.StatePartName(partsSuffix, "a", i), metav1.GetOptions{})
				if len(part.Data) != 0 {
					t.Fatalf("part a%d still holds %d bytes", i, len(part.Data[stateKey]))
				}
			}
		}},
		{"a restore reads a head whose parts are missing as no state, so its push can replace it", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			if _, err := write(t, s, large); err != nil {
				t.Fatal(err)
			}
			_ = api.CoreV1().Secrets(partsNS).Delete(context.Background(), jobs.StatePartName(partsSuffix, "a", 1), metav1.DeleteOptions{})
			if _, err := s.read(context.Background(), partsNS, partsSuffix, partsHead); err == nil {
				t.Fatal("a run that is no restore read a broken state")
			}
			s.repair = true
			got, err := s.read(context.Background(), partsNS, partsSuffix, partsHead)
			if _, ok := got.Data[stateKey]; err != nil || ok {
				t.Fatalf("a restore read %v (%v), want the head without a state", got.Data, err)
			}
		}},
		{"a write naming another Secret is refused", func(t *testing.T, s *stateParts, api *fake.Clientset) {
			body := `{"metadata":{"name":"someone-elses","namespace":"ns"},"data":{}}`
			if _, err := s.write(context.Background(), strings.NewReader(body), partsNS, partsSuffix, partsHead); !apierrors.IsBadRequest(err) {
				t.Fatalf("err = %v, want 400", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := partsFixture(3)
			tt.run(t, &stateParts{client: api, partsWait: time.Second, poll: 10 * time.Millisecond}, api)
		})
	}
}

func TestMissingStatePartsAreAskedForOnTheLockLease(t *testing.T) {
	api := partsFixture(0)
	s := &stateParts{client: api, partsWait: 50 * time.Millisecond, poll: 10 * time.Millisecond}
	_, err := write(t, s, randomPayload(jobs.MaxStatePartBytes+1))
	if err == nil || !strings.Contains(err.Error(), "for the controller to create the 2 state parts") {
		t.Fatalf("err = %v, want the wait for 2 parts to time out", err)
	}
	lease, _ := api.CoordinationV1().Leases(partsNS).Get(context.Background(), "lock-"+partsHead, metav1.GetOptions{})
	if got := lease.Annotations[jobs.AnnotationStatePartsWanted]; got != "2" {
		t.Fatalf("the lock Lease asks for %q parts, want 2", got)
	}
	if head, _ := api.CoreV1().Secrets(partsNS).Get(context.Background(), partsHead, metav1.GetOptions{}); len(head.Data[stateKey]) != 0 {
		t.Fatal("the head was written although its parts are missing")
	}
}
