package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// AnnotationRemediationRequested marks a Machine that captf asked Cluster API to replace, with
// why; captf withdraws its request only where this annotation says it made it.
const AnnotationRemediationRequested = "captf.io/remediation-requested"

// defaultUnhealthyThreshold and defaultHealthCheckInterval are spec.remediation's defaults.
const (
	defaultUnhealthyThreshold  = 3
	defaultHealthCheckInterval = 5 * time.Minute
)

// healthReading is what one health reading says for remediation.
type healthReading int

const (
	// readingNone: no reading, or one that says nothing for remediation (pending, unknown).
	readingNone healthReading = iota
	readingHealthy
	// readingUnhealthy: running but not healthy, degraded or stopped.
	readingUnhealthy
	// readingTerminated: the machine is gone; the terminal signal.
	readingTerminated
)

// readHealth reads the health output of the machine's state. It is read from the state, which
// only runs write, never from the status, so that nobody who may write the object's status can
// make captf ask for a Machine's replacement.
// providerIDMissing is also the reading's: a provisioned machine whose module returned no
// provider ID (see setProviderIDMissing).
func readHealth(kind infrav1.KindInfo, obj infrav1.Workspace, st state.State) (reading healthReading, providerIDMissing bool) {
	d, ok := decodeOutputs(kind, obj, st, "")
	if !ok {
		return readingNone, false
	}
	if m, isMachine := obj.(*infrav1.TerraformMachine); isMachine && m.Spec.ProviderID != "" {
		providerIDMissing = slices.ContainsFunc(d.Problems, func(p contract.Problem) bool {
			return p.Output == contract.OutputProviderID && p.Reason == conditions.ReasonOutputsPending
		})
	}
	return healthReadingOf(d), providerIDMissing
}

// healthReadingOf is what the decoded health output says for remediation (verdictOf).
func healthReadingOf(d contract.Decoded) healthReading {
	if !d.Valid[contract.OutputHealth] || d.Outputs.Health == nil {
		return readingNone
	}
	v, _ := verdictOf(d.Outputs.Health)
	return v.reading
}

// healthSampleJob is the newest successful apply or refresh: each one reads the health once. A
// refresh that finished in the same instant as an apply is the newer, since it follows one.
func healthSampleJob(all []batchv1.Job) string {
	var newest string
	var at time.Time
	for _, op := range []jobs.Op{jobs.OpApply, jobs.OpRefresh} {
		if j, finished, ok := jobs.NewestSuccess(all, op); ok && (newest == "" || !finished.Before(at)) {
			newest, at = j.Name, finished
		}
	}
	return newest
}

// remediationWanted returns why the machine asks Cluster API to replace it, or "" when it does
// not: only with spec.remediation.annotateMachine, once provisioned and not being deleted, when
// the state reports the machine terminated, or unhealthy in unhealthyThreshold readings in a row
// and still now.
func remediationWanted(m *infrav1.TerraformMachine, reading healthReading) string {
	r := m.Spec.Remediation
	if !r.AnnotateMachine || !m.Status.IsProvisioned() || !m.DeletionTimestamp.IsZero() {
		return ""
	}
	threshold := int32(defaultUnhealthyThreshold)
	if r.UnhealthyThreshold != nil {
		threshold = *r.UnhealthyThreshold
	}
	switch {
	case reading == readingTerminated:
		return "the module reports the machine terminated"
	case reading == readingUnhealthy && m.Status.UnhealthySamples >= threshold:
		return fmt.Sprintf("%d health readings in a row found the machine unhealthy", m.Status.UnhealthySamples)
	}
	return ""
}

// reconcileRemediation counts the machine's health reading and asks Cluster API to replace the
// machine, or withdraws captf's request once the machine is healthy again (see
// MachineRemediationSpec). The Machine is the owner that names the object back.
//
// A provisioned machine whose module returns no provider ID is reported here too: its health
// before the pass read the state is prevHealth.
func (p *pass) reconcileRemediation(ctx context.Context, st state.State, owner client.ObjectKey, prevHealth *metav1.Condition) error {
	m, isMachine := p.obj.(*infrav1.TerraformMachine)
	if !isMachine {
		return nil
	}
	reading, providerIDMissing := readHealth(p.r.KindInfo, p.obj, st)
	sample := healthSampleJob(p.jobs)
	if providerIDMissing && sample != "" && m.Status.IsProvisioned() {
		setProviderIDMissing(&m.Status.WorkspaceStatus, p.stamp(), prevHealth, sample)
		if c := conditions.Get(m.Status.Conditions, conditions.InfrastructureHealthy); c.Reason == conditions.ReasonInstanceTerminated {
			reading = readingTerminated
		}
	}
	setHealthSample(&m.Status, sample, reading)
	if owner.Name == "" {
		return nil
	}
	var machine clusterv1.Machine
	if err := p.r.Client.Get(ctx, owner, &machine); err != nil {
		return client.IgnoreNotFound(err)
	}
	_, requested := machine.Annotations[AnnotationRemediationRequested]
	why := remediationWanted(m, reading)
	switch {
	case !machine.DeletionTimestamp.IsZero():
		return nil
	case why != "" && !requested:
		if err := p.patchMachineAnnotations(ctx, &machine, map[string]*string{clusterv1.RemediateMachineAnnotation: ptr.To(""), AnnotationRemediationRequested: &why}); err != nil {
			return err
		}
		logf.FromContext(ctx).Info("asked Cluster API to replace the machine", "machine", owner.Name, "why", why)
		p.event(nil, corev1.EventTypeWarning, EventRemediationRequested, "Annotated Machine %s with %s: %s", owner.Name, clusterv1.RemediateMachineAnnotation, why)
	case requested && reading == readingHealthy && m.DeletionTimestamp.IsZero():
		if err := p.patchMachineAnnotations(ctx, &machine, map[string]*string{clusterv1.RemediateMachineAnnotation: nil, AnnotationRemediationRequested: nil}); err != nil {
			return err
		}
		logf.FromContext(ctx).Info("withdrew the request to replace the machine: healthy again", "machine", owner.Name)
		p.event(nil, corev1.EventTypeNormal, EventRemediationWithdrawn, "The machine is healthy again: removed %s from Machine %s", clusterv1.RemediateMachineAnnotation, owner.Name)
	}
	return nil
}

// patchMachineAnnotations sets (or, for nil, removes) annotations of the Machine, on the version
// read, so a request never lands on a Machine that changed since.
func (p *pass) patchMachineAnnotations(ctx context.Context, machine *clusterv1.Machine, annotations map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": machine.ResourceVersion, "annotations": annotations}})
	if err != nil {
		return err
	}
	switch err := p.r.Client.Patch(ctx, machine, client.RawPatch(types.MergePatchType, body)); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("annotating Machine %s: %w", machine.Name, err)
	}
	return nil
}
