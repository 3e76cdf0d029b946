package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/recorder"
	"github.com/captf/captf/test/testenv"
)

// TestRepeatedEventsBecomeASeriesTheAPIServerAccepts records one event four times on the real
// API server: the event is created once, its second occurrence writes a series of count 2, and
// the count of the later ones is written when the series ends.
func TestRepeatedEventsBecomeASeriesTheAPIServerAccepts(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "recorder"}}
	if _, err := clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := clientset.CoreV1().ConfigMaps("recorder").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "regarding"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	clk := clocktesting.NewFakeClock(time.Now())
	r := recorder.New(clientset.EventsV1(), controller.NewScheme(), "captf-controller", "captf-controller-test", clk, logr.Discard())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("recorder: %v", err)
		}
	}()

	seriesCount := func(want int32) {
		t.Helper()
		var last []eventsv1.Event
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := clientset.EventsV1().Events("recorder").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("regarding.name", "regarding").String()})
			if err != nil {
				return false, err
			}
			last = list.Items
			if len(list.Items) != 1 {
				return false, nil
			}
			got := int32(1)
			if s := list.Items[0].Series; s != nil {
				got = s.Count
			}
			return got == want, nil
		}); err != nil {
			t.Fatalf("events %+v, want one with count %d: %v", last, want, err)
		}
	}
	record := func() { r.Eventf(cm, nil, corev1.EventTypeNormal, "Applied", "Apply", "applied %s", "once more") }

	record()
	seriesCount(1)
	clk.Step(time.Second)
	record()
	seriesCount(2)
	record()
	record()
	// The series ends SeriesEnd after its last occurrence; the sweep after that writes its count.
	for step := time.Duration(0); step <= recorder.SeriesEnd; step += time.Minute {
		clk.Step(time.Minute)
	}
	seriesCount(4)
	if n := r.Remembered(); n != 0 {
		t.Errorf("%d series remembered after the end, want 0", n)
	}
}
