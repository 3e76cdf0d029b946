// Package contract is the module contract of Cluster API roles: the outputs a module of each
// role returns, decoded and validated against their rules. It is pure; the controller reads the
// outputs from the state and writes what decoded cleanly to the contract fields.
package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
)

// Role is the Cluster API role of a kind: what a module of it is given and must return.
type Role string

// The roles, one per kind that runs Jobs.
const (
	RoleCluster     Role = "cluster"
	RoleMachine     Role = "machine"
	RoleMachinePool Role = "machinepool"
)

// RoleOf returns the role of a kind: the kind table's name for it (infrav1.Kinds), so the
// kinds are listed in one place.
func RoleOf(kind infrav1.KindInfo) Role { return Role(kind.Name) }

// WorkspaceOutput is the one output of the rendered root: the module's outputs as an object.
const WorkspaceOutput = "workspace"

// Output names, as the module returns them.
const (
	OutputHealth               = "health"
	OutputControlPlaneEndpoint = "control_plane_endpoint"
	OutputFailureDomains       = "failure_domains"
	OutputExports              = "exports"
	OutputProviderID           = "provider_id"
	OutputAddresses            = "addresses"
	OutputFailureDomain        = "failure_domain"
	OutputInterruptible        = "interruptible"
	OutputProviderIDList       = "provider_id_list"
	OutputReplicas             = "replicas"
	OutputInstances            = "instances"
)

// RequiredOutputs are the outputs a module of the role returns, each present (null where the
// role's rules allow it). Outputs beyond these are ignored.
func RequiredOutputs(role Role) []string {
	switch role {
	case RoleCluster:
		return []string{OutputControlPlaneEndpoint, OutputExports, OutputFailureDomains, OutputHealth}
	case RoleMachine:
		return []string{OutputAddresses, OutputFailureDomain, OutputHealth, OutputInterruptible, OutputProviderID}
	case RoleMachinePool:
		return []string{OutputHealth, OutputInstances, OutputProviderID, OutputProviderIDList, OutputReplicas}
	}
	return nil
}

// Bounds of the outputs.
const (
	MaxHostLength           = 512
	MaxProviderIDLength     = 512
	MaxNameLength           = 256
	MaxAddressLength        = 256
	MaxFailureDomains       = 100
	MaxAddresses            = 256
	MaxProviderIDs          = 10000
	MaxInstances            = 1000
	MaxExportsStatusBytes   = 65536
	maxHealthMessageLength  = 1024
	maxHealthReasons        = 16
	maxHealthReasonLength   = 256
	maxFailureDomainAttrLen = 256
)

// Health states, a closed set.
const (
	HealthPending    = "pending"
	HealthRunning    = "running"
	HealthDegraded   = "degraded"
	HealthStopped    = "stopped"
	HealthTerminated = "terminated"
	HealthUnknown    = "unknown"
)

var healthStates = []string{HealthPending, HealthRunning, HealthDegraded, HealthStopped, HealthTerminated, HealthUnknown}

// Health is the module's reading of its infrastructure.
type Health struct {
	State   string
	Healthy bool
	Message string
	Reasons []string
}

// Endpoint is a control plane endpoint.
type Endpoint struct {
	Host string
	Port int32
}

// FailureDomain is one failure domain of a cluster.
type FailureDomain struct {
	Name         string
	ControlPlane bool
	Attributes   map[string]string
}

// Address is one address of a machine or instance.
type Address struct {
	Type    string
	Address string
}

// addressTypes are the address types in the order addresses are sorted.
var addressTypes = []string{"InternalIP", "InternalDNS", "ExternalIP", "ExternalDNS", "Hostname"}

// Instance is one member of a machine pool.
type Instance struct {
	ProviderID    string
	InstanceID    string
	Addresses     []Address
	FailureDomain string
	State         string
}

// Outputs are the decoded outputs of one role. A field is meaningful only when Decoded.Valid
// says its output decoded cleanly; a nil pointer is a null output.
type Outputs struct {
	// Health is nil when the output is null: the module cannot tell yet.
	Health *Health

	// Cluster.
	Endpoint       *Endpoint
	FailureDomains []FailureDomain
	// Exports is the exports output as compact JSON, {} for null.
	Exports json.RawMessage

	// Machine and pool. ProviderID is "" for null.
	ProviderID string
	// Machine.
	Addresses     []Address
	FailureDomain string
	Interruptible bool

	// Pool.
	ProviderIDList []string
	// Replicas is nil when the output is null: the desired capacity is not known yet.
	Replicas  *int32
	Instances []Instance
}

// Problem is what is wrong with one output. Its message names the output and the rule it
// breaks, never the value: outputs may be secret.
type Problem struct {
	Output  string
	Reason  string
	Message string
}

// Decoded is the result of decoding a role's outputs.
type Decoded struct {
	Outputs Outputs
	// Valid holds the outputs that decoded without a problem; only those are written back.
	Valid map[string]bool
	// Problems are the outputs that did not, with the reason each gives OutputsValid.
	Problems []Problem
	// InstancesTruncated is set when the pool returned more than MaxInstances instances.
	InstancesTruncated bool
}

// Expect is what the object already says, which some outputs must agree with.
type Expect struct {
	// ProviderID is the provider ID the object holds; a machine's must never change.
	ProviderID string
	// FailureDomain is the failure domain the owner Machine asked for, "" for none. A machine's
	// failure_domain output, when not null, must be it.
	FailureDomain string
}

// reasonOrder is the precedence of OutputsValid reasons, first wins.
var reasonOrder = []string{
	conditions.ReasonOutputsMissing,
	conditions.ReasonOutputsInvalid,
	conditions.ReasonFailureDomainMismatch,
	conditions.ReasonProviderIDChanged,
	conditions.ReasonOutputsPending,
}

// Condition returns the OutputsValid status, reason and message of the decoded outputs: the
// highest-precedence problem (False, or Unknown for pending outputs), else True, with
// InstancesTruncated when the pool's instances were cut.
func (d Decoded) Condition() (status metav1.ConditionStatus, reason, message string) {
	for _, r := range reasonOrder {
		var msgs []string
		for _, p := range d.Problems {
			if p.Reason == r {
				msgs = append(msgs, p.Message)
			}
		}
		if len(msgs) == 0 {
			continue
		}
		status = metav1.ConditionFalse
		if r == conditions.ReasonOutputsPending {
			status = metav1.ConditionUnknown
		}
		return status, r, strings.Join(msgs, "; ")
	}
	if d.InstancesTruncated {
		return metav1.ConditionTrue, conditions.ReasonInstancesTruncated, fmt.Sprintf("%s lists more than %d instances; the first %d are shown", OutputInstances, MaxInstances, MaxInstances)
	}
	return metav1.ConditionTrue, conditions.ReasonOutputsValid, "the module's outputs meet the contract"
}

// Decode decodes the workspace output of a state (nil when the state has none) for role.
func Decode(role Role, workspace json.RawMessage, expect Expect) Decoded {
	d := Decoded{Valid: map[string]bool{}}
	var values map[string]json.RawMessage
	if len(bytes.TrimSpace(workspace)) == 0 || string(bytes.TrimSpace(workspace)) == "null" {
		for _, name := range RequiredOutputs(role) {
			d.problem(name, conditions.ReasonOutputsMissing, "the state has no module outputs yet")
		}
		return d
	}
	if err := json.Unmarshal(workspace, &values); err != nil {
		d.problem(WorkspaceOutput, conditions.ReasonOutputsInvalid, "the module's outputs are not an object")
		return d
	}
	for _, name := range RequiredOutputs(role) {
		raw, ok := values[name]
		if !ok {
			d.problem(name, conditions.ReasonOutputsMissing, "the module does not return it")
			continue
		}
		if reason, msg := d.decode(role, name, raw, expect); reason != "" {
			d.problem(name, reason, msg)
			continue
		}
		d.Valid[name] = true
	}
	return d
}

func (d *Decoded) problem(output, reason, rule string) {
	d.Problems = append(d.Problems, Problem{Output: output, Reason: reason, Message: "output " + output + ": " + rule})
}

// decode decodes one output into d.Outputs; a non-empty reason says it did not decode cleanly.
func (d *Decoded) decode(role Role, name string, raw json.RawMessage, expect Expect) (reason, rule string) {
	decodeOne, ok := decoders[name]
	if !ok {
		return "", ""
	}
	return decodeOne(d, role, raw, expect)
}

// decoder decodes one output into d.Outputs and says why it did not decode cleanly.
type decoder func(d *Decoded, role Role, raw json.RawMessage, expect Expect) (reason, rule string)

func invalid(rule string) (string, string) { return conditions.ReasonOutputsInvalid, rule }
func pending(rule string) (string, string) { return conditions.ReasonOutputsPending, rule }

// decoders are the decoders of the outputs by name.
var decoders = map[string]decoder{
	OutputHealth: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		if isNull(raw) {
			return pending("null: the module cannot tell the infrastructure's health yet")
		}
		h, rule := decodeHealth(raw)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.Health = h
		return "", ""
	},
	OutputControlPlaneEndpoint: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		ep, rule := decodeEndpoint(raw)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.Endpoint = ep
		return "", ""
	},
	OutputFailureDomains: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		fds, rule := decodeFailureDomains(raw)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.FailureDomains = fds
		return "", ""
	},
	OutputExports: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		if isNull(raw) {
			d.Outputs.Exports = json.RawMessage("{}")
			return "", ""
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return invalid("must be JSON")
		}
		d.Outputs.Exports = buf.Bytes()
		return "", ""
	},
	OutputProviderID: func(d *Decoded, role Role, raw json.RawMessage, expect Expect) (string, string) {
		id, rule := decodeOptionalString(raw, MaxProviderIDLength)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.ProviderID = id
		switch {
		case role != RoleMachine:
			return "", "" // a pool's group ID is optional and may change
		case id == "":
			return pending("null: the machine has no provider ID yet")
		case expect.ProviderID != "" && id != expect.ProviderID:
			return conditions.ReasonProviderIDChanged, "differs from the provider ID already set, which never changes"
		}
		return "", ""
	},
	OutputAddresses: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		addrs, rule := decodeAddresses(raw)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.Addresses = addrs
		return "", ""
	},
	OutputFailureDomain: func(d *Decoded, _ Role, raw json.RawMessage, expect Expect) (string, string) {
		fd, rule := decodeOptionalString(raw, MaxNameLength)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.FailureDomain = fd
		// Null is no mismatch: a module need not report where it placed the machine.
		if fd != "" && expect.FailureDomain != "" && fd != expect.FailureDomain {
			return conditions.ReasonFailureDomainMismatch, "differs from the failure domain the Machine asked for"
		}
		return "", ""
	},
	OutputInterruptible: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		if isNull(raw) {
			return "", ""
		}
		if err := json.Unmarshal(raw, &d.Outputs.Interruptible); err != nil {
			return invalid("must be a boolean or null")
		}
		return "", ""
	},
	OutputProviderIDList: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		if isNull(raw) {
			return conditions.ReasonOutputsMissing, "null: the pool must list its members' provider IDs, [] for none"
		}
		ids, rule := decodeProviderIDList(raw)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.ProviderIDList = ids
		return "", ""
	},
	OutputReplicas: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		if isNull(raw) {
			return pending("null: the pool's desired capacity is not known yet")
		}
		n, rule := decodeCount(raw)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.Replicas = &n
		return "", ""
	},
	OutputInstances: func(d *Decoded, _ Role, raw json.RawMessage, _ Expect) (string, string) {
		if isNull(raw) {
			return conditions.ReasonOutputsMissing, "null: the pool must list its instances, [] for none"
		}
		inst, truncated, rule := decodeInstances(raw)
		if rule != "" {
			return invalid(rule)
		}
		d.Outputs.Instances, d.InstancesTruncated = inst, truncated
		return "", ""
	},
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// decodeOptionalString decodes a string or null; "" reads as null.
func decodeOptionalString(raw json.RawMessage, maxLen int) (string, string) {
	if isNull(raw) {
		return "", ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", "must be a string or null"
	}
	if len(s) > maxLen {
		return "", fmt.Sprintf("must be at most %d bytes", maxLen)
	}
	return s, ""
}

func decodeHealth(raw json.RawMessage) (*Health, string) {
	var h struct {
		State   *string          `json:"state"`
		Healthy json.RawMessage  `json:"healthy"`
		Message *string          `json:"message"`
		Reasons *json.RawMessage `json:"reasons"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, "must be an object {state, healthy, message, reasons}"
	}
	if h.State == nil || !slices.Contains(healthStates, *h.State) {
		return nil, "state must be one of " + strings.Join(healthStates, ", ")
	}
	out := &Health{State: *h.State}
	if err := json.Unmarshal(h.Healthy, &out.Healthy); err != nil || len(h.Healthy) == 0 || isNull(h.Healthy) {
		return nil, "healthy must be a boolean"
	}
	if h.Message != nil {
		out.Message = jobs.TruncateUTF8(*h.Message, maxHealthMessageLength)
	}
	if h.Reasons != nil && !isNull(*h.Reasons) {
		if err := json.Unmarshal(*h.Reasons, &out.Reasons); err != nil {
			return nil, "reasons must be a list of strings"
		}
		if len(out.Reasons) > maxHealthReasons {
			out.Reasons = out.Reasons[:maxHealthReasons]
		}
		for i, r := range out.Reasons {
			out.Reasons[i] = jobs.TruncateUTF8(r, maxHealthReasonLength)
		}
	}
	return out, ""
}

func decodeEndpoint(raw json.RawMessage) (*Endpoint, string) {
	if isNull(raw) {
		return nil, ""
	}
	var ep struct {
		Host *string      `json:"host"`
		Port *json.Number `json:"port"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&ep); err != nil {
		return nil, "must be an object {host, port} or null"
	}
	host := ""
	if ep.Host != nil {
		host = *ep.Host
	}
	var port int64
	if ep.Port != nil {
		p, err := ep.Port.Int64()
		if err != nil {
			return nil, "port must be an integer"
		}
		port = p
	}
	switch {
	case host == "" && port == 0:
		return nil, "" // {"", 0} is no endpoint
	case host == "" || port == 0:
		return nil, "host and port must be set together"
	case len(host) > MaxHostLength:
		return nil, fmt.Sprintf("host must be at most %d bytes", MaxHostLength)
	case port < 1 || port > 65535:
		return nil, "port must be between 1 and 65535"
	}
	return &Endpoint{Host: host, Port: int32(port)}, ""
}

func decodeFailureDomains(raw json.RawMessage) ([]FailureDomain, string) {
	if isNull(raw) {
		return nil, ""
	}
	var list []struct {
		Name         *string           `json:"name"`
		ControlPlane *bool             `json:"control_plane"`
		Attributes   map[string]string `json:"attributes"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, "must be a list of {name, control_plane, attributes} or null"
	}
	if len(list) > MaxFailureDomains {
		return nil, fmt.Sprintf("must hold at most %d failure domains", MaxFailureDomains)
	}
	seen := map[string]bool{}
	out := make([]FailureDomain, 0, len(list))
	for i, fd := range list {
		if fd.Name == nil || *fd.Name == "" || len(*fd.Name) > MaxNameLength {
			return nil, fmt.Sprintf("entry %d: name must be 1 to %d bytes", i, MaxNameLength)
		}
		if seen[*fd.Name] {
			return nil, fmt.Sprintf("entry %d: names must be unique", i)
		}
		seen[*fd.Name] = true
		for k, v := range fd.Attributes {
			if k == "" || len(k) > maxFailureDomainAttrLen || len(v) > maxFailureDomainAttrLen {
				return nil, fmt.Sprintf("entry %d: attribute names must be 1 to %d bytes and values at most %d", i, maxFailureDomainAttrLen, maxFailureDomainAttrLen)
			}
		}
		controlPlane := true
		if fd.ControlPlane != nil {
			controlPlane = *fd.ControlPlane
		}
		out = append(out, FailureDomain{Name: *fd.Name, ControlPlane: controlPlane, Attributes: fd.Attributes})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, ""
}

func decodeAddresses(raw json.RawMessage) ([]Address, string) {
	if isNull(raw) {
		return nil, ""
	}
	var list []struct {
		Type    string `json:"type"`
		Address string `json:"address"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, "must be a list of {type, address} or null"
	}
	seen := map[Address]bool{}
	var out []Address
	for i, a := range list {
		if !slices.Contains(addressTypes, a.Type) {
			return nil, fmt.Sprintf("entry %d: type must be one of %s", i, strings.Join(addressTypes, ", "))
		}
		if a.Address == "" || len(a.Address) > MaxAddressLength {
			return nil, fmt.Sprintf("entry %d: address must be 1 to %d bytes", i, MaxAddressLength)
		}
		addr := Address{Type: a.Type, Address: a.Address}
		if !seen[addr] {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	if len(out) > MaxAddresses {
		return nil, fmt.Sprintf("must hold at most %d distinct addresses", MaxAddresses)
	}
	SortAddresses(out)
	return out, ""
}

// SortAddresses sorts addresses by type (InternalIP, InternalDNS, ExternalIP, ExternalDNS,
// Hostname), then by address.
func SortAddresses(addrs []Address) {
	sort.Slice(addrs, func(i, j int) bool {
		ti, tj := slices.Index(addressTypes, addrs[i].Type), slices.Index(addressTypes, addrs[j].Type)
		if ti != tj {
			return ti < tj
		}
		return addrs[i].Address < addrs[j].Address
	})
}

func decodeProviderIDList(raw json.RawMessage) ([]string, string) {
	var ids []string
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, "must be a list of strings"
	}
	for i, id := range ids {
		if id == "" || len(id) > MaxProviderIDLength {
			return nil, fmt.Sprintf("entry %d: must be 1 to %d bytes", i, MaxProviderIDLength)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) > MaxProviderIDs {
		return nil, fmt.Sprintf("must hold at most %d distinct provider IDs", MaxProviderIDs)
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, ""
}

func decodeCount(raw json.RawMessage) (int32, string) {
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return 0, "must be a number"
	}
	v, err := n.Int64()
	if err != nil || v < 0 || v > math.MaxInt32 {
		return 0, "must be a whole number from 0 to 2147483647"
	}
	return int32(v), ""
}

func decodeInstances(raw json.RawMessage) ([]Instance, bool, string) {
	var list []struct {
		ProviderID    string          `json:"provider_id"`
		InstanceID    *string         `json:"instance_id"`
		Addresses     json.RawMessage `json:"addresses"`
		FailureDomain *string         `json:"failure_domain"`
		State         *string         `json:"state"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, false, "must be a list of {provider_id, instance_id, addresses, failure_domain, state}"
	}
	truncated := len(list) > MaxInstances
	if truncated {
		list = list[:MaxInstances]
	}
	out := make([]Instance, 0, len(list))
	for i, in := range list {
		if in.ProviderID == "" || len(in.ProviderID) > MaxProviderIDLength {
			return nil, false, fmt.Sprintf("entry %d: provider_id must be 1 to %d bytes", i, MaxProviderIDLength)
		}
		inst := Instance{ProviderID: in.ProviderID}
		if in.InstanceID != nil {
			if *in.InstanceID == "" || len(*in.InstanceID) > MaxNameLength {
				return nil, false, fmt.Sprintf("entry %d: instance_id must be 1 to %d bytes", i, MaxNameLength)
			}
			inst.InstanceID = *in.InstanceID
		}
		if len(in.Addresses) > 0 {
			addrs, rule := decodeAddresses(in.Addresses)
			if rule != "" {
				return nil, false, fmt.Sprintf("entry %d: addresses: %s", i, rule)
			}
			inst.Addresses = addrs
		}
		if in.FailureDomain != nil {
			if *in.FailureDomain == "" || len(*in.FailureDomain) > MaxNameLength {
				return nil, false, fmt.Sprintf("entry %d: failure_domain must be 1 to %d bytes", i, MaxNameLength)
			}
			inst.FailureDomain = *in.FailureDomain
		}
		if in.State != nil {
			if !slices.Contains(healthStates, *in.State) {
				return nil, false, fmt.Sprintf("entry %d: state must be one of %s", i, strings.Join(healthStates, ", "))
			}
			inst.State = *in.State
		}
		out = append(out, inst)
	}
	return out, truncated, ""
}
