// Package leaks runs the whole system (test/system: real controller, aggregated API server, node
// agent, OpenTofu) through a Manual cluster whose variables carry unique marker strings: a
// first apply, a plan, bad approval bodies, an approval and the approved apply; and through a
// machine whose apply and destroy fail echoing its sensitive inputs. Then it scans every Run and
// Plan (through the aggregator), every Event, every Job's metadata and spec, every pod's log and
// the controller's and API server's whole logs for the markers and for the plan key's bytes
// (raw, hex, base64), and checks that no per-run Secret outlives its booked Job.
package leaks

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/reliability/rel"
	"github.com/captf/captf/test/system"
)

func TestMain(m *testing.M) {
	os.Exit(system.Main(m, system.Options{}))
}

// echoImage is the module of testdata/modules/echo: a machine whose apply and destroy fail,
// printing its sensitive inputs.
const echoImage = "ghcr.io/captf/leaks-echo:dev"

func TestSecretsNeverLeak(t *testing.T) {
	sys := system.Get(t)
	start := time.Now()
	ctx := context.Background()
	c, ns := sys.NewNamespace(t, "leaks")
	kube := kubernetes.NewForConfigOrDie(sys.Env.Config)
	markers := []string{"mk1-" + fmt.Sprint(time.Now().UnixNano()) + "-zq", "mk2-" + fmt.Sprint(time.Now().UnixNano()) + "-xj",
		"mk3-" + fmt.Sprint(time.Now().UnixNano()) + "-vw", "mk4-" + fmt.Sprint(time.Now().UnixNano()) + "-ut",
		"mk5-" + fmt.Sprint(time.Now().UnixNano()) + "-ts"}
	// The fourth marker is a credential an identity lends the namespace: its runs get it as
	// environment and files. The identity's Secret is in the controller's namespace, the only
	// one identities lend from.
	credentials := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ns + "-credentials", Namespace: system.Namespace}, StringData: map[string]string{"CLOUD_TOKEN": markers[3]}}
	if err := c.Create(ctx, credentials); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), credentials) })
	identity := &infrav1.TerraformClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: ns + "-identity"}, Spec: infrav1.TerraformClusterIdentitySpec{
		SecretRef: infrav1.SecretReference{Name: credentials.Name, Namespace: system.Namespace}, AllowedNamespaces: &infrav1.AllowedNamespaces{List: []string{ns}}, AllowedImages: []string{"*"}}}
	if err := c.Create(ctx, identity); err != nil {
		t.Fatal(err)
	}
	// The third marker reaches the module from a Secret (spec.variablesFrom), as a sensitive
	// variable.
	source := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "leak-vars", Namespace: ns, Labels: map[string]string{infrav1.VariablesLabel: "true"}},
		StringData: map[string]string{"size": markers[2]}}
	if err := c.Create(ctx, source); err != nil {
		t.Fatal(err)
	}

	tc := &infrav1.TerraformCluster{}
	tc.Name, tc.Namespace = "secret", ns
	tc.Spec.Source.Image = system.SampleNoopImage
	tc.Spec.ApplyPolicy = infrav1.ApplyPolicyManual
	tc.Spec.Drift.IntervalSeconds = ptr.To[int64](0)
	tc.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, markers[0]))}
	tc.Spec.VariablesFrom = []infrav1.VariablesSource{{SecretRef: &infrav1.SourceReference{Name: source.Name}}}
	tc.Spec.IdentityRef = &infrav1.IdentityReference{Name: identity.Name}
	if err := capitest.Own(ctx, c, tc); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, tc); err != nil {
		t.Fatal(err)
	}
	runsPath := fmt.Sprintf("/apis/runs.captf.io/v1alpha1/namespaces/%s/runs", ns)
	plansPath := fmt.Sprintf("/apis/runs.captf.io/v1alpha1/namespaces/%s/plans", ns)
	getRuns := func() runsv1alpha1.RunList {
		var list runsv1alpha1.RunList
		raw, err := kube.RESTClient().Get().AbsPath(runsPath).DoRaw(ctx)
		if err == nil {
			err = json.Unmarshal(raw, &list)
		}
		if err != nil {
			t.Logf("listing runs: %v", err)
		}
		return list
	}
	waitRun := func(op jobs.Op, attempt int32) runsv1alpha1.Run {
		var found runsv1alpha1.Run
		err := rel.Poll(3*time.Minute, func() (bool, error) {
			for _, r := range getRuns().Items {
				if r.Spec.Target.Name == tc.Name && r.Spec.Operation == string(op) && r.Spec.Attempt == attempt && r.Status.Phase == runsv1alpha1.RunPhaseSucceeded {
					found = r
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("%s attempt %d never succeeded: %v\n%s", op, attempt, err, sys.Log("controller"))
		}
		return found
	}
	waitRun(jobs.OpApply, 1)
	patch := fmt.Sprintf(`{"spec":{"variables":{"name":%q,"size":%q}}}`, markers[0], markers[1])
	if err := c.Patch(ctx, tc, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
	planRun := waitRun(jobs.OpPlan, 1)
	var plan runsv1alpha1.Plan
	if err := rel.Poll(time.Minute, func() (bool, error) {
		raw, err := kube.RESTClient().Get().AbsPath(plansPath, planRun.Name).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(raw, &plan); err != nil {
			return false, err
		}
		return plan.Status.PlanHash != "", nil
	}); err != nil {
		t.Fatalf("plan %s has no hash: %v", planRun.Name, err)
	}

	// Bad approval bodies: each a clear 4xx, nothing written on the object.
	before := &infrav1.TerraformCluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(tc), before); err != nil {
		t.Fatal(err)
	}
	approvalPath := plansPath + "/" + planRun.Name + "/approval"
	body := func(kind, name, hash string) string {
		return fmt.Sprintf(`{"apiVersion":"runs.captf.io/v1alpha1","kind":%q,"metadata":{"name":%q},"spec":{"planHash":%q}}`, kind, name, hash)
	}
	bad := map[string]string{
		"wrong hash":     body("PlanApproval", planRun.Name, "p3:"+strings.Repeat("0", 64)),
		"inputs hash":    body("PlanApproval", planRun.Name, "h1:"+strings.Repeat("0", 64)),
		"garbage hash":   body("PlanApproval", planRun.Name, "not a hash"),
		"wrong name":     body("PlanApproval", "someone-else", plan.Status.PlanHash),
		"missing spec":   `{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","metadata":{"name":"` + planRun.Name + `"}}`,
		"empty hash":     body("PlanApproval", planRun.Name, ""),
		"wrong kind":     body("Plan", planRun.Name, plan.Status.PlanHash),
		"not JSON":       `{"apiVersion":`,
		"huge body":      body("PlanApproval", planRun.Name, "p3:"+strings.Repeat("a", 4<<20)),
		"oversize hash":  body("PlanApproval", planRun.Name, "p3:"+strings.Repeat("a", 200)),
		"number as hash": `{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","spec":{"planHash":7}}`,
	}
	for what, b := range bad {
		_, err := kube.RESTClient().Post().AbsPath(approvalPath).SetHeader("Content-Type", "application/json").Body([]byte(b)).DoRaw(ctx)
		var status apierrors.APIStatus
		code := 0
		if se, ok := err.(apierrors.APIStatus); ok {
			status = se
			code = int(status.Status().Code)
		}
		if err == nil || code < 400 || code >= 500 {
			t.Errorf("approval with %s: code %d, err %v; want a 4xx", what, code, err)
		}
	}
	after := &infrav1.TerraformCluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(tc), after); err != nil {
		t.Fatal(err)
	}
	if after.Annotations[jobs.AnnotationApprovePlan] != "" || after.ResourceVersion != before.ResourceVersion && after.Generation != before.Generation {
		t.Errorf("a rejected approval changed the object: annotations %v", after.Annotations)
	}

	good := body("PlanApproval", planRun.Name, plan.Status.PlanHash)
	if _, err := kube.RESTClient().Post().AbsPath(approvalPath).SetHeader("Content-Type", "application/json").Body([]byte(good)).DoRaw(ctx); err != nil {
		t.Fatalf("approving: %v", err)
	}
	waitRun(jobs.OpApply, 2)

	// A machine whose apply, and then destroy, fail printing its sensitive inputs: the fifth
	// marker as its bootstrap data (a sensitive input of the contract, which the module gets in
	// base64), the third from a Secret, the fourth from the identity's environment. What it left
	// is read before it is let go, since its Jobs and pods go with it.
	haystacks := map[string]string{}
	machineFails(t, sys, c, ns, identity.Name, source.Name, markers[4], getRuns, haystacks)

	// Every Job booked, and no per-run Secret left.
	if err := rel.Poll(time.Minute, func() (bool, error) {
		var list batchv1.JobList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, j := range list.Items {
			if j.Annotations[jobs.AnnotationBookkept] != "true" {
				return false, fmt.Errorf("Job %s not booked", j.Name)
			}
		}
		var secrets corev1.SecretList
		if err := c.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, s := range secrets.Items {
			if strings.HasPrefix(s.Name, "captf-run-") {
				return false, fmt.Errorf("per-run Secret %s outlived its booked Job", s.Name)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	// The needles: the markers and the plan key in every encoding.
	var key corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: jobs.PlanKeySecretName(jobs.KindCluster, tc.Name)}, &key); err != nil {
		t.Fatalf("reading the plan key: %v", err)
	}
	needles := map[string]string{}
	for i, m := range markers {
		needles[fmt.Sprintf("marker %d", i+1)] = m
	}
	needles["marker 5 in base64"] = base64.StdEncoding.EncodeToString([]byte(markers[4]))
	for k, v := range key.Data {
		if len(v) < 8 {
			t.Fatalf("plan key %s has %d bytes", k, len(v))
		}
		needles["plan key raw"] = string(v)
		needles["plan key hex"] = hex.EncodeToString(v)
		needles["plan key HEX"] = strings.ToUpper(hex.EncodeToString(v))
		needles["plan key base64"] = base64.StdEncoding.EncodeToString(v)
		needles["plan key base64url"] = base64.RawURLEncoding.EncodeToString(v)
		needles["plan key base64 (no padding)"] = base64.RawStdEncoding.EncodeToString(v)
	}

	collectNamespace(t, c, ns, "", haystacks)
	if raw, err := kube.RESTClient().Get().AbsPath(plansPath).DoRaw(ctx); err != nil {
		t.Fatal(err)
	} else {
		haystacks["plans"] = string(raw)
	}
	if !strings.Contains(podLogs(haystacks), "\nApply complete! Resources:") {
		t.Errorf("no pod log holds an apply's summary line")
	}
	var obj infrav1.TerraformCluster
	if err := c.Get(ctx, client.ObjectKeyFromObject(tc), &obj); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(obj.Status)
	haystacks["cluster status"] = string(b)
	b, _ = json.Marshal(obj.Annotations)
	haystacks["cluster annotations"] = string(b)
	for _, name := range []string{"controller", "apiserver"} {
		data, err := os.ReadFile(filepath.Join(sys.LogDir, name+".log"))
		if err != nil {
			t.Fatalf("reading the %s log: %v", name, err)
		}
		haystacks[name+" log"] = string(data)
	}
	// Both servers' metrics: the controller's endpoint, and the aggregated server's own /metrics
	// (not proxied by the aggregator; the admin's client certificate passes its delegated
	// authentication).
	metrics, err := sys.ControllerMetrics(ctx)
	if err != nil {
		t.Fatalf("reading the controller's metrics: %v", err)
	}
	haystacks["controller metrics"] = metrics
	if !strings.Contains(metrics, "captf_jobs_total{") {
		t.Errorf("the controller's metrics have no captf_jobs_total series")
	}
	httpClient, err := rest.HTTPClientFor(sys.APIServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Get(sys.APIServerURL + "/metrics")
	if err != nil {
		t.Fatalf("reading the aggregated API server's metrics: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(data), "apiserver_request_total") {
		t.Fatalf("the aggregated API server's metrics: %s: %.200s", resp.Status, data)
	}
	haystacks["apiserver metrics"] = string(data)
	// Positive control: the scanner finds the markers where they belong, in the spec.
	spec, _ := json.Marshal(obj.Spec)
	if !strings.Contains(string(spec), markers[0]) || !strings.Contains(string(spec), markers[1]) {
		t.Fatalf("the markers are not in the spec: %s", spec)
	}
	bytes := 0
	for where, hay := range haystacks {
		bytes += len(hay)
		for what, needle := range needles {
			if strings.Contains(hay, needle) {
				t.Errorf("%s found in %s", what, where)
			}
		}
	}
	if len(events(haystacks)) == 0 {
		t.Error("no events scanned")
	}
	jobsScanned, logsScanned := 0, 0
	for where := range haystacks {
		if strings.HasSuffix(where, " spec") {
			jobsScanned++
		}
		if strings.HasPrefix(where, "pod log ") || strings.Contains(where, ": pod log ") {
			logsScanned++
		}
	}
	t.Logf("FIGURE leaks: %d needles (5 markers, marker 5 in base64, the plan key in %d encodings) absent from %d haystacks (%d KB: runs, plans, events, %d Jobs' metadata and specs, %d pod logs, cluster and machine status, controller and apiserver logs and metrics); %d bad approval bodies answered 4xx; 0 per-run Secrets left; %s",
		len(needles), len(needles)-6, len(haystacks), bytes/1024, jobsScanned, logsScanned, len(bad), time.Since(start).Round(time.Second))
}

func events(h map[string]string) string {
	var all strings.Builder
	for where, hay := range h {
		if strings.HasSuffix(where, "events") {
			all.WriteString(hay)
		}
	}
	return all.String()
}

// podLogs is every pod log among the haystacks.
func podLogs(h map[string]string) string {
	var all strings.Builder
	for where, hay := range h {
		if strings.HasPrefix(where, "pod log ") || strings.Contains(where, ": pod log ") {
			all.WriteString(hay)
		}
	}
	return all.String()
}

// collectNamespace adds to haystacks, each name prefixed with prefix, what anyone who may read
// the namespace's runs, events, Jobs and pod logs (the view role) reads: every Run through the
// aggregator, every Event, every Job's metadata and spec and every container's log of every pod,
// through pods/log as kubectl logs and kubectl captf logs read it.
func collectNamespace(t *testing.T, c client.Client, ns, prefix string, haystacks map[string]string) {
	t.Helper()
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(system.Get(t).Env.Config)
	raw, err := kube.RESTClient().Get().AbsPath(fmt.Sprintf("/apis/runs.captf.io/v1alpha1/namespaces/%s/runs", ns)).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	haystacks[prefix+"runs"] = string(raw)
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(evs)
	haystacks[prefix+"events"] = string(b)
	var coreEvs corev1.EventList
	if err := c.List(ctx, &coreEvs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(coreEvs)
	haystacks[prefix+"core events"] = string(b)
	var jobList batchv1.JobList
	if err := c.List(ctx, &jobList, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobList.Items {
		b, _ := json.Marshal(map[string]any{"annotations": j.Annotations, "labels": j.Labels})
		haystacks[prefix+"Job "+j.Name+" metadata"] = string(b)
		b, _ = json.Marshal(j.Spec)
		haystacks[prefix+"Job "+j.Name+" spec"] = string(b)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodPending {
			continue // nothing ran yet, so there is no log
		}
		for _, container := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			log, err := kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: container.Name}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("reading the log of %s/%s: %v", p.Name, container.Name, err)
			}
			haystacks[prefix+"pod log "+p.Name+"/"+container.Name] = string(log)
		}
	}
}

// machineFails runs a TerraformMachine of the echo module through a failing apply, its deletion
// and a failing destroy, adds what the namespace then holds to haystacks (prefixed "machine: "),
// and lets the machine go by abandoning its infrastructure.
func machineFails(t *testing.T, sys *system.System, c client.Client, ns, identity, variables, bootstrapData string, getRuns func() runsv1alpha1.RunList, haystacks map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := sys.PushModuleImage(ctx, echoImage, filepath.Join(sys.Env.RepoRoot, "test", "reliability", "leaks", "testdata", "modules", "echo")); err != nil {
		t.Fatal(err)
	}
	m := &infrav1.TerraformMachine{}
	m.Name, m.Namespace = "echo", ns
	m.Spec.Source.Image = echoImage
	m.Spec.VariablesFrom = []infrav1.VariablesSource{{SecretRef: &infrav1.SourceReference{Name: variables}}}
	m.Spec.IdentityRef = &infrav1.IdentityReference{Name: identity}
	// The bootstrap data Secret capitest.Own would make, with the marker as its value.
	bootstrap := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-bootstrap", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: capitest.DefaultCluster}},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")},
	}
	if err := c.Create(ctx, bootstrap); err != nil {
		t.Fatal(err)
	}
	if err := capitest.Own(ctx, c, m); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitFailed := func(op jobs.Op) runsv1alpha1.Run {
		t.Helper()
		var found runsv1alpha1.Run
		if err := rel.Poll(3*time.Minute, func() (bool, error) {
			for _, r := range getRuns().Items {
				// A Run is Failed as soon as its Job is; its error comes with the bookkeeping.
				if r.Spec.Target.Kind == infrav1.MachineKind.Kind && r.Spec.Operation == string(op) && r.Status.Phase == runsv1alpha1.RunPhaseFailed && r.Status.Error != nil {
					found = r
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("the machine's %s never failed: %v\n%s", op, err, sys.Log("controller"))
		}
		return found
	}
	failedRuns := []runsv1alpha1.Run{waitFailed(jobs.OpApply)}
	if err := c.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	failedRuns = append(failedRuns, waitFailed(jobs.OpDestroy))

	collectNamespace(t, c, ns, "machine: ", haystacks)
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m.Status)
	haystacks["machine: status"] = string(b)
	// Positive control: the module did print the inputs, and they reached the tail and the log
	// scrubbed.
	for _, r := range failedRuns {
		if r.Status.Error == nil || !strings.Contains(r.Status.Error.Summary, "with (sensitive)") {
			t.Errorf("the %s run's error %+v lacks the scrubbed inputs", r.Spec.Operation, r.Status.Error)
		}
		var log string
		for where, hay := range haystacks {
			if strings.HasPrefix(where, "machine: pod log "+r.Name+"-") && strings.HasSuffix(where, "/"+jobspec.SourceContainer) {
				log += hay
			}
		}
		if n := strings.Count(log, "(sensitive)"); n < 3 {
			t.Errorf("the log of the %s run holds %d scrubbed values, want the three inputs at least:\n%s", r.Spec.Operation, n, log)
		}
	}

	// Let it go, as an operator would a machine whose destroy cannot succeed.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, workspace.AbandonAnnotation, m.UID)
	if err := c.Patch(ctx, m, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
	if err := rel.Poll(2*time.Minute, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(m), &infrav1.TerraformMachine{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("the abandoned machine is still there: %v", err)
	}
}
