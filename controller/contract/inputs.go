package contract

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/jobs"
)

// Version is the contract version a module is given as captf_contract.
const Version = "v1alpha1"

// Input names: the root variables every module of a role declares (it may ignore them).
const (
	InputContract       = "captf_contract"
	InputCluster        = "captf_cluster"
	InputObject         = "captf_object"
	InputTags           = "captf_tags"
	InputClusterOutputs = "captf_cluster_outputs"

	InputControlPlaneEndpoint    = "control_plane_endpoint"
	InputKubernetesVersion       = "kubernetes_version"
	InputControlPlaneInitialized = "control_plane_initialized"
	InputClusterNetwork          = "cluster_network"

	InputMachineName     = "machine_name"
	InputBootstrapData   = "bootstrap_data"
	InputBootstrapFormat = "bootstrap_format"
	InputFailureDomain   = "failure_domain"
	InputControlPlane    = "control_plane"

	InputMachinePoolName       = "machinepool_name"
	InputReplicas              = "replicas"
	InputFailureDomains        = "failure_domains"
	InputClusterFailureDomains = "cluster_failure_domains"
	InputNodeLabels            = "node_labels"
	InputAutoscaling           = "autoscaling"
)

// Tag keys of captf_tags: what a module puts on everything it creates, so it can be found.
const (
	TagCluster   = "captf.io/cluster"
	TagNamespace = "captf.io/namespace"
	TagKind      = "captf.io/kind"
	TagName      = "captf.io/name"
	TagManagedBy = "captf.io/managed-by"
	TagTemplate  = "captf.io/template"
)

// DefaultBootstrapFormat is the bootstrap format when the bootstrap Secret names none.
const DefaultBootstrapFormat = "cloud-config"

// input declares one contract input: its Terraform type, and whether null is a value of it.
type input struct {
	name      string
	typ       string
	nullable  bool
	sensitive bool
}

// Types of the structured inputs.
const (
	typeEndpoint       = "object({host=string,port=number})"
	typeClusterNetwork = "object({pods=list(string),services=list(string),service_domain=string,api_server_port=number})"
	typeAutoscaling    = "object({enabled=bool,min=number,max=number})"
)

var commonInputs = []input{
	{name: InputContract, typ: "string"},
	{name: InputCluster, typ: "any"},
	{name: InputObject, typ: "any"},
	{name: InputTags, typ: "map(string)"},
}

var roleInputs = map[Role][]input{
	RoleCluster: {
		{name: InputControlPlaneEndpoint, typ: typeEndpoint, nullable: true},
		{name: InputKubernetesVersion, typ: "string", nullable: true},
		{name: InputControlPlaneInitialized, typ: "bool"},
		{name: InputClusterNetwork, typ: typeClusterNetwork, nullable: true},
	},
	RoleMachine: {
		{name: InputClusterOutputs, typ: "any"},
		{name: InputMachineName, typ: "string"},
		{name: InputBootstrapData, typ: "string", sensitive: true},
		{name: InputBootstrapFormat, typ: "string"},
		{name: InputFailureDomain, typ: "string", nullable: true},
		{name: InputKubernetesVersion, typ: "string", nullable: true},
		{name: InputControlPlane, typ: "bool"},
	},
	RoleMachinePool: {
		{name: InputClusterOutputs, typ: "any"},
		{name: InputMachinePoolName, typ: "string"},
		{name: InputReplicas, typ: "number"},
		{name: InputBootstrapData, typ: "string", sensitive: true},
		{name: InputBootstrapFormat, typ: "string"},
		{name: InputFailureDomains, typ: "list(string)"},
		{name: InputClusterFailureDomains, typ: "list(string)"},
		{name: InputKubernetesVersion, typ: "string", nullable: true},
		{name: InputNodeLabels, typ: "map(string)"},
		{name: InputAutoscaling, typ: typeAutoscaling},
	},
}

// InputNames are the contract inputs a module of the role declares, sorted.
func InputNames(role Role) []string {
	var names []string
	for _, in := range append(append([]input(nil), commonInputs...), roleInputs[role]...) {
		names = append(names, in.name)
	}
	sort.Strings(names)
	return names
}

// Inputs are the contract inputs of one object, as read from it and its Cluster API owners.
type Inputs struct {
	Role Role
	// ClusterName is the Cluster API Cluster the object belongs to; Namespace is the object's.
	ClusterName string
	Namespace   string
	// Kind and Name are the object's.
	Kind string
	Name string
	// Template is the Template the object was cloned from ("" for none).
	Template string
	// ClusterOutputs are the cluster's exports, verbatim JSON ({} for none); machine and pool.
	ClusterOutputs json.RawMessage

	Cluster ClusterInputs
	Machine MachineInputs
	Pool    PoolInputs
}

// ClusterInputs are the inputs of the cluster role.
type ClusterInputs struct {
	// ControlPlaneEndpoint is nil when none is known, or the module is to provide it.
	ControlPlaneEndpoint    *Endpoint
	KubernetesVersion       *string
	ControlPlaneInitialized bool
	Network                 *ClusterNetwork
}

// ClusterNetwork is the Cluster's network configuration.
type ClusterNetwork struct {
	Pods          []string
	Services      []string
	ServiceDomain *string
	APIServerPort *int32
}

// Bootstrap is the bootstrap data Cluster API's bootstrap provider wrote.
type Bootstrap struct {
	// Data are the bytes of the Secret's value key; they reach the module base64-encoded,
	// since a compressed payload is not text.
	Data []byte
	// Format is the Secret's format key, DefaultBootstrapFormat when it has none.
	Format string
}

// MachineInputs are the inputs of the machine role, from the owner Machine.
type MachineInputs struct {
	MachineName       string
	Bootstrap         Bootstrap
	FailureDomain     *string
	KubernetesVersion *string
	ControlPlane      bool
}

// PoolInputs are the inputs of the machine pool role, from the owner MachinePool.
type PoolInputs struct {
	MachinePoolName       string
	Replicas              int32
	Bootstrap             Bootstrap
	FailureDomains        []string
	ClusterFailureDomains []string
	KubernetesVersion     *string
	NodeLabels            map[string]string
	Autoscaling           Autoscaling
}

// Autoscaling is the cluster autoscaler's bounds of a pool, from its MachinePool's annotations.
type Autoscaling struct {
	Enabled  bool
	Min, Max int32
}

// Autoscaler annotations on a MachinePool, as the cluster autoscaler's Cluster API provider
// reads them.
const (
	AnnotationAutoscalerMin = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	AnnotationAutoscalerMax = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)

// AutoscalingOf reads a MachinePool's autoscaler annotations: enabled only when both are whole
// numbers with 0 <= min <= max. problem says why annotations that are present cannot be used
// ("" when they can, or when there are none).
func AutoscalingOf(annotations map[string]string) (a Autoscaling, problem string) {
	minText, hasMin := annotations[AnnotationAutoscalerMin]
	maxText, hasMax := annotations[AnnotationAutoscalerMax]
	if !hasMin && !hasMax {
		return Autoscaling{}, ""
	}
	lo, errMin := strconv.ParseInt(minText, 10, 32)
	hi, errMax := strconv.ParseInt(maxText, 10, 32)
	switch {
	case !hasMin || !hasMax:
		return Autoscaling{}, "both " + AnnotationAutoscalerMin + " and " + AnnotationAutoscalerMax + " must be set"
	case errMin != nil || errMax != nil:
		return Autoscaling{}, "the autoscaler's min and max sizes must be whole numbers"
	case lo < 0 || lo > hi:
		return Autoscaling{}, "the autoscaler's min size must be at least 0 and at most its max size"
	}
	return Autoscaling{Enabled: true, Min: int32(lo), Max: int32(hi)}, ""
}

// PoolReplicas is the replicas input of a pool: the MachinePool's spec.replicas (nil is 1).
// Under autoscaling that is the count the cluster autoscaler writes, kept within its bounds (nil
// is the minimum), so the module follows each of its steps; the pool's own count never overrides
// it.
func PoolReplicas(specReplicas *int32, a Autoscaling) int32 {
	switch {
	case !a.Enabled && specReplicas == nil:
		return 1
	case !a.Enabled:
		return *specReplicas
	case specReplicas == nil:
		return a.Min
	}
	return min(max(*specReplicas, a.Min), a.Max)
}

// Variables are the contract inputs as the rendered root declares and sets them.
func (in Inputs) Variables() []inputs.Variable {
	values := map[string]any{
		InputContract: Version,
		InputCluster:  map[string]any{"name": in.ClusterName, "namespace": in.Namespace},
		InputObject:   map[string]any{"kind": in.Kind, "name": in.Name, "namespace": in.Namespace},
		InputTags: map[string]any{
			TagCluster: in.ClusterName, TagNamespace: in.Namespace, TagKind: in.Kind, TagName: in.Name,
			TagManagedBy: "captf", TagTemplate: in.Template,
		},
	}
	clusterOutputs, err := decodeExports(in.ClusterOutputs)
	if err != nil {
		clusterOutputs = in.ClusterOutputs
	}
	switch in.Role {
	case RoleCluster:
		c := in.Cluster
		values[InputControlPlaneEndpoint] = nil
		if e := c.ControlPlaneEndpoint; e != nil {
			values[InputControlPlaneEndpoint] = map[string]any{"host": e.Host, "port": e.Port}
		}
		values[InputKubernetesVersion] = optional(c.KubernetesVersion)
		values[InputControlPlaneInitialized] = c.ControlPlaneInitialized
		values[InputClusterNetwork] = nil
		if n := c.Network; n != nil {
			values[InputClusterNetwork] = map[string]any{
				"pods": list(n.Pods), "services": list(n.Services),
				"service_domain": optional(n.ServiceDomain), "api_server_port": optionalInt(n.APIServerPort),
			}
		}
	case RoleMachine:
		m := in.Machine
		values[InputClusterOutputs] = clusterOutputs
		values[InputMachineName] = m.MachineName
		values[InputBootstrapData], values[InputBootstrapFormat] = bootstrapValues(m.Bootstrap)
		values[InputFailureDomain] = optional(m.FailureDomain)
		values[InputKubernetesVersion] = optional(m.KubernetesVersion)
		values[InputControlPlane] = m.ControlPlane
	case RoleMachinePool:
		p := in.Pool
		values[InputClusterOutputs] = clusterOutputs
		values[InputMachinePoolName] = p.MachinePoolName
		values[InputReplicas] = p.Replicas
		values[InputBootstrapData], values[InputBootstrapFormat] = bootstrapValues(p.Bootstrap)
		values[InputFailureDomains] = list(p.FailureDomains)
		clusterDomains := list(p.ClusterFailureDomains)
		sort.Strings(clusterDomains)
		values[InputClusterFailureDomains] = clusterDomains
		values[InputKubernetesVersion] = optional(p.KubernetesVersion)
		labels := map[string]string{}
		for k, v := range p.NodeLabels {
			labels[k] = v
		}
		values[InputNodeLabels] = labels
		values[InputAutoscaling] = map[string]any{"enabled": p.Autoscaling.Enabled, "min": p.Autoscaling.Min, "max": p.Autoscaling.Max}
	}
	var out []inputs.Variable
	for _, decl := range append(append([]input(nil), commonInputs...), roleInputs[in.Role]...) {
		v := inputs.Variable{Name: decl.name, Type: decl.typ, Nullable: decl.nullable, Sensitive: decl.sensitive, Value: values[decl.name]}
		if decl.name == InputBootstrapData {
			v.HashValue = tokenBlindBootstrap(in)
		}
		out = append(out, v)
	}
	return out
}

// bootstrapToken matches a kubeadm bootstrap token ("abcdef.0123456789abcdef").
var bootstrapToken = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)

// tokenBlindBootstrap is the bootstrap data as the inputs hash reads it: every bootstrap token
// replaced by a placeholder. Cluster API's kubeadm bootstrap provider rotates a MachinePool's
// join token by rewriting its bootstrap data; a pool is not applied again for that alone, and
// the next apply made for another reason carries the current token. The module always gets the
// data as written.
func tokenBlindBootstrap(in Inputs) any {
	var b Bootstrap
	switch in.Role {
	case RoleMachine:
		b = in.Machine.Bootstrap
	case RoleMachinePool:
		b = in.Pool.Bootstrap
	default:
		return nil
	}
	data, _ := bootstrapValues(Bootstrap{Data: bootstrapToken.ReplaceAll(b.Data, []byte("<bootstrap-token>")), Format: b.Format})
	return data
}

// decodeExports decodes a cluster's exports for rendering, numbers kept as written, so the
// rendered file (and the hash) is canonical; none is {}.
func decodeExports(raw json.RawMessage) (any, error) {
	var out any = map[string]any{}
	if len(raw) == 0 || isNull(raw) {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	err := dec.Decode(&out)
	return out, err
}

// CanonicalExports is a cluster's exports as a machine's or pool's variables file holds them.
func CanonicalExports(raw json.RawMessage) ([]byte, error) {
	value, err := decodeExports(raw)
	if err != nil {
		return nil, err
	}
	return jobs.CanonicalJSON(value)
}

func bootstrapValues(b Bootstrap) (data, format string) {
	format = b.Format
	if format == "" {
		format = DefaultBootstrapFormat
	}
	return base64.StdEncoding.EncodeToString(b.Data), format
}

// optional is a string input that may be null: nil and "" are null.
func optional(s *string) any {
	if s == nil || strings.TrimSpace(*s) == "" {
		return nil
	}
	return *s
}

func optionalInt(n *int32) any {
	if n == nil {
		return nil
	}
	return *n
}

// list is a list input: never null.
func list(items []string) []string {
	if items == nil {
		return []string{}
	}
	return append([]string(nil), items...)
}
