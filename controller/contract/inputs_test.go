package contract

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/captf/captf/controller/inputs"
)

// valuesOf renders the inputs and reads back the variables file, as the module would see it.
func valuesOf(t *testing.T, in Inputs) (map[string]any, map[string]inputs.Variable) {
	t.Helper()
	vars := in.Variables()
	rendered, err := inputs.Render("img", vars, nil, nil, nil)
	if err != nil {
		t.Fatalf("rendering the inputs: %v", err)
	}
	values := map[string]any{}
	if err := json.Unmarshal(rendered.Vars, &values); err != nil {
		t.Fatal(err)
	}
	decls := map[string]inputs.Variable{}
	for _, v := range vars {
		decls[v.Name] = v
	}
	return values, decls
}

func TestEveryRoleDeclaresItsInputs(t *testing.T) {
	for _, tc := range []struct {
		role Role
		want []string
	}{
		{RoleCluster, []string{"captf_cluster", "captf_contract", "captf_object", "captf_tags", "cluster_network", "control_plane_endpoint", "control_plane_initialized", "kubernetes_version"}},
		{RoleMachine, []string{"bootstrap_data", "bootstrap_format", "captf_cluster", "captf_cluster_outputs", "captf_contract", "captf_object", "captf_tags", "control_plane", "failure_domain", "kubernetes_version", "machine_name"}},
		{RoleMachinePool, []string{"autoscaling", "bootstrap_data", "bootstrap_format", "captf_cluster", "captf_cluster_outputs", "captf_contract", "captf_object", "captf_tags", "cluster_failure_domains", "failure_domains", "kubernetes_version", "machinepool_name", "node_labels", "replicas"}},
	} {
		t.Run(string(tc.role), func(t *testing.T) {
			if got := InputNames(tc.role); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("InputNames = %v, want %v", got, tc.want)
			}
			values, _ := valuesOf(t, Inputs{Role: tc.role})
			for _, name := range tc.want {
				if _, ok := values[name]; !ok {
					t.Errorf("%s is declared but not set", name)
				}
			}
		})
	}
}

func TestCommonInputs(t *testing.T) {
	values, _ := valuesOf(t, Inputs{Role: RoleMachine, ClusterName: "prod", Namespace: "team", Kind: "TerraformMachine", Name: "prod-md-0-x", Template: "prod-md-0"})
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"the contract version is given", values[InputContract], Version},
		{"the cluster is named with its namespace", values[InputCluster], map[string]any{"name": "prod", "namespace": "team"}},
		{"the object is named with its kind", values[InputObject], map[string]any{"kind": "TerraformMachine", "name": "prod-md-0-x", "namespace": "team"}},
		{"the tags have exactly six keys", values[InputTags], map[string]any{
			"captf.io/cluster": "prod", "captf.io/namespace": "team", "captf.io/kind": "TerraformMachine",
			"captf.io/name": "prod-md-0-x", "captf.io/managed-by": "captf", "captf.io/template": "prod-md-0"}},
		{"no cluster exports read as an empty object", values[InputClusterOutputs], map[string]any{}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.rule, tc.got, tc.want)
		}
	}
}

func TestClusterInputs(t *testing.T) {
	values, _ := valuesOf(t, Inputs{Role: RoleCluster, Cluster: ClusterInputs{
		ControlPlaneEndpoint: &Endpoint{Host: "api.example", Port: 6443}, KubernetesVersion: ptr.To("v1.37.2"),
		ControlPlaneInitialized: true, Network: &ClusterNetwork{Pods: []string{"10.0.0.0/16"}},
	}})
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"the endpoint is an object", values[InputControlPlaneEndpoint], map[string]any{"host": "api.example", "port": float64(6443)}},
		{"the version is given verbatim", values[InputKubernetesVersion], "v1.37.2"},
		{"control plane initialized is a bool", values[InputControlPlaneInitialized], true},
		{"unset network lists are empty, unset scalars null", values[InputClusterNetwork], map[string]any{"pods": []any{"10.0.0.0/16"}, "services": []any{}, "service_domain": nil, "api_server_port": nil}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.rule, tc.got, tc.want)
		}
	}
	empty, _ := valuesOf(t, Inputs{Role: RoleCluster})
	for _, name := range []string{InputControlPlaneEndpoint, InputKubernetesVersion, InputClusterNetwork} {
		if v, ok := empty[name]; !ok || v != nil {
			t.Errorf("%s without a value = %v (set %v), want null", name, v, ok)
		}
	}
}

func TestMachineInputs(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte("#cloud-config\n"))
	_ = w.Close()
	values, decls := valuesOf(t, Inputs{Role: RoleMachine, ClusterOutputs: json.RawMessage(`{"vpc": "v-1", "n": 1.50}`), Machine: MachineInputs{
		MachineName: "m-1", Bootstrap: Bootstrap{Data: gz.Bytes()}, FailureDomain: ptr.To(""),
		KubernetesVersion: ptr.To("v1.37.2+rke2r1"), ControlPlane: true,
	}})
	decoded, err := base64.StdEncoding.DecodeString(values[InputBootstrapData].(string))
	if err != nil || !bytes.Equal(decoded, gz.Bytes()) {
		t.Errorf("bootstrap data does not round-trip a gzip payload through standard base64: %v", err)
	}
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"bootstrap data is sensitive", decls[InputBootstrapData].Sensitive, true},
		{"the format defaults to cloud-config", values[InputBootstrapFormat], "cloud-config"},
		{"an empty failure domain is null", values[InputFailureDomain], nil},
		{"the version keeps its suffix", values[InputKubernetesVersion], "v1.37.2+rke2r1"},
		{"the machine is named", values[InputMachineName], "m-1"},
		{"a control plane machine says so", values[InputControlPlane], true},
		{"the cluster's exports are given verbatim", values[InputClusterOutputs], map[string]any{"vpc": "v-1", "n": 1.5}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.rule, tc.got, tc.want)
		}
	}
}

func TestPoolInputs(t *testing.T) {
	values, _ := valuesOf(t, Inputs{Role: RoleMachinePool, Pool: PoolInputs{
		MachinePoolName: "mp-0", Replicas: 0, Bootstrap: Bootstrap{Data: []byte("x"), Format: "ignition"},
		ClusterFailureDomains: []string{"b", "a"}, NodeLabels: map[string]string{"role": "worker"},
		Autoscaling: Autoscaling{Enabled: true, Min: 1, Max: 3},
	}})
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"replicas 0 is a number", values[InputReplicas], float64(0)},
		{"the format is the Secret's", values[InputBootstrapFormat], "ignition"},
		{"unset failure domains are an empty list", values[InputFailureDomains], []any{}},
		{"the cluster's failure domains are sorted", values[InputClusterFailureDomains], []any{"a", "b"}},
		{"node labels are given", values[InputNodeLabels], map[string]any{"role": "worker"}},
		{"autoscaling is an object", values[InputAutoscaling], map[string]any{"enabled": true, "min": float64(1), "max": float64(3)}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.rule, tc.got, tc.want)
		}
	}
}

func TestAutoscalingOf(t *testing.T) {
	for _, tc := range []struct {
		rule        string
		annotations map[string]string
		want        Autoscaling
		ok          bool // no problem reported
	}{
		{"no annotations: off", nil, Autoscaling{}, true},
		{"both whole numbers: on", map[string]string{AnnotationAutoscalerMin: "1", AnnotationAutoscalerMax: "5"}, Autoscaling{Enabled: true, Min: 1, Max: 5}, true},
		{"zero to zero is allowed", map[string]string{AnnotationAutoscalerMin: "0", AnnotationAutoscalerMax: "0"}, Autoscaling{Enabled: true}, true},
		{"one missing: unusable", map[string]string{AnnotationAutoscalerMin: "1"}, Autoscaling{}, false},
		{"not a number: unusable", map[string]string{AnnotationAutoscalerMin: "one", AnnotationAutoscalerMax: "5"}, Autoscaling{}, false},
		{"min above max: unusable", map[string]string{AnnotationAutoscalerMin: "6", AnnotationAutoscalerMax: "5"}, Autoscaling{}, false},
		{"negative: unusable", map[string]string{AnnotationAutoscalerMin: "-1", AnnotationAutoscalerMax: "5"}, Autoscaling{}, false},
	} {
		got, problem := AutoscalingOf(tc.annotations)
		if got != tc.want || (problem == "") != tc.ok {
			t.Errorf("%s: got %+v %q, want %+v (usable %v)", tc.rule, got, problem, tc.want, tc.ok)
		}
	}
}

func TestPoolReplicas(t *testing.T) {
	on := Autoscaling{Enabled: true, Min: 2, Max: 4}
	for _, tc := range []struct {
		rule        string
		spec        *int32
		autoscaling Autoscaling
		want        int32
	}{
		{"no spec replicas is one", nil, Autoscaling{}, 1},
		{"the spec's count without autoscaling", ptr.To[int32](0), Autoscaling{}, 0},
		{"under autoscaling the MachinePool's replicas, which the autoscaler writes, are followed", ptr.To[int32](3), on, 3},
		{"below min raised to min", ptr.To[int32](1), on, 2},
		{"above max lowered to max", ptr.To[int32](9), on, 4},
		{"no spec replicas under autoscaling is min", nil, Autoscaling{Enabled: true, Min: 0, Max: 4}, 0},
	} {
		if got := PoolReplicas(tc.spec, tc.autoscaling); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.rule, got, tc.want)
		}
	}
}

// TestABootstrapTokenRotationIsNoInputChange: Cluster API's kubeadm bootstrap provider rotates
// a pool's join token by rewriting its bootstrap data; the inputs hash reads the data with every
// token masked, while the module still gets the data as written.
func TestABootstrapTokenRotationIsNoInputChange(t *testing.T) {
	join := func(token, extra string) []byte {
		return []byte("#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm-join-config.yaml\n  content: |\n    discovery:\n      bootstrapToken:\n        token: " + token + "\n" + extra)
	}
	render := func(role Role, data []byte) inputs.Rendered {
		in := Inputs{Role: role, Machine: MachineInputs{MachineName: "m-0", Bootstrap: Bootstrap{Data: data}}, Pool: PoolInputs{MachinePoolName: "mp-0", Bootstrap: Bootstrap{Data: data}}}
		r, err := inputs.Render("img", in.Variables(), nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, role := range []Role{RoleMachinePool, RoleMachine} {
		before := render(role, join("abcdef.0123456789abcdef", ""))
		rotated := render(role, join("uvwxyz.9876543210fedcba", ""))
		changed := render(role, join("abcdef.0123456789abcdef", "runcmd: [reboot]\n"))
		if before.Hash != rotated.Hash {
			t.Errorf("%s: a new token alone changed the inputs hash", role)
		}
		if before.Hash == changed.Hash {
			t.Errorf("%s: a change beside the token left the inputs hash as it was", role)
		}
		if !bytes.Contains(rotated.Vars, []byte(base64.StdEncoding.EncodeToString(join("uvwxyz.9876543210fedcba", "")))) {
			t.Errorf("%s: the module does not get the bootstrap data as written", role)
		}
	}
}
