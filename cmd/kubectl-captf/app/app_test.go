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

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

var now = time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)

func TestNextRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backoff *runsv1alpha1.Backoff
		want    string
	}{
		{name: "no window is a dash", want: None},
		{name: "an open window says how long", backoff: &runsv1alpha1.Backoff{RetryAfter: metav1.NewTime(now.Add(45 * time.Second))}, want: "in 45s"},
		{name: "a partial second rounds up", backoff: &runsv1alpha1.Backoff{RetryAfter: metav1.NewTime(now.Add(44*time.Second + time.Millisecond))}, want: "in 45s"},
		{name: "minutes are shown with seconds", backoff: &runsv1alpha1.Backoff{RetryAfter: metav1.NewTime(now.Add(3*time.Minute + 5*time.Second))}, want: "in 3m5s"},
		{name: "a passed window is now", backoff: &runsv1alpha1.Backoff{RetryAfter: metav1.NewTime(now.Add(-time.Second))}, want: "now"},
		{name: "the end of the window is now", backoff: &runsv1alpha1.Backoff{RetryAfter: metav1.NewTime(now)}, want: "now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextRetry(tc.backoff, now); got != tc.want {
				t.Errorf("NextRetry = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSortNewestFirst(t *testing.T) {
	run := func(name string, age time.Duration, attempt int32) runsv1alpha1.Run {
		return runsv1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))}, Spec: runsv1alpha1.RunSpec{Attempt: attempt}}
	}
	for _, tc := range []struct {
		name string
		runs []runsv1alpha1.Run
		want string
	}{
		{name: "newer creation first", runs: []runsv1alpha1.Run{run("old", time.Hour, 1), run("new", time.Minute, 1)}, want: "new,old"},
		{name: "same second: higher attempt first", runs: []runsv1alpha1.Run{run("a1", 0, 1), run("a2", 0, 2)}, want: "a2,a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			SortNewestFirst(tc.runs)
			var got []string
			for _, r := range tc.runs {
				got = append(got, r.Name)
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("order = %v, want %s", got, tc.want)
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
