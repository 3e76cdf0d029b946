package controller_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/test/testenv"
)

// convergedCluster is a TerraformCluster as the API server serves one the controller converged:
// labels, an owner, a finalizer, variables and the conditions of a pass.
func convergedCluster(name string) *infrav1.TerraformCluster {
	at := metav1.NewTime(time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC))
	condition := func(typ, status, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), ObservedGeneration: 1, LastTransitionTime: at, Reason: reason, Message: message}
	}
	return &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: "d9d70363-0910-478a-99e0-441159c26fe7", ResourceVersion: "261", Generation: 1,
			CreationTimestamp: at,
			Labels:            map[string]string{clusterv1.ClusterNameLabel: name},
			Annotations:       map[string]string{"note": "kept"},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: name, UID: "9362e99b-b22d-4c47-9afb-780cd240f326"}},
			Finalizers:        []string{"terraformcluster.infrastructure.cluster.x-k8s.io"},
		},
		Spec: infrav1.TerraformClusterSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{
				Source:    infrav1.SourceSpec{Image: "modules/net:v1", ImagePullPolicy: corev1.PullIfNotPresent},
				Variables: &apiextensionsv1.JSON{Raw: []byte(`{"release":"0"}`)},
			},
			ApplyPolicy: infrav1.ApplyPolicyAutomatic,
			Drift:       infrav1.DriftSpec{IntervalSeconds: ptr.To[int64](0)},
		},
		Status: infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{
			Conditions: []metav1.Condition{
				condition("Paused", "False", "NotPaused", "neither the object nor its Cluster is paused"),
				condition("Ready", "Unknown", "NoApplyYet", "no apply has finished yet"),
				condition("StateReadable", "True", "StateRead", "state serial 1 with 1 resources"),
				condition("DependenciesReady", "True", "DependenciesReady", "owned by Cluster "+name),
			},
			ObservedStateSerial: 1,
		}},
	}
}

// events records what an informer's handler is given.
type events struct {
	mu   sync.Mutex
	seen []string
}

func (e *events) add(what string, obj any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if tc, ok := obj.(*infrav1.TerraformCluster); ok {
		what += " " + tc.Name
	} else {
		what += " " + reflect.TypeOf(obj).String()
	}
	e.seen = append(e.seen, what)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// TestAPackingInformerHoldsObjectsPacked runs the manager cache's informer constructor on a
// fake source: the informer of a kind that runs Jobs stores PackedObjects and gives handlers,
// indexers and deep copies the objects decoded; other kinds' informers are left alone.
func TestAPackingInformerHoldsObjectsPacked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	source := fcache.NewFakeControllerSource()
	informer := controller.NewPackingInformer(nil)(source, &infrav1.TerraformCluster{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	// The cache sets its transform, which drops managed fields.
	if err := informer.SetTransform(controller.StripUnread); err != nil {
		t.Fatal(err)
	}
	if err := informer.AddIndexers(toolscache.Indexers{"image": func(obj any) ([]string, error) {
		return []string{obj.(*infrav1.TerraformCluster).Spec.Source.Image}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	var seen events
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen.add("add", obj) },
		UpdateFunc: func(_, obj any) { seen.add("update", obj) },
		DeleteFunc: func(obj any) { seen.add("delete", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	first, second := convergedCluster("c0000"), convergedCluster("c0001")
	first.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	source.Add(first.DeepCopy())
	source.Add(second.DeepCopy())
	go informer.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	stored, _, err := informer.GetIndexer().GetByKey("ns/c0001")
	if err != nil {
		t.Fatal(err)
	}
	packed, ok := stored.(*controller.PackedObject)
	if !ok {
		t.Fatalf("the store holds a %T", stored)
	}
	t.Run("the store keeps the metadata its keys, index and selectors read", func(t *testing.T) {
		if packed.GetName() != "c0001" || packed.GetNamespace() != "ns" || !reflect.DeepEqual(packed.GetLabels(), second.Labels) {
			t.Errorf("the packed object reads as %s/%s with labels %v", packed.GetNamespace(), packed.GetName(), packed.GetLabels())
		}
		if got, _ := informer.GetIndexer().ByIndex(toolscache.NamespaceIndex, "ns"); len(got) != 2 {
			t.Errorf("the namespace index holds %d objects, want 2", len(got))
		}
	})
	t.Run("a deep copy is the object, as the transform left it", func(t *testing.T) {
		for _, want := range []*infrav1.TerraformCluster{first, second} {
			stored, _, _ := informer.GetIndexer().GetByKey("ns/" + want.Name)
			want := want.DeepCopy()
			want.ManagedFields = nil
			want.ResourceVersion = stored.(*controller.PackedObject).GetResourceVersion() // the source's
			if got := stored.(runtime.Object).DeepCopyObject(); !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("unpacked\n%+v\nwant\n%+v", got, want)
			}
		}
	})
	t.Run("an object like the first packs into a fraction of its JSON", func(t *testing.T) {
		raw, _ := json.Marshal(second)
		if packed.Packed()*5 > len(raw) {
			t.Errorf("packed into %d bytes of its %d", packed.Packed(), len(raw))
		}
	})
	t.Run("indexers index the objects decoded", func(t *testing.T) {
		if got, _ := informer.GetIndexer().ByIndex("image", "modules/net:v1"); len(got) != 2 {
			t.Errorf("the image index holds %d objects, want 2", len(got))
		}
	})
	t.Run("handlers get the objects decoded", func(t *testing.T) {
		changed := second.DeepCopy()
		changed.Status.Conditions[0].Message = "changed"
		source.Modify(changed)
		source.Delete(first.DeepCopy())
		want := []string{"add c0000", "add c0001", "update c0001", "delete c0000"}
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return len(seen.list()) >= len(want), nil
		}); err != nil {
			t.Fatalf("the handler saw %v, want %v", seen.list(), want)
		}
		got := seen.list()
		slices.Sort(got[:2]) // the initial list's order is the source's
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the handler saw %v, want %v", got, want)
		}
		stored, _, _ := informer.GetIndexer().GetByKey("ns/c0001")
		if got := stored.(runtime.Object).DeepCopyObject().(*infrav1.TerraformCluster); got.Status.Conditions[0].Message != "changed" {
			t.Errorf("the store holds the message %q after the change", got.Status.Conditions[0].Message)
		}
	})
	t.Run("other kinds are stored as they come", func(t *testing.T) {
		source := fcache.NewFakeControllerSource()
		secrets := controller.NewPackingInformer(nil)(source, &corev1.Secret{}, 0, toolscache.Indexers{})
		source.Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}})
		go secrets.RunWithContext(ctx)
		if !toolscache.WaitForCacheSync(ctx.Done(), secrets.HasSynced) {
			t.Fatal("the informer did not sync")
		}
		if stored, _, _ := secrets.GetIndexer().GetByKey("ns/s"); reflect.TypeOf(stored) != reflect.TypeOf(&corev1.Secret{}) {
			t.Errorf("a Secret is stored as a %T", stored)
		}
	})
}

// TestTheManagerCacheReadsPackedObjectsAsTheAPIServerServesThem runs a cache with the manager's
// options against the real API server: reads of a TerraformCluster, by key, label, index and
// after a change, give what the API server serves.
func TestTheManagerCacheReadsPackedObjectsAsTheAPIServerServesThem(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "packed-cache"
	admin := adminIn(ctx, t, env, ns)
	for _, name := range []string{"one", "two"} {
		tc := convergedCluster(name)
		tc.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: ns, Labels: tc.Labels, Annotations: tc.Annotations}
		status := tc.Status
		if err := admin.Create(ctx, tc); err != nil {
			t.Fatal(err)
		}
		tc.Status = status
		if err := admin.Status().Update(ctx, tc); err != nil {
			t.Fatal(err)
		}
	}
	opts := controller.ManagerOptions(ctrl.Options{Scheme: controller.NewScheme()}).Cache
	opts.Scheme = controller.NewScheme()
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(ctx, &infrav1.TerraformCluster{}, "spec.source.image", func(obj client.Object) []string {
		return []string{obj.(*infrav1.TerraformCluster).Spec.Source.Image}
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	live := func(name string) *infrav1.TerraformCluster {
		var tc infrav1.TerraformCluster
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &tc); err != nil {
			t.Fatal(err)
		}
		tc.ManagedFields = nil
		tc.SetGroupVersionKind(infrav1.GroupVersion.WithKind(infrav1.ClusterKind.Kind)) // as the cache's reads set it
		return &tc
	}

	t.Run("a Get gives the object the API server serves", func(t *testing.T) {
		var got infrav1.TerraformCluster
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "one"}, &got); err != nil {
			t.Fatal(err)
		}
		if want := live("one"); !apiequality.Semantic.DeepEqual(&got, want) {
			t.Errorf("the cache gives\n%+v\nthe API server\n%+v", &got, want)
		}
	})
	t.Run("lists select by namespace, label and index", func(t *testing.T) {
		for _, tc := range []struct {
			rule string
			opts []client.ListOption
			want int
		}{
			{"by namespace", []client.ListOption{client.InNamespace(ns)}, 2},
			{"by label", []client.ListOption{client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: "two"}}, 1},
			{"by a label no object has", []client.ListOption{client.MatchingLabels{clusterv1.ClusterNameLabel: "three"}}, 0},
			{"by index", []client.ListOption{client.InNamespace(ns), client.MatchingFields{"spec.source.image": "modules/net:v1"}}, 2},
		} {
			var list infrav1.TerraformClusterList
			if err := c.List(ctx, &list, tc.opts...); err != nil {
				t.Fatalf("%s: %v", tc.rule, err)
			}
			if len(list.Items) != tc.want {
				t.Errorf("%s: %d objects, want %d", tc.rule, len(list.Items), tc.want)
			}
			for i := range list.Items {
				if want := live(list.Items[i].Name); !apiequality.Semantic.DeepEqual(&list.Items[i], want) {
					t.Errorf("%s: the cache lists\n%+v\nthe API server serves\n%+v", tc.rule, &list.Items[i], want)
				}
			}
		}
	})
	t.Run("a change reaches the cache", func(t *testing.T) {
		tc := live("two")
		tc.Status.Conditions[0].Message = "changed"
		if err := admin.Status().Update(ctx, tc); err != nil {
			t.Fatal(err)
		}
		var got infrav1.TerraformCluster
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "two"}, &got)
			return err == nil && got.ResourceVersion == tc.ResourceVersion, err
		}); err != nil {
			t.Fatal(err)
		}
		if got.Status.Conditions[0].Message != "changed" {
			t.Errorf("the cache holds the message %q", got.Status.Conditions[0].Message)
		}
	})
}
