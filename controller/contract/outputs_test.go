package contract

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
)

const healthy = `{"state":"running","healthy":true,"message":null,"reasons":[]}`

// workspace builds a workspace output from the role's required outputs, each null unless set.
func workspace(role Role, set map[string]string) json.RawMessage {
	parts := []string{}
	for _, name := range RequiredOutputs(role) {
		v, ok := set[name]
		if !ok {
			v = "null"
		}
		if v == "-" {
			continue // left out
		}
		parts = append(parts, fmt.Sprintf("%q:%s", name, v))
	}
	for name, v := range set {
		if !strings.Contains(strings.Join(RequiredOutputs(role), " "), name) {
			parts = append(parts, fmt.Sprintf("%q:%s", name, v))
		}
	}
	return json.RawMessage("{" + strings.Join(parts, ",") + "}")
}

func TestEveryKindHasARoleWithOutputs(t *testing.T) {
	roles := map[Role]bool{}
	for _, k := range infrav1.Kinds {
		role := RoleOf(k)
		if len(RequiredOutputs(role)) == 0 || roles[role] {
			t.Fatalf("%s: role %q has no outputs or is another kind's", k.Kind, role)
		}
		roles[role] = true
	}
	for _, role := range []Role{RoleCluster, RoleMachine, RoleMachinePool} {
		if !roles[role] {
			t.Errorf("role %q is no kind's", role)
		}
	}
}

func TestDecodeCondition(t *testing.T) {
	manyIDs := make([]string, MaxProviderIDs+1)
	for i := range manyIDs {
		manyIDs[i] = fmt.Sprintf("%q", fmt.Sprintf("aws:///i-%d", i))
	}
	manyInstances := make([]string, MaxInstances+1)
	for i := range manyInstances {
		manyInstances[i] = fmt.Sprintf(`{"provider_id":"p-%d"}`, i)
	}
	for _, tc := range []struct {
		rule      string
		role      Role
		workspace json.RawMessage
		expect    Expect
		status    metav1.ConditionStatus
		reason    string
		problem   string // an output named in the message
	}{
		{"a state without outputs misses every output", RoleCluster, nil, Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsMissing, OutputHealth},
		{"outputs that are not an object are invalid", RoleCluster, json.RawMessage(`[1]`), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, WorkspaceOutput},
		{"an output the module does not return is missing", RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: healthy, OutputExports: "-"}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsMissing, OutputExports},
		{"a cluster with null endpoint, domains and exports is valid", RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: healthy}), Expect{}, metav1.ConditionTrue, conditions.ReasonOutputsValid, ""},
		{"a null health is pending", RoleCluster, workspace(RoleCluster, nil), Expect{}, metav1.ConditionUnknown, conditions.ReasonOutputsPending, OutputHealth},
		{"a health state outside the set is invalid", RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: `{"state":"fine","healthy":true}`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputHealth},
		{"healthy must be a boolean", RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: `{"state":"running","healthy":"yes"}`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputHealth},
		{"a half-set endpoint is invalid", RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: healthy, OutputControlPlaneEndpoint: `{"host":"api.example.com","port":0}`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputControlPlaneEndpoint},
		{"an endpoint port beyond 65535 is invalid", RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: healthy, OutputControlPlaneEndpoint: `{"host":"a","port":70000}`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputControlPlaneEndpoint},
		{"failure domain names are unique", RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: healthy, OutputFailureDomains: `[{"name":"a"},{"name":"a"}]`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputFailureDomains},
		{"invalid beats pending", RoleCluster, workspace(RoleCluster, map[string]string{OutputControlPlaneEndpoint: `{"host":"a"}`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputControlPlaneEndpoint},
		{"missing beats invalid", RoleCluster, workspace(RoleCluster, map[string]string{OutputControlPlaneEndpoint: `{"host":"a"}`, OutputExports: "-"}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsMissing, OutputExports},
		{"a machine without a provider ID is pending", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy}), Expect{}, metav1.ConditionUnknown, conditions.ReasonOutputsPending, OutputProviderID},
		{"an empty provider ID reads as null", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `""`}), Expect{}, metav1.ConditionUnknown, conditions.ReasonOutputsPending, OutputProviderID},
		{"a machine with a provider ID and null lists is valid", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"aws:///i-1"`}), Expect{}, metav1.ConditionTrue, conditions.ReasonOutputsValid, ""},
		{"a machine's provider ID never changes", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"aws:///i-2"`}), Expect{ProviderID: "aws:///i-1"}, metav1.ConditionFalse, conditions.ReasonProviderIDChanged, OutputProviderID},
		{"a machine's failure domain is the one its Machine asked for", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"p"`, OutputFailureDomain: `"b"`}), Expect{FailureDomain: "a"}, metav1.ConditionFalse, conditions.ReasonFailureDomainMismatch, OutputFailureDomain},
		{"a null failure domain is no mismatch", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"p"`, OutputFailureDomain: "null"}), Expect{FailureDomain: "a"}, metav1.ConditionTrue, conditions.ReasonOutputsValid, ""},
		{"mismatch beats a changed provider ID", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"q"`, OutputFailureDomain: `"b"`}), Expect{FailureDomain: "a", ProviderID: "p"}, metav1.ConditionFalse, conditions.ReasonFailureDomainMismatch, OutputFailureDomain},
		{"an address type outside the set is invalid", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"p"`, OutputAddresses: `[{"type":"IPv6","address":"::1"}]`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputAddresses},
		{"interruptible must be a boolean", RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"p"`, OutputInterruptible: `"yes"`}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputInterruptible},
		{"a pool's null provider ID list is missing", RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputReplicas: "0", OutputInstances: "[]"}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsMissing, OutputProviderIDList},
		{"a pool's null replicas are pending", RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputProviderIDList: "[]", OutputInstances: "[]"}), Expect{}, metav1.ConditionUnknown, conditions.ReasonOutputsPending, OutputReplicas},
		{"a pool's null provider ID is allowed", RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputProviderIDList: "[]", OutputReplicas: "0", OutputInstances: "[]"}), Expect{}, metav1.ConditionTrue, conditions.ReasonOutputsValid, ""},
		{"replicas are whole numbers", RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputProviderIDList: "[]", OutputReplicas: "1.5", OutputInstances: "[]"}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputReplicas},
		{"replicas are not negative", RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputProviderIDList: "[]", OutputReplicas: "-1", OutputInstances: "[]"}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputReplicas},
		{"more than 10000 distinct provider IDs are invalid", RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputProviderIDList: "[" + strings.Join(manyIDs, ",") + "]", OutputReplicas: "1", OutputInstances: "[]"}), Expect{}, metav1.ConditionFalse, conditions.ReasonOutputsInvalid, OutputProviderIDList},
		{"more than 1000 instances are cut and reported", RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputProviderIDList: "[]", OutputReplicas: "1", OutputInstances: "[" + strings.Join(manyInstances, ",") + "]"}), Expect{}, metav1.ConditionTrue, conditions.ReasonInstancesTruncated, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			d := Decode(tc.role, tc.workspace, tc.expect)
			status, reason, message := d.Condition()
			if status != tc.status || reason != tc.reason {
				t.Fatalf("OutputsValid = %s/%s (%s), want %s/%s", status, reason, message, tc.status, tc.reason)
			}
			if tc.problem != "" && !strings.Contains(message, "output "+tc.problem+":") {
				t.Errorf("message %q does not name output %s", message, tc.problem)
			}
			if tc.problem != "" && d.Valid[tc.problem] {
				t.Errorf("output %s is both a problem and valid", tc.problem)
			}
		})
	}
}

func TestDecodedValues(t *testing.T) {
	t.Run("endpoint, failure domains sorted with control plane defaulted true, exports compacted", func(t *testing.T) {
		d := Decode(RoleCluster, workspace(RoleCluster, map[string]string{
			OutputHealth:               healthy,
			OutputControlPlaneEndpoint: `{"host":"api.example.com","port":6443}`,
			OutputFailureDomains:       `[{"name":"b","control_plane":false},{"name":"a","attributes":{"zone":"eu-1a"}}]`,
			OutputExports:              `{ "vpc_id" : "vpc-1", "subnets": [1, 2.50] }`,
		}), Expect{})
		o := d.Outputs
		if o.Endpoint == nil || *o.Endpoint != (Endpoint{Host: "api.example.com", Port: 6443}) {
			t.Errorf("endpoint %+v", o.Endpoint)
		}
		if len(o.FailureDomains) != 2 || o.FailureDomains[0].Name != "a" || !o.FailureDomains[0].ControlPlane || o.FailureDomains[0].Attributes["zone"] != "eu-1a" || o.FailureDomains[1].ControlPlane {
			t.Errorf("failure domains %+v", o.FailureDomains)
		}
		if string(o.Exports) != `{"vpc_id":"vpc-1","subnets":[1,2.50]}` {
			t.Errorf("exports %s", o.Exports)
		}
	})
	t.Run("an endpoint of empty host and port 0 is none; null exports are {}", func(t *testing.T) {
		d := Decode(RoleCluster, workspace(RoleCluster, map[string]string{OutputHealth: healthy, OutputControlPlaneEndpoint: `{"host":"","port":0}`}), Expect{})
		if d.Outputs.Endpoint != nil || !d.Valid[OutputControlPlaneEndpoint] || string(d.Outputs.Exports) != "{}" {
			t.Errorf("endpoint %+v valid %v exports %s", d.Outputs.Endpoint, d.Valid, d.Outputs.Exports)
		}
	})
	t.Run("addresses are deduplicated and sorted by type order, then address", func(t *testing.T) {
		d := Decode(RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"p"`, OutputAddresses: `[
			{"type":"Hostname","address":"node-1"},{"type":"ExternalIP","address":"203.0.113.9"},
			{"type":"InternalIP","address":"10.0.0.9"},{"type":"InternalIP","address":"10.0.0.10"},{"type":"Hostname","address":"node-1"}]`}), Expect{})
		got := fmt.Sprint(d.Outputs.Addresses)
		if want := "[{InternalIP 10.0.0.10} {InternalIP 10.0.0.9} {ExternalIP 203.0.113.9} {Hostname node-1}]"; got != want {
			t.Errorf("addresses %s, want %s", got, want)
		}
	})
	t.Run("provider IDs are sorted and deduplicated; replicas 0 is a value", func(t *testing.T) {
		d := Decode(RoleMachinePool, workspace(RoleMachinePool, map[string]string{OutputHealth: healthy, OutputProviderIDList: `["b","a","b"]`, OutputReplicas: "0", OutputInstances: `[{"provider_id":"a","state":"running"}]`}), Expect{})
		if fmt.Sprint(d.Outputs.ProviderIDList) != "[a b]" || d.Outputs.Replicas == nil || *d.Outputs.Replicas != 0 || len(d.Outputs.Instances) != 1 {
			t.Errorf("outputs %+v", d.Outputs)
		}
	})
	t.Run("a problem names the output and the rule, never the value", func(t *testing.T) {
		const secret = "s3cr3t-value-of-the-module"
		d := Decode(RoleMachine, workspace(RoleMachine, map[string]string{OutputHealth: healthy, OutputProviderID: `"p"`, OutputAddresses: `[{"type":"` + secret + `","address":"x"}]`, OutputFailureDomain: `"` + strings.Repeat(secret, 20) + `"`}), Expect{})
		_, _, message := d.Condition()
		if strings.Contains(message, secret) {
			t.Errorf("message %q holds an output value", message)
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(workspace(RoleCluster, map[string]string{OutputHealth: healthy})), 0)
	f.Add([]byte(`{"provider_id_list":[1],"replicas":1e99,"instances":[{"addresses":7}]}`), 2)
	f.Fuzz(func(t *testing.T, raw []byte, role int) {
		roles := []Role{RoleCluster, RoleMachine, RoleMachinePool}
		d := Decode(roles[(role%3+3)%3], raw, Expect{ProviderID: "p", FailureDomain: "a"})
		status, reason, _ := d.Condition()
		if status == "" || reason == "" {
			t.Fatalf("no condition for %q", raw)
		}
		for _, p := range d.Problems {
			if d.Valid[p.Output] {
				t.Fatalf("output %s is both a problem and valid", p.Output)
			}
		}
	})
}
