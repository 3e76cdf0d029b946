package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var now = time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)

func TestUntil(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    time.Time
		want string
	}{
		{"a time in the future is counted in whole seconds", now.Add(45 * time.Second), "in 45s"},
		{"a partial second rounds up", now.Add(44*time.Second + time.Millisecond), "in 45s"},
		{"minutes read as kubectl's ages", now.Add(3*time.Minute + 20*time.Second), "in 3m20s"},
		{"the time itself is now", now, "now"},
		{"a past time is now", now.Add(-time.Minute), "now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Until(tc.t, now); got != tc.want {
				t.Errorf("Until(%v) = %q, want %q", tc.t.Sub(now), got, tc.want)
			}
		})
	}
}

func TestConfirm(t *testing.T) {
	for _, tc := range []struct {
		answer string
		want   bool
	}{
		{"y\n", true}, {"YES\n", true}, {"n\n", false}, {"\n", false}, {"", false}, {"maybe\n", false},
	} {
		t.Run("answer "+strings.TrimSpace(tc.answer), func(t *testing.T) {
			got, err := confirm(strings.NewReader(tc.answer), &bytes.Buffer{}, "?")
			if err != nil || got != tc.want {
				t.Errorf("confirm(%q) = %v, %v; want %v", tc.answer, got, err, tc.want)
			}
		})
	}
}

// TestStreamRunLogReadsTheNewestPodOfTheJob checks the pod-log path: the pods are found by the
// Job name label and the newest one's log is copied.
func TestStreamRunLogReadsTheNewestPodOfTheJob(t *testing.T) {
	pod := func(name string, age time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(now.Add(-age)),
			Labels: map[string]string{batchv1.JobNameLabel: "run-1"}}}
	}
	cs := fake.NewClientset(pod("run-1-old", time.Hour), pod("run-1-new", time.Minute))
	var out bytes.Buffer
	podName, err := StreamRunLog(context.Background(), cs, &out, "ns", "run-1", "source", false)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "fake logs" {
		t.Errorf("log = %q", out.String())
	}
	for _, a := range cs.Actions() {
		if a.GetSubresource() == "log" {
			if opts, ok := a.(k8stesting.GenericAction).GetValue().(*corev1.PodLogOptions); !ok || opts.Container != "source" {
				t.Errorf("log options = %+v, want container source", a)
			}
		}
	}
	if podName != "run-1-new" {
		t.Errorf("read the log of %q, want the newest pod run-1-new", podName)
	}
	_, err = StreamRunLog(context.Background(), cs, &out, "ns", "run-2", "source", false)
	if err == nil || !strings.Contains(err.Error(), "run run-2 has no pod") {
		t.Errorf("missing run: %v", err)
	}
}
