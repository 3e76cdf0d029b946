package workspace

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/state"
)

const runningHealth = `"health":{"state":"running","healthy":true,"message":null,"reasons":[]}`

func appliedState(outputs string) state.State {
	st := state.State{Exists: true, InputsHash: "h1:x"}
	if outputs != "" {
		st.Outputs = map[string]json.RawMessage{contract.WorkspaceOutput: json.RawMessage(outputs)}
	}
	return st
}

func TestOutputsReachTheObject(t *testing.T) {
	provisioned := func(obj infrav1.Workspace) bool { return obj.WorkspaceStatus().IsProvisioned() }
	for _, tc := range []struct {
		rule  string
		kind  infrav1.KindInfo
		obj   infrav1.Workspace
		state state.State
		// failureDomain is the one the machine's Machine asks for.
		failureDomain string
		check         func(*testing.T, infrav1.Workspace, bool)
	}{
		{rule: "a state that was never applied is not decoded", kind: infrav1.ClusterKind, obj: &infrav1.TerraformCluster{},
			state: state.State{Exists: true},
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				if conditions.Get(obj.WorkspaceStatus().Conditions, conditions.OutputsValid) != nil || provisioned(obj) {
					t.Fatal("decoded the outputs of a state no apply wrote")
				}
			}},
		{rule: "a cluster's valid outputs set its endpoint once, its failure domains, and provision it", kind: infrav1.ClusterKind, obj: &infrav1.TerraformCluster{},
			state: appliedState(`{` + runningHealth + `,"control_plane_endpoint":{"host":"api.example","port":6443},"failure_domains":[{"name":"a"}],"exports":null}`),
			check: func(t *testing.T, obj infrav1.Workspace, specChanged bool) {
				c := obj.(*infrav1.TerraformCluster)
				wantCondition(t, &c.Status.WorkspaceStatus, conditions.OutputsValid, metav1.ConditionTrue, conditions.ReasonOutputsValid)
				if !specChanged || c.Spec.ControlPlaneEndpoint != (infrav1.APIEndpoint{Host: "api.example", Port: 6443}) {
					t.Fatalf("endpoint %+v (spec changed %v)", c.Spec.ControlPlaneEndpoint, specChanged)
				}
				if len(c.Status.FailureDomains) != 1 || c.Status.FailureDomains[0].Name != "a" || !ptr.Deref(c.Status.FailureDomains[0].ControlPlane, false) {
					t.Fatalf("failure domains %+v", c.Status.FailureDomains)
				}
				if !provisioned(obj) {
					t.Fatal("not provisioned")
				}
			}},
		{rule: "a cluster's endpoint is never changed once set", kind: infrav1.ClusterKind,
			obj:   &infrav1.TerraformCluster{Spec: infrav1.TerraformClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: "old.example", Port: 443}}},
			state: appliedState(`{` + runningHealth + `,"control_plane_endpoint":{"host":"api.example","port":6443},"failure_domains":null,"exports":null}`),
			check: func(t *testing.T, obj infrav1.Workspace, specChanged bool) {
				if c := obj.(*infrav1.TerraformCluster); specChanged || c.Spec.ControlPlaneEndpoint.Host != "old.example" {
					t.Fatalf("endpoint %+v (spec changed %v)", c.Spec.ControlPlaneEndpoint, specChanged)
				}
			}},
		{rule: "pending health does not provision", kind: infrav1.ClusterKind, obj: &infrav1.TerraformCluster{},
			state: appliedState(`{"health":{"state":"pending","healthy":false},"control_plane_endpoint":null,"failure_domains":null,"exports":null}`),
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				wantCondition(t, obj.WorkspaceStatus(), conditions.OutputsValid, metav1.ConditionTrue, conditions.ReasonOutputsValid)
				if provisioned(obj) {
					t.Fatal("provisioned while pending")
				}
			}},
		{rule: "a module without outputs leaves the object unprovisioned and says which are missing", kind: infrav1.ClusterKind, obj: &infrav1.TerraformCluster{},
			state: appliedState(""),
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				wantCondition(t, obj.WorkspaceStatus(), conditions.OutputsValid, metav1.ConditionFalse, conditions.ReasonOutputsMissing)
				if provisioned(obj) {
					t.Fatal("provisioned without outputs")
				}
			}},
		{rule: "provisioned stays true when outputs later break", kind: infrav1.ClusterKind,
			obj:   &infrav1.TerraformCluster{Status: infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Initialization: &infrav1.Initialization{Provisioned: ptr.To(true)}}}},
			state: appliedState(`{"health":7}`),
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				if !provisioned(obj) {
					t.Fatal("provisioning was taken back")
				}
			}},
		{rule: "a machine's provider ID is set once, its addresses and failure domain written", kind: infrav1.MachineKind, obj: &infrav1.TerraformMachine{},
			state: appliedState(`{` + runningHealth + `,"provider_id":"aws:///i-1","addresses":[{"type":"Hostname","address":"n"},{"type":"InternalIP","address":"10.0.0.1"}],"failure_domain":"a","interruptible":true}`),
			check: func(t *testing.T, obj infrav1.Workspace, specChanged bool) {
				m := obj.(*infrav1.TerraformMachine)
				if !specChanged || m.Spec.ProviderID != "aws:///i-1" {
					t.Fatalf("provider ID %q (spec changed %v)", m.Spec.ProviderID, specChanged)
				}
				if len(m.Status.Addresses) != 2 || m.Status.Addresses[0].Type != "InternalIP" || m.Status.FailureDomain != "a" || !m.Status.Interruptible {
					t.Fatalf("status %+v", m.Status)
				}
				if !provisioned(obj) {
					t.Fatal("not provisioned")
				}
			}},
		{rule: "a machine whose provider ID changed keeps the first and is not valid", kind: infrav1.MachineKind,
			obj:   &infrav1.TerraformMachine{Spec: infrav1.TerraformMachineSpec{ProviderID: "aws:///i-1"}},
			state: appliedState(`{` + runningHealth + `,"provider_id":"aws:///i-2","addresses":null,"failure_domain":null,"interruptible":null}`),
			check: func(t *testing.T, obj infrav1.Workspace, specChanged bool) {
				wantCondition(t, obj.WorkspaceStatus(), conditions.OutputsValid, metav1.ConditionFalse, conditions.ReasonProviderIDChanged)
				if m := obj.(*infrav1.TerraformMachine); specChanged || m.Spec.ProviderID != "aws:///i-1" {
					t.Fatalf("provider ID %q (spec changed %v)", m.Spec.ProviderID, specChanged)
				}
			}},
		{rule: "a machine without a provider ID is not provisioned", kind: infrav1.MachineKind, obj: &infrav1.TerraformMachine{},
			state: appliedState(`{` + runningHealth + `,"provider_id":null,"addresses":null,"failure_domain":null,"interruptible":null}`),
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				wantCondition(t, obj.WorkspaceStatus(), conditions.OutputsValid, metav1.ConditionUnknown, conditions.ReasonOutputsPending)
				if provisioned(obj) {
					t.Fatal("provisioned without a provider ID")
				}
			}},
		{rule: "a machine whose module placed it elsewhere is FailureDomainMismatch and not provisioned", kind: infrav1.MachineKind, obj: &infrav1.TerraformMachine{},
			failureDomain: "a",
			state:         appliedState(`{` + runningHealth + `,"provider_id":"aws:///i-1","addresses":null,"failure_domain":"b","interruptible":null}`),
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				wantCondition(t, obj.WorkspaceStatus(), conditions.OutputsValid, metav1.ConditionFalse, conditions.ReasonFailureDomainMismatch)
				if m := obj.(*infrav1.TerraformMachine); provisioned(obj) || m.Status.FailureDomain != "" {
					t.Fatalf("provisioned %v, failure domain %q", provisioned(obj), m.Status.FailureDomain)
				}
			}},
		{rule: "a provisioned machine still checks its Machine's failure domain", kind: infrav1.MachineKind,
			obj: &infrav1.TerraformMachine{Spec: infrav1.TerraformMachineSpec{ProviderID: "aws:///i-1"}, Status: infrav1.TerraformMachineStatus{
				WorkspaceStatus: infrav1.WorkspaceStatus{Initialization: &infrav1.Initialization{Provisioned: ptr.To(true)}}, FailureDomain: "a"}},
			failureDomain: "a",
			state:         appliedState(`{` + runningHealth + `,"provider_id":"aws:///i-1","addresses":null,"failure_domain":"b","interruptible":null}`),
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				wantCondition(t, obj.WorkspaceStatus(), conditions.OutputsValid, metav1.ConditionFalse, conditions.ReasonFailureDomainMismatch)
				if m := obj.(*infrav1.TerraformMachine); !provisioned(obj) || m.Status.FailureDomain != "a" {
					t.Fatalf("provisioned %v, failure domain %q: want it provisioned still, in the domain it reported before", provisioned(obj), m.Status.FailureDomain)
				}
			}},
		{rule: "a provisioned pool says ready, which Cluster API's MachinePool reads", kind: infrav1.MachinePoolKind,
			obj:   &infrav1.TerraformMachinePool{},
			state: appliedState(`{` + runningHealth + `,"provider_id":null,"provider_id_list":["p-1"],"replicas":1,"instances":[]}`),
			check: func(t *testing.T, obj infrav1.Workspace, _ bool) {
				if p := obj.(*infrav1.TerraformMachinePool); !provisioned(obj) || !p.Status.Ready {
					t.Fatalf("provisioned %v, ready %v", provisioned(obj), p.Status.Ready)
				}
			}},
		{rule: "a pool scaled to zero says replicas 0 and lists no provider IDs", kind: infrav1.MachinePoolKind,
			obj:   &infrav1.TerraformMachinePool{Spec: infrav1.TerraformMachinePoolSpec{ProviderIDList: []string{"p-1"}}},
			state: appliedState(`{` + runningHealth + `,"provider_id":null,"provider_id_list":[],"replicas":0,"instances":[]}`),
			check: func(t *testing.T, obj infrav1.Workspace, specChanged bool) {
				p := obj.(*infrav1.TerraformMachinePool)
				if p.Status.Replicas == nil || *p.Status.Replicas != 0 {
					t.Fatalf("replicas %v", p.Status.Replicas)
				}
				if !specChanged || len(p.Spec.ProviderIDList) != 0 {
					t.Fatalf("provider IDs %v (spec changed %v)", p.Spec.ProviderIDList, specChanged)
				}
				raw, err := json.Marshal(p.Status)
				if err != nil || !json.Valid(raw) || !strings.Contains(string(raw), `"replicas":0`) {
					t.Fatalf("status JSON %s does not say replicas 0", raw)
				}
			}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			d, ok := decodeOutputs(tc.kind, tc.obj, tc.state, tc.failureDomain)
			specChanged := false
			if ok {
				specChanged = writeBackSpec(tc.obj, d)
				setOutputs(tc.obj, at, d)
			}
			tc.check(t, tc.obj, specChanged)
		})
	}
}

func TestDependentsMessage(t *testing.T) {
	for _, tc := range []struct {
		rule  string
		found map[string][]string
		want  string
		total int
	}{
		{"none is no message", nil, "", 0},
		{"names are sorted", map[string][]string{"TerraformMachine": {"b", "a"}}, "2 TerraformMachine(s) (a, b)", 2},
		{"at most three names of each kind, then a count", map[string][]string{"TerraformMachine": {"e", "d", "c", "b", "a"}, "TerraformMachinePool": {"p"}},
			"5 TerraformMachine(s) (a, b, c and 2 more) and 1 TerraformMachinePool(s) (p)", 6},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got, total := dependentsMessage(tc.found); got != tc.want || total != tc.total {
				t.Fatalf("dependentsMessage = %q, %d; want %q, %d", got, total, tc.want, tc.total)
			}
		})
	}
}

func TestSetPausedAndDeletionBlocked(t *testing.T) {
	var s infrav1.WorkspaceStatus
	setPaused(&s, at, Pause{Paused: true, Why: "Cluster web has spec.paused"})
	wantCondition(t, &s, conditions.Paused, metav1.ConditionTrue, conditions.ReasonPaused)
	setPaused(&s, at, Pause{})
	wantCondition(t, &s, conditions.Paused, metav1.ConditionFalse, conditions.ReasonNotPaused)
	setDeletionBlocked(&s, at, "1 TerraformMachine(s) (a)")
	wantCondition(t, &s, conditions.DeletionBlocked, metav1.ConditionTrue, conditions.ReasonDependentsExist)
	setDeletionBlocked(&s, at, "")
	wantCondition(t, &s, conditions.DeletionBlocked, metav1.ConditionFalse, conditions.ReasonNotBlocked)
}

func TestHealthExportsAndInstancesReachTheStatus(t *testing.T) {
	cluster := func(health, exports string) *infrav1.TerraformCluster {
		c := &infrav1.TerraformCluster{}
		d, _ := decodeOutputs(infrav1.ClusterKind, c, appliedState(`{"health":`+health+`,"control_plane_endpoint":null,"failure_domains":null,"exports":`+exports+`}`), "")
		setOutputs(c, at, d)
		return c
	}
	for _, tc := range []struct {
		rule, health       string
		status             metav1.ConditionStatus
		reason, wantInText string
	}{
		{"running and healthy is Healthy", `{"state":"running","healthy":true,"message":null,"reasons":[]}`, metav1.ConditionTrue, conditions.ReasonHealthy, "running and healthy"},
		{"running but not healthy is InstanceUnhealthy, with the module's message and reasons", `{"state":"running","healthy":false,"message":"disk full","reasons":["disk","io"]}`, metav1.ConditionFalse, conditions.ReasonInstanceUnhealthy, "disk full; reasons: disk, io"},
		{"pending is InstancePending", `{"state":"pending","healthy":false}`, metav1.ConditionFalse, conditions.ReasonInstancePending, "pending"},
		{"degraded is InstanceDegraded", `{"state":"degraded","healthy":false}`, metav1.ConditionFalse, conditions.ReasonInstanceDegraded, "degraded"},
		{"stopped is InstanceStopped", `{"state":"stopped","healthy":false}`, metav1.ConditionFalse, conditions.ReasonInstanceStopped, "stopped"},
		{"terminated is InstanceTerminated", `{"state":"terminated","healthy":false}`, metav1.ConditionFalse, conditions.ReasonInstanceTerminated, "terminated"},
		{"unknown is HealthUnknown", `{"state":"unknown","healthy":false}`, metav1.ConditionUnknown, conditions.ReasonHealthUnknown, ""},
		{"null is HealthUnknown", `null`, metav1.ConditionUnknown, conditions.ReasonHealthUnknown, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			c := cluster(tc.health, "null")
			wantCondition(t, &c.Status.WorkspaceStatus, conditions.InfrastructureHealthy, tc.status, tc.reason)
			if msg := conditions.Get(c.Status.Conditions, conditions.InfrastructureHealthy).Message; !strings.Contains(msg, tc.wantInText) {
				t.Fatalf("message %q, want %q in it", msg, tc.wantInText)
			}
		})
	}
	t.Run("exports are shown in status; null shows {}", func(t *testing.T) {
		if c := cluster(`null`, `{"vpc": "v-1"}`); c.Status.Exports == nil || string(c.Status.Exports.Raw) != `{"vpc":"v-1"}` {
			t.Fatalf("exports %v", c.Status.Exports)
		}
		if c := cluster(`null`, `null`); c.Status.Exports == nil || string(c.Status.Exports.Raw) != `{}` {
			t.Fatalf("exports %v", c.Status.Exports)
		}
	})
	t.Run("exports beyond 64 KiB are not shown", func(t *testing.T) {
		if c := cluster(`null`, `{"big":"`+strings.Repeat("x", contract.MaxExportsStatusBytes)+`"}`); c.Status.Exports != nil {
			t.Fatal("oversized exports were copied into status")
		}
	})
	t.Run("a pool's instances are shown in status", func(t *testing.T) {
		p := &infrav1.TerraformMachinePool{}
		d, _ := decodeOutputs(infrav1.MachinePoolKind, p, appliedState(`{"health":null,"provider_id":null,"provider_id_list":["a"],"replicas":1,"instances":[{"provider_id":"a","instance_id":"i-1","state":"running","addresses":[{"type":"InternalIP","address":"10.0.0.2"}]}]}`), "")
		setOutputs(p, at, d)
		if len(p.Status.Instances) != 1 || p.Status.Instances[0].InstanceID != "i-1" || p.Status.Instances[0].State != "running" || len(p.Status.Instances[0].Addresses) != 1 {
			t.Fatalf("instances %+v", p.Status.Instances)
		}
	})
}
