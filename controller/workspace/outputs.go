package workspace

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/state"
)

// The module's outputs reach the object here: decoded from the state the pass read, each output
// that meets its rules is written to its contract field, the others leave the field as it was.
// These are the only functions that know each kind's contract fields.

// decodeOutputs decodes the outputs of a state read live for obj's role. ok is false when there
// is nothing to decode: no state yet, or one that was never applied. failureDomain is the one a
// machine's Machine asks for ("" for none, or not known): a machine's failure_domain output must
// be it, and its provider ID the one it holds.
func decodeOutputs(kind infrav1.KindInfo, obj infrav1.Workspace, st state.State, failureDomain string) (contract.Decoded, bool) {
	if !st.Exists || st.InputsHash == "" {
		return contract.Decoded{}, false
	}
	expect := contract.Expect{}
	if m, isMachine := obj.(*infrav1.TerraformMachine); isMachine {
		expect = contract.Expect{ProviderID: m.Spec.ProviderID, FailureDomain: failureDomain}
	}
	return contract.Decode(contract.RoleOf(kind), st.Outputs[contract.WorkspaceOutput], expect), true
}

// setOutputs writes OutputsValid, the status fields of the outputs that decoded cleanly, and
// provisioning: an object is provisioned once an applied state's outputs all meet the contract
// and its health is known and not pending, and stays provisioned for life.
func setOutputs(obj infrav1.Workspace, at stamp, d contract.Decoded) {
	s := obj.WorkspaceStatus()
	status, reason, message := d.Condition()
	at.set(&s.Conditions, conditions.OutputsValid, status, reason, message)
	if provisions(d) {
		s.Initialization = &infrav1.Initialization{Provisioned: ptr.To(true)}
	}
	setHealth(s, at, d)
	if pool, isPool := obj.(*infrav1.TerraformMachinePool); isPool && s.IsProvisioned() {
		pool.Status.Ready = true
	}
	switch o := obj.(type) {
	case *infrav1.TerraformCluster:
		if d.Valid[contract.OutputFailureDomains] {
			o.Status.FailureDomains = failureDomains(d.Outputs.FailureDomains)
		}
		if d.Valid[contract.OutputExports] {
			o.Status.Exports = nil
			if len(d.Outputs.Exports) <= contract.MaxExportsStatusBytes {
				o.Status.Exports = &apiextensionsv1.JSON{Raw: d.Outputs.Exports}
			}
		}
	case *infrav1.TerraformMachine:
		if d.Valid[contract.OutputAddresses] {
			o.Status.Addresses = machineAddresses(d.Outputs.Addresses)
		}
		if d.Valid[contract.OutputFailureDomain] {
			o.Status.FailureDomain = d.Outputs.FailureDomain
		}
		if d.Valid[contract.OutputInterruptible] {
			o.Status.Interruptible = d.Outputs.Interruptible
		}
	case *infrav1.TerraformMachinePool:
		if d.Valid[contract.OutputReplicas] {
			o.Status.Replicas = d.Outputs.Replicas
		}
		if d.Valid[contract.OutputInstances] {
			o.Status.Instances = poolInstances(d.Outputs.Instances)
		}
	}
}

// provisions reports whether decoded outputs make their object provisioned: all meet the
// contract, and the health is known and not pending.
func provisions(d contract.Decoded) bool {
	status, _, _ := d.Condition()
	return status == metav1.ConditionTrue && d.Outputs.Health != nil && d.Outputs.Health.State != contract.HealthPending
}

// withProvisioningRebuilt returns obj, or a copy marked provisioned when its status does not say
// so but its state's outputs do. clusterctl move carries the state and not the status: a moved
// machine must be known as provisioned before anything asks whether its inputs may change, or
// its changed inputs would be applied again. The owners are not read yet, so only the provider
// ID is checked: the machine was provisioned under the failure domain check before it moved.
// A status that already found the outputs outside the Machine's failure domain is not
// overruled: that machine is not provisioned, so its inputs are read and a change is applied.
func withProvisioningRebuilt(kind infrav1.KindInfo, obj infrav1.Workspace, st state.State, stateErr error) infrav1.Workspace {
	if obj.WorkspaceStatus().IsProvisioned() || stateErr != nil {
		return obj
	}
	if c := conditions.Get(obj.WorkspaceStatus().Conditions, conditions.OutputsValid); c != nil && c.Reason == conditions.ReasonFailureDomainMismatch {
		return obj
	}
	if d, ok := decodeOutputs(kind, obj, st, ""); !ok || !provisions(d) {
		return obj
	}
	rebuilt := obj.DeepCopyObject().(infrav1.Workspace)
	rebuilt.WorkspaceStatus().Initialization = &infrav1.Initialization{Provisioned: ptr.To(true)}
	return rebuilt
}

// writeBackSpec writes the spec fields of the outputs that decoded cleanly, and reports whether
// it changed any. A cluster's endpoint and a machine's provider ID are set once, never changed
// or cleared; a pool's provider IDs follow its members.
func writeBackSpec(obj infrav1.Workspace, d contract.Decoded) bool {
	switch o := obj.(type) {
	case *infrav1.TerraformCluster:
		ep := d.Outputs.Endpoint
		if d.Valid[contract.OutputControlPlaneEndpoint] && ep != nil && o.Spec.ControlPlaneEndpoint.Host == "" {
			o.Spec.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: ep.Host, Port: ep.Port}
			// The module made the endpoint: its input stays null, so the copy is no new inputs.
			metav1.SetMetaDataAnnotation(&o.ObjectMeta, EndpointSourceAnnotation, EndpointSourceModule)
			return true
		}
	case *infrav1.TerraformMachine:
		if d.Valid[contract.OutputProviderID] && d.Outputs.ProviderID != "" && o.Spec.ProviderID == "" {
			o.Spec.ProviderID = d.Outputs.ProviderID
			return true
		}
	case *infrav1.TerraformMachinePool:
		changed := false
		if d.Valid[contract.OutputProviderIDList] && !slices.Equal(o.Spec.ProviderIDList, d.Outputs.ProviderIDList) {
			o.Spec.ProviderIDList, changed = d.Outputs.ProviderIDList, true
		}
		if d.Valid[contract.OutputProviderID] && o.Spec.ProviderID != d.Outputs.ProviderID {
			o.Spec.ProviderID, changed = d.Outputs.ProviderID, true
		}
		return changed
	}
	return false
}

// applyOutputs writes what the state's outputs say: the spec fields in their own patch (they
// are not status), the status fields, OutputsValid and provisioning into the pass's status, with
// an event for each change a person would want to hear about. deps are what the owners say: a
// machine placed outside its Machine's failure domain is not provisioned, and once provisioned
// it is only reported.
func (p *pass) applyOutputs(ctx context.Context, st state.State, deps Dependencies) error {
	d, ok := decodeOutputs(p.r.KindInfo, p.obj, st, deps.MachineFailureDomain)
	if !ok {
		return nil
	}
	before := p.obj.DeepCopyObject().(infrav1.Workspace)
	if writeBackSpec(p.obj, d) {
		if err := p.patchObject(ctx, before); err != nil {
			return fmt.Errorf("writing the module's outputs to the spec: %w", err)
		}
		for _, e := range specEvents(before, p.obj) {
			logf.FromContext(ctx).Info("wrote a module output to the spec", "reason", e.reason)
			p.event(nil, e.eventType, e.reason, "%s", e.note)
		}
	}
	// Copied, not pointed to: the setter updates the condition in place.
	var wasReason string
	if c := conditions.Get(p.status().Conditions, conditions.OutputsValid); c != nil {
		wasReason = c.Reason
	}
	wasProvisioned := p.status().IsProvisioned()
	setOutputs(p.obj, p.stamp(), d)
	if now := conditions.Get(p.status().Conditions, conditions.OutputsValid); now.Status == metav1.ConditionFalse && wasReason != now.Reason {
		p.event(nil, corev1.EventTypeWarning, EventOutputsInvalid, "%s: %s", now.Reason, now.Message)
	}
	if d.Valid[contract.OutputExports] && len(d.Outputs.Exports) > contract.MaxExportsStatusBytes {
		p.event(nil, corev1.EventTypeWarning, EventExportsNotPublished, "The exports output takes %d bytes of JSON, more than the %d status.exports shows; machines and pools still read it from the state", len(d.Outputs.Exports), contract.MaxExportsStatusBytes)
	}
	if !wasProvisioned && p.status().IsProvisioned() {
		logf.FromContext(ctx).Info("provisioned: the module's outputs meet the contract")
		p.event(nil, corev1.EventTypeNormal, EventProvisioned, "The applied state's outputs meet the contract: provisioned")
	}
	return nil
}

// specEvents are the events of spec fields writeBackSpec set once. They name the field, never
// its value: an output may be made of secret inputs, and events are read more widely than specs.
func specEvents(before, after infrav1.Workspace) []event {
	switch a := after.(type) {
	case *infrav1.TerraformCluster:
		if b := before.(*infrav1.TerraformCluster); b.Spec.ControlPlaneEndpoint != a.Spec.ControlPlaneEndpoint {
			return []event{{corev1.EventTypeNormal, EventControlPlaneEndpointSet, "spec.controlPlaneEndpoint was set from the module's control_plane_endpoint output"}}
		}
	case *infrav1.TerraformMachine:
		if b := before.(*infrav1.TerraformMachine); b.Spec.ProviderID != a.Spec.ProviderID {
			return []event{{corev1.EventTypeNormal, EventProviderIDSet, "spec.providerID was set from the module's provider_id output"}}
		}
	}
	return nil
}

// healthVerdict is what one reading of the module's health output means, for the
// InfrastructureHealthy condition and for remediation alike: both read it from verdictOf, so
// the condition and a replacement request never disagree about a state.
type healthVerdict struct {
	// status and reason are InfrastructureHealthy's; fallback is its message when the module
	// gives none.
	status           metav1.ConditionStatus
	reason, fallback string
	// reading is what the reading counts for remediation.
	reading healthReading
}

// healthStates holds the verdict of each health state but running, which verdictOf splits by
// the output's healthy flag.
var healthStates = map[string]healthVerdict{
	contract.HealthPending:    {metav1.ConditionFalse, conditions.ReasonInstancePending, contract.HealthPending, readingNone},
	contract.HealthDegraded:   {metav1.ConditionFalse, conditions.ReasonInstanceDegraded, contract.HealthDegraded, readingUnhealthy},
	contract.HealthStopped:    {metav1.ConditionFalse, conditions.ReasonInstanceStopped, contract.HealthStopped, readingUnhealthy},
	contract.HealthTerminated: {metav1.ConditionFalse, conditions.ReasonInstanceTerminated, contract.HealthTerminated, readingTerminated},
}

// verdictOf returns the verdict of a health output; ok is false for a state the contract does
// not name, which says nothing.
func verdictOf(h *contract.Health) (v healthVerdict, ok bool) {
	switch {
	case h.State == contract.HealthRunning && h.Healthy:
		return healthVerdict{metav1.ConditionTrue, conditions.ReasonHealthy, "running and healthy", readingHealthy}, true
	case h.State == contract.HealthRunning:
		return healthVerdict{metav1.ConditionFalse, conditions.ReasonInstanceUnhealthy, "running but not healthy", readingUnhealthy}, true
	}
	v, ok = healthStates[h.State]
	return v, ok
}

// setHealth writes InfrastructureHealthy from the health output (verdictOf): True only when the
// infrastructure is running and healthy, False for a known bad or pending state, Unknown when
// the module cannot tell. A health output that is invalid leaves the condition as it was.
func setHealth(s *infrav1.WorkspaceStatus, at stamp, d contract.Decoded) {
	h := d.Outputs.Health
	if d.Valid[contract.OutputHealth] {
		if v, ok := verdictOf(h); ok {
			at.set(&s.Conditions, conditions.InfrastructureHealthy, v.status, v.reason, healthMessage(h, v.fallback))
			return
		}
	}
	if d.Valid[contract.OutputHealth] || h == nil && slices.ContainsFunc(d.Problems, func(p contract.Problem) bool {
		return p.Output == contract.OutputHealth && p.Reason == conditions.ReasonOutputsPending
	}) {
		at.set(&s.Conditions, conditions.InfrastructureHealthy, metav1.ConditionUnknown, conditions.ReasonHealthUnknown, "the module cannot tell the infrastructure's health")
	}
}

// healthMessage is "<message>; reasons: a, b" from the health output, or fallback without one.
func healthMessage(h *contract.Health, fallback string) string {
	msg := h.Message
	if msg == "" {
		msg = fallback
	}
	if len(h.Reasons) > 0 {
		msg += "; reasons: " + strings.Join(h.Reasons, ", ")
	}
	return msg
}

func poolInstances(in []contract.Instance) []infrav1.PoolInstance {
	if len(in) == 0 {
		return nil
	}
	out := make([]infrav1.PoolInstance, len(in))
	for i, inst := range in {
		out[i] = infrav1.PoolInstance{ProviderID: inst.ProviderID, InstanceID: inst.InstanceID, Addresses: machineAddresses(inst.Addresses),
			FailureDomain: inst.FailureDomain, State: inst.State}
	}
	return out
}

func failureDomains(in []contract.FailureDomain) []infrav1.FailureDomain {
	if len(in) == 0 {
		return nil
	}
	out := make([]infrav1.FailureDomain, len(in))
	for i, fd := range in {
		out[i] = infrav1.FailureDomain{Name: fd.Name, ControlPlane: ptr.To(fd.ControlPlane), Attributes: fd.Attributes}
	}
	return out
}

func machineAddresses(in []contract.Address) []infrav1.MachineAddress {
	if len(in) == 0 {
		return nil
	}
	out := make([]infrav1.MachineAddress, len(in))
	for i, a := range in {
		out[i] = infrav1.MachineAddress{Type: a.Type, Address: a.Address}
	}
	return out
}
