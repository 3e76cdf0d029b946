package workspace_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
)

// placedIn is contractOutputs with the machine's failure_domain output set to domain.
func placedIn(domain string) string {
	return strings.Replace(contractOutputs, `"failure_domain":null`, `"failure_domain":"`+domain+`"`, 1)
}

// askFailureDomain sets the failure domain the Machine of the same name asks for.
func (h *harness) askFailureDomain(name, domain string) {
	h.t.Helper()
	var m clusterv1.Machine
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &m); err != nil {
		h.t.Fatal(err)
	}
	patch := client.MergeFrom(m.DeepCopy())
	m.Spec.FailureDomain = domain
	if err := h.c.Patch(h.ctx, &m, patch); err != nil {
		h.t.Fatal(err)
	}
}

// runWith lets the machine's running Job, of op, succeed with a state whose module returned
// outputs.
func (h *harness) runWith(tm *infrav1.TerraformMachine, op jobs.Op, serial int64, outputs string) {
	h.t.Helper()
	job := h.runningJob(jobs.KindMachine, tm.Name)
	if jobs.OpOf(&job) != op {
		h.t.Fatalf("running %s, want %s", jobs.OpOf(&job), op)
	}
	h.writeStateWith(jobs.KindMachine, tm.Name, 1, serial, outputs)
	h.finish(job, jobs.OutcomeSucceeded, nil)
	h.settle(tm)
	h.get(tm)
}

// wantMismatch checks OutputsValid False/FailureDomainMismatch, said once by a Warning event.
func (h *harness) wantMismatch(tm *infrav1.TerraformMachine) {
	h.t.Helper()
	wantCond(h.t, tm, conditions.OutputsValid, metav1.ConditionFalse, conditions.ReasonFailureDomainMismatch)
	if ev := h.events(); countPrefix(ev, corev1.EventTypeWarning+" OutputsInvalid FailureDomainMismatch") != 1 {
		h.t.Errorf("want one OutputsInvalid event naming FailureDomainMismatch: %v", ev)
	}
}

// A machine runs in the failure domain its Machine asks for (Machine.spec.failureDomain): a
// module that reports another keeps it from being provisioned, and once provisioned it is
// reported. A module that reports none (null) is taken at its word.
func TestAMachineIsCheckedAgainstItsMachinesFailureDomain(t *testing.T) {
	newMachine := func(h *harness, mutate ...func(*infrav1.TerraformMachine)) *infrav1.TerraformMachine {
		tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: h.ns},
			Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{}`)}}}}
		for _, m := range mutate {
			m(tm)
		}
		h.create(tm)
		h.askFailureDomain(tm.Name, "zone-a")
		h.settle(tm)
		return tm
	}

	t.Run("a machine whose module placed it elsewhere is FailureDomainMismatch and not provisioned", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h)
		h.runWith(tm, jobs.OpApply, 1, placedIn("zone-b"))
		h.wantMismatch(tm)
		if tm.Status.IsProvisioned() || tm.Status.FailureDomain != "" {
			t.Fatalf("provisioned %v, status.failureDomain %q", tm.Status.IsProvisioned(), tm.Status.FailureDomain)
		}
	})

	t.Run("a provisioned machine still checks its Machine's failure domain", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		tm := newMachine(h)
		h.runWith(tm, jobs.OpApply, 1, placedIn("zone-a"))
		if !tm.Status.IsProvisioned() || tm.Status.FailureDomain != "zone-a" {
			t.Fatalf("placed as asked: provisioned %v, status.failureDomain %q, conditions %+v", tm.Status.IsProvisioned(), tm.Status.FailureDomain, tm.Status.Conditions)
		}
		h.events()
		// A later run (here the refresh after the apply) finds the machine elsewhere.
		h.runWith(tm, jobs.OpRefresh, 2, placedIn("zone-b"))
		h.wantMismatch(tm)
		if !tm.Status.IsProvisioned() || tm.Status.FailureDomain != "zone-a" {
			t.Fatalf("provisioned %v, status.failureDomain %q: a provisioned machine is only reported", tm.Status.IsProvisioned(), tm.Status.FailureDomain)
		}
	})

	t.Run("a machine whose variables source is gone still checks its Machine's failure domain", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		h.configMapSource("sizes", optIn, map[string]string{"size": "small"})
		tm := newMachine(h, func(tm *infrav1.TerraformMachine) {
			tm.Spec.VariablesFrom = []infrav1.VariablesSource{configMapRef("sizes", infrav1.VariablesFormatString)}
		})
		if err := h.c.Delete(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sizes", Namespace: h.ns}}); err != nil {
			t.Fatal(err)
		}
		h.runWith(tm, jobs.OpApply, 1, placedIn("zone-b"))
		h.wantMismatch(tm)
		h.runWith(tm, jobs.OpRefresh, 2, placedIn("zone-b"))
		if c := conditions.Get(tm.Status.Conditions, conditions.DependenciesReady); c == nil || c.Reason != conditions.ReasonVariablesSourceNotFound {
			t.Fatalf("DependenciesReady = %+v, want VariablesSourceNotFound", c)
		}
		wantCond(t, tm, conditions.OutputsValid, metav1.ConditionFalse, conditions.ReasonFailureDomainMismatch)
		if tm.Status.IsProvisioned() {
			t.Fatal("provisioned in another failure domain than its Machine's")
		}
	})

	t.Run("a machine placed elsewhere is not provisioned, so its changed inputs apply", func(t *testing.T) {
		h := newHarness(t, jobs.KindMachine)
		h.configMapSource("sizes", optIn, map[string]string{"size": "small"})
		tm := newMachine(h, func(tm *infrav1.TerraformMachine) {
			tm.Spec.VariablesFrom = []infrav1.VariablesSource{configMapRef("sizes", infrav1.VariablesFormatString)}
		})
		h.runWith(tm, jobs.OpApply, 1, placedIn("zone-b"))
		h.wantMismatch(tm)
		h.runWith(tm, jobs.OpRefresh, 2, placedIn("zone-b"))
		h.setConfigMapValue("sizes", "size", "large")
		h.settle(tm)
		if job := h.runningJob(jobs.KindMachine, tm.Name); jobs.OpOf(&job) != jobs.OpApply {
			t.Fatalf("running %s, want the apply of the changed inputs", jobs.OpOf(&job))
		}
	})
}
