// Package badinput feeds the corpus under testdata/ (one JSON file per case, with its expected
// outcome) to the real API server and the real engine: invalid specs, immutable machine fields,
// bad variables, malformed annotations and broken runner results. Each must end in a clear error
// with a field path or in a condition with a reason, with no panic, and nothing stored lost.
package badinput

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/prometheus/client_golang/prometheus"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/reliability/rel"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(testenv.Main(m, testenv.Options{}))
}

type badCase struct {
	Description string            `json:"description"`
	Kind        string            `json:"kind"`
	Spec        map[string]any    `json:"spec"`
	Annotations map[string]string `json:"annotations"`
	Update      map[string]any    `json:"update"`
	BigVariable *struct {
		Name  string
		Bytes int
	} `json:"bigVariable"`
	Runner *struct {
		Succeeded bool   `json:"succeeded"`
		Message   string `json:"message"`
	} `json:"runner"`
	Expect struct {
		Reject    string `json:"reject"`
		Condition *struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"condition"`
		Jobs           *int   `json:"jobs"`
		LastRunOutcome string `json:"lastRunOutcome"`
	} `json:"expect"`
}

// merge applies a JSON merge patch (RFC 7386) of patch onto base.
func merge(base, patch map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(out, k)
		case map[string]any:
			bv, _ := out[k].(map[string]any)
			out[k] = merge(bv, pv)
		default:
			out[k] = v
		}
	}
	return out
}

func TestBadInputCorpus(t *testing.T) {
	env := testenv.Get(t)
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "badinput"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) < 50 {
		t.Fatalf("%d cases (%v), want at least 50", len(files), err)
	}
	start := time.Now()
	counts := map[string]int{}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var bc badCase
			if err := json.Unmarshal(raw, &bc); err != nil {
				t.Fatalf("reading the case: %v", err)
			}
			kind := bc.Kind
			if kind == "" {
				kind = "TerraformCluster"
			}
			spec := merge(map[string]any{"source": map[string]any{"image": "registry.example/modules/net:v1"}, "variables": map[string]any{"region": "eu"}}, bc.Spec)
			if bc.BigVariable != nil {
				vars, _ := spec["variables"].(map[string]any)
				vars = merge(vars, map[string]any{bc.BigVariable.Name: strings.Repeat("x", bc.BigVariable.Bytes)})
				spec["variables"] = vars
			}
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": infrav1.GroupVersion.String(), "kind": kind,
				"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{jobs.LabelClusterName: name}},
				"spec":     spec,
			}}
			if len(bc.Annotations) > 0 {
				obj.SetAnnotations(bc.Annotations)
			}
			if bc.Expect.Reject == "" || bc.Update != nil {
				// An object the API accepts gets the owner Cluster API would give it.
				if err := capitest.Own(ctx, c, obj); err != nil {
					t.Fatal(err)
				}
			}
			err = c.Create(ctx, obj)
			if bc.Expect.Reject != "" && bc.Update == nil {
				counts["rejected on create"]++
				if err == nil {
					t.Fatalf("created; want a rejection naming %q", bc.Expect.Reject)
				}
				if !strings.Contains(err.Error(), bc.Expect.Reject) {
					t.Fatalf("rejection %q does not name %q", err, bc.Expect.Reject)
				}
				var gone unstructured.Unstructured
				gone.SetGroupVersionKind(obj.GroupVersionKind())
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &gone); err == nil {
					t.Fatal("the rejected object was stored")
				}
				return
			}
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if bc.Update != nil {
				counts["rejected on update"]++
				before := obj.DeepCopy()
				patch, _ := json.Marshal(map[string]any{"spec": bc.Update})
				upd := obj.DeepCopy()
				err := c.Patch(ctx, upd, client.RawPatch("application/merge-patch+json", patch))
				if err == nil || !strings.Contains(err.Error(), bc.Expect.Reject) {
					t.Fatalf("update: %v; want a rejection naming %q", err, bc.Expect.Reject)
				}
				after := obj.DeepCopy()
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), after); err != nil {
					t.Fatal(err)
				}
				if after.GetResourceVersion() != before.GetResourceVersion() || !reflect.DeepEqual(after.Object["spec"], before.Object["spec"]) {
					t.Fatalf("the rejected update changed the object: %v", after.Object["spec"])
				}
				return
			}
			counts["handled by the controller"]++
			checkController(ctx, t, c, ns, name, kind, bc, obj)
		})
	}
	t.Logf("FIGURE badinput: %d cases (%v), all with a clear error or condition, no panic, nothing stored lost, %s", len(files), counts, time.Since(start).Round(time.Millisecond))
}

func checkController(ctx context.Context, t *testing.T, c client.Client, ns, name, kind string, bc badCase, created *unstructured.Unstructured) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakePassiveClock(time.Now())
	base := workspace.Reconciler{Client: c, APIReader: c, Recorder: rel.NewRecorder(), Clock: clock, Metrics: m, RunnerImage: "registry.example/captf/manager:test"}
	r := workspace.New(base, infrav1.ClusterKind)
	jk := jobs.KindCluster
	var obj infrav1.Workspace = &infrav1.TerraformCluster{}
	if kind == "TerraformMachine" {
		r, jk, obj = workspace.New(base, infrav1.MachineKind), jobs.KindMachine, &infrav1.TerraformMachine{}
	}
	settle := func() {
		t.Helper()
		for i := 0; i < 10; i++ {
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if !workspace.AgainAtOnce(res) {
				return
			}
		}
		t.Fatal("did not settle")
	}
	listJobs := func() []batchv1.Job {
		var list batchv1.JobList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(jobs.OwnerLabels(jk, name))); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	settle()
	if bc.Runner != nil {
		all := listJobs()
		if len(all) != 1 {
			t.Fatalf("%d Jobs, want the first apply", len(all))
		}
		if err := rel.Finish(ctx, c, all[0], bc.Runner.Succeeded, bc.Runner.Message, clock.Now()); err != nil {
			t.Fatalf("finishing the Job: %v", err)
		}
		settle()
		var booked batchv1.Job
		if err := c.Get(ctx, client.ObjectKeyFromObject(&all[0]), &booked); err != nil {
			t.Fatal(err)
		}
		if booked.Annotations[jobs.AnnotationBookkept] != "true" {
			t.Errorf("the Job was not bookkept: %v", booked.Annotations)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	status := obj.WorkspaceStatus()
	if want := bc.Expect.Condition; want != nil {
		got := conditions.Get(status.Conditions, want.Type)
		if got == nil || got.Reason != want.Reason || got.Message == "" {
			t.Errorf("%s = %+v, want reason %s with a message", want.Type, got, want.Reason)
		}
	}
	if want := bc.Expect.Jobs; want != nil {
		if n := len(listJobs()); n != *want {
			t.Errorf("%d Jobs, want %d", n, *want)
		}
	}
	if want := bc.Expect.LastRunOutcome; want != "" && (status.LastRun == nil || status.LastRun.Outcome != want) {
		t.Errorf("status.lastRun = %+v, want outcome %s", status.LastRun, want)
	}
	// Nothing stored is lost: the spec and the annotations are as the user wrote them.
	gotSpec, _ := json.Marshal(obj.WorkspaceSpec())
	var wantWS infrav1.WorkspaceSpec
	wsRaw, _ := json.Marshal(created.Object["spec"])
	_ = json.Unmarshal(wsRaw, &wantWS)
	wantSpec, _ := json.Marshal(wantWS)
	if string(gotSpec) != string(wantSpec) {
		t.Errorf("the spec changed:\n got %.200s\nwant %.200s", gotSpec, wantSpec)
	}
	for k, v := range bc.Annotations {
		if obj.GetAnnotations()[k] != v {
			t.Errorf("annotation %s = %.80q, want %.80q", k, obj.GetAnnotations()[k], v)
		}
	}
}
