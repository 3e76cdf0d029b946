package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// Owner lookup: what a run needs from Cluster API, read live from the object's owners. Cluster
// API creates the owner first and sets the owner reference after, so a missing one is a wait;
// an owner that does not name this object back is a mismatch, never trusted.

// EndpointSourceAnnotation records where a TerraformCluster's spec.controlPlaneEndpoint came
// from. With EndpointSourceModule the module made it, so its input stays null: the copy in the
// spec is no new input.
const (
	EndpointSourceAnnotation = "captf.io/endpoint-source"
	EndpointSourceModule     = "module"
)

// Dependencies are what the object's Cluster API owners say.
type Dependencies struct {
	// Status, Reason and Message are the DependenciesReady condition.
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	// Inputs are the contract inputs, complete only when Status is True.
	Inputs contract.Inputs
	// Sourced are the variables of spec.variablesFrom.
	Sourced []inputs.Sourced
	// AutoscalingProblem says why a pool's MachinePool autoscaler annotations cannot be used.
	AutoscalingProblem string
	// Machine is a machine's owner Machine and MachineFailureDomain its spec.failureDomain ("" for
	// none), known once the Machine names the object back, provisioned or not: the outputs are
	// checked against the failure domain for the machine's whole life.
	Machine              client.ObjectKey
	MachineFailureDomain string
}

// withMachine is d with the owner Machine's key and failure domain, which every return after
// the back-reference check carries, however far the lookup got.
func (d Dependencies) withMachine(m *clusterv1.Machine) Dependencies {
	d.Machine, d.MachineFailureDomain = client.ObjectKeyFromObject(m), m.Spec.FailureDomain
	return d
}

// Ready reports whether a run may start.
func (d Dependencies) Ready() bool { return d.Status == metav1.ConditionTrue }

func waiting(reason, format string, args ...any) Dependencies {
	return Dependencies{Status: metav1.ConditionUnknown, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func refused(reason, format string, args ...any) Dependencies {
	return Dependencies{Status: metav1.ConditionFalse, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ownerRef finds the owner reference of a Cluster API kind. others reports whether the object
// has owner references, but none of that kind (a control plane's clone, before the Machine).
func ownerRef(obj metav1.Object, kind string) (ref *metav1.OwnerReference, others bool) {
	for i, r := range obj.GetOwnerReferences() {
		if r.Kind != kind {
			continue
		}
		if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil && gv.Group == clusterv1.GroupVersion.Group {
			return &obj.GetOwnerReferences()[i], false
		}
	}
	return nil, len(obj.GetOwnerReferences()) > 0
}

// backReferenceProblem says why an owner does not own the object, "" when it does: its
// infrastructure reference names the object's group, kind and name, the owner reference's UID
// (if any) is the owner's, and the object's cluster-name label (if any) is the owner's cluster.
func backReferenceProblem(obj metav1.Object, kind string, ref *metav1.OwnerReference, owner metav1.Object, infraRef clusterv1.ContractVersionedObjectReference, refPath, clusterName string) string {
	switch {
	case infraRef.APIGroup != infrav1.GroupVersion.Group || infraRef.Kind != kind || infraRef.Name != obj.GetName():
		return fmt.Sprintf("%s of %s names %s %s/%s, not this object", refPath, owner.GetName(), infraRef.Kind, infraRef.APIGroup, infraRef.Name)
	case ref.UID != "" && ref.UID != owner.GetUID():
		return fmt.Sprintf("the owner reference's UID is not that of %s, which was made again", owner.GetName())
	}
	if label, ok := obj.GetLabels()[jobs.LabelClusterName]; ok && label != jobs.LabelValue(clusterName) {
		return fmt.Sprintf("the label %s=%s does not name the owner's cluster %s", jobs.LabelClusterName, label, clusterName)
	}
	return ""
}

// dependencies reads what a run of obj needs from Cluster API, live, and the contract inputs
// from it. durableVars is the variables file of the durable inputs, nil for none: a cluster's
// control_plane_initialized, once true, stays true from there.
func (r *Reconciler) dependencies(ctx context.Context, reader client.Reader, obj infrav1.Workspace, durableVars []byte) (Dependencies, error) {
	in := contract.Inputs{
		Role: contract.RoleOf(r.KindInfo), Namespace: obj.GetNamespace(), Kind: r.KindInfo.Kind, Name: obj.GetName(),
		Template: obj.GetAnnotations()[clusterv1.TemplateClonedFromNameAnnotation],
	}
	var deps Dependencies
	var err error
	switch o := obj.(type) {
	case *infrav1.TerraformCluster:
		deps, err = r.clusterDependencies(ctx, reader, o, in, durableVars)
	case *infrav1.TerraformMachine:
		deps, err = r.machineDependencies(ctx, reader, o, in)
	case *infrav1.TerraformMachinePool:
		deps, err = r.poolDependencies(ctx, reader, o, in)
	default:
		return Dependencies{}, fmt.Errorf("no owner lookup for %T", obj)
	}
	if err != nil || !deps.Ready() || !r.KindInfo.InputsMutable(obj) {
		// A provisioned machine runs its recorded inputs: its sources are not read again.
		return deps, err
	}
	sourced, problem, err := sourcedVariables(ctx, reader, obj, in.Role)
	if err != nil || problem.Status != "" {
		// A missing source is a wait for the run, not for the outputs' checks.
		problem.Machine, problem.MachineFailureDomain = deps.Machine, deps.MachineFailureDomain
		return problem, err
	}
	deps.Sourced = sourced
	return deps, nil
}

// getOwner reads the owner an owner reference names. found is false when it is gone, or Cluster
// API is not installed.
func getOwner(ctx context.Context, reader client.Reader, namespace string, ref *metav1.OwnerReference, into client.Object) (found bool, err error) {
	err = reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, into)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
}

func (r *Reconciler) clusterDependencies(ctx context.Context, reader client.Reader, obj *infrav1.TerraformCluster, in contract.Inputs, durableVars []byte) (Dependencies, error) {
	ref, _ := ownerRef(obj, "Cluster")
	if ref == nil {
		return waiting(conditions.ReasonWaitingForOwner, "waiting for Cluster API to make a Cluster the owner"), nil
	}
	var cluster clusterv1.Cluster
	if found, err := getOwner(ctx, reader, obj.Namespace, ref, &cluster); err != nil || !found {
		return refused(conditions.ReasonOwnerNotFound, "the owner Cluster %s does not exist", ref.Name), err
	}
	if problem := backReferenceProblem(obj, infrav1.ClusterKind.Kind, ref, &cluster, cluster.Spec.InfrastructureRef, "spec.infrastructureRef", cluster.Name); problem != "" {
		return refused(conditions.ReasonOwnerMismatch, "%s", problem), nil
	}
	in.ClusterName = cluster.Name
	c := &in.Cluster
	if obj.Annotations[EndpointSourceAnnotation] != EndpointSourceModule {
		switch ep := cluster.Spec.ControlPlaneEndpoint; {
		case ep.IsValid():
			c.ControlPlaneEndpoint = &contract.Endpoint{Host: ep.Host, Port: ep.Port}
		case obj.Spec.ControlPlaneEndpoint.Host != "" && obj.Spec.ControlPlaneEndpoint.Port != 0:
			c.ControlPlaneEndpoint = &contract.Endpoint{Host: obj.Spec.ControlPlaneEndpoint.Host, Port: obj.Spec.ControlPlaneEndpoint.Port}
		}
	}
	if v := cluster.Spec.Topology.Version; v != "" {
		c.KubernetesVersion = &v
	}
	initialized := cluster.Status.Initialization.ControlPlaneInitialized
	c.ControlPlaneInitialized = (initialized != nil && *initialized) || renderedTrue(durableVars, contract.InputControlPlaneInitialized)
	if n := cluster.Spec.ClusterNetwork; n.Pods.CIDRBlocks != nil || n.Services.CIDRBlocks != nil || n.ServiceDomain != "" || n.APIServerPort != 0 {
		c.Network = &contract.ClusterNetwork{Pods: n.Pods.CIDRBlocks, Services: n.Services.CIDRBlocks}
		if n.ServiceDomain != "" {
			c.Network.ServiceDomain = &n.ServiceDomain
		}
		if n.APIServerPort != 0 {
			c.Network.APIServerPort = &n.APIServerPort
		}
	}
	return Dependencies{Status: metav1.ConditionTrue, Reason: conditions.ReasonDependenciesReady, Message: "owned by Cluster " + cluster.Name, Inputs: in}, nil
}

// renderedTrue reports whether a rendered variables file sets name to true.
func renderedTrue(vars []byte, name string) bool {
	var values map[string]json.RawMessage
	return json.Unmarshal(vars, &values) == nil && string(values[name]) == "true"
}

func (r *Reconciler) machineDependencies(ctx context.Context, reader client.Reader, obj *infrav1.TerraformMachine, in contract.Inputs) (Dependencies, error) {
	ref, others := ownerRef(obj, "Machine")
	if ref == nil && others {
		return refused(conditions.ReasonWaitingForOwnerMachine, "owned, but not by a Machine: waiting for Cluster API to make one the owner"), nil
	}
	if ref == nil {
		return waiting(conditions.ReasonWaitingForOwner, "waiting for Cluster API to make a Machine the owner"), nil
	}
	var machine clusterv1.Machine
	if found, err := getOwner(ctx, reader, obj.Namespace, ref, &machine); err != nil || !found {
		return refused(conditions.ReasonOwnerNotFound, "the owner Machine %s does not exist", ref.Name), err
	}
	if problem := backReferenceProblem(obj, infrav1.MachineKind.Kind, ref, &machine, machine.Spec.InfrastructureRef, "spec.infrastructureRef", machine.Spec.ClusterName); problem != "" {
		return refused(conditions.ReasonOwnerMismatch, "%s", problem), nil
	}
	in.ClusterName = machine.Spec.ClusterName
	if obj.Status.IsProvisioned() {
		// A provisioned machine never renders its inputs again: it runs its durable ones.
		return Dependencies{Status: metav1.ConditionTrue, Reason: conditions.ReasonDependenciesReady, Message: "owned by Machine " + machine.Name, Inputs: in}.withMachine(&machine), nil
	}
	deps, err := r.clusterInfrastructure(ctx, reader, obj.Namespace, machine.Spec.ClusterName, &in)
	if err != nil || deps.Status != "" {
		return deps.withMachine(&machine), err
	}
	bootstrap, deps, err := bootstrapData(ctx, reader, obj.Namespace, machine.Spec.ClusterName, machine.Spec.Bootstrap, "Machine "+machine.Name)
	if err != nil || deps.Status != "" {
		return deps.withMachine(&machine), err
	}
	m := &in.Machine
	m.MachineName, m.Bootstrap = machine.Name, bootstrap
	if machine.Spec.FailureDomain != "" {
		m.FailureDomain = &machine.Spec.FailureDomain
	}
	if machine.Spec.Version != "" {
		m.KubernetesVersion = &machine.Spec.Version
	}
	_, m.ControlPlane = machine.Labels[clusterv1.MachineControlPlaneLabel]
	return Dependencies{Status: metav1.ConditionTrue, Reason: conditions.ReasonDependenciesReady, Message: "owned by Machine " + machine.Name, Inputs: in}.withMachine(&machine), nil
}

func (r *Reconciler) poolDependencies(ctx context.Context, reader client.Reader, obj *infrav1.TerraformMachinePool, in contract.Inputs) (Dependencies, error) {
	ref, others := ownerRef(obj, "MachinePool")
	if ref == nil && others {
		return refused(conditions.ReasonWaitingForOwnerMachinePool, "owned, but not by a MachinePool: waiting for Cluster API to make one the owner"), nil
	}
	if ref == nil {
		return waiting(conditions.ReasonWaitingForOwner, "waiting for Cluster API to make a MachinePool the owner"), nil
	}
	var pool clusterv1.MachinePool
	if found, err := getOwner(ctx, reader, obj.Namespace, ref, &pool); err != nil || !found {
		return refused(conditions.ReasonOwnerNotFound, "the owner MachinePool %s does not exist", ref.Name), err
	}
	if problem := backReferenceProblem(obj, infrav1.MachinePoolKind.Kind, ref, &pool, pool.Spec.Template.Spec.InfrastructureRef, "spec.template.spec.infrastructureRef", pool.Spec.ClusterName); problem != "" {
		return refused(conditions.ReasonOwnerMismatch, "%s", problem), nil
	}
	in.ClusterName = pool.Spec.ClusterName
	deps, err := r.clusterInfrastructure(ctx, reader, obj.Namespace, pool.Spec.ClusterName, &in)
	if err != nil || deps.Status != "" {
		return deps, err
	}
	bootstrap, deps, err := bootstrapData(ctx, reader, obj.Namespace, pool.Spec.ClusterName, pool.Spec.Template.Spec.Bootstrap, "MachinePool "+pool.Name)
	if err != nil || deps.Status != "" {
		return deps, err
	}
	p := &in.Pool
	p.MachinePoolName, p.Bootstrap, p.FailureDomains = pool.Name, bootstrap, pool.Spec.FailureDomains
	var autoscalingProblem string
	p.Autoscaling, autoscalingProblem = contract.AutoscalingOf(pool.Annotations)
	p.Replicas = contract.PoolReplicas(pool.Spec.Replicas, p.Autoscaling)
	if v := pool.Spec.Template.Spec.Version; v != "" {
		p.KubernetesVersion = &v
	}
	p.NodeLabels = pool.Spec.Template.Labels
	return Dependencies{Status: metav1.ConditionTrue, Reason: conditions.ReasonDependenciesReady, Message: "owned by MachinePool " + pool.Name,
		Inputs: in, AutoscalingProblem: autoscalingProblem}, nil
}

// clusterInfrastructure reads what a machine or pool needs of its cluster: the Cluster, its
// provisioned TerraformCluster, and that one's exports (and failure domains) from its state. A
// wait is returned as deps; an empty deps.Status means all is there, with in filled.
func (r *Reconciler) clusterInfrastructure(ctx context.Context, reader client.Reader, namespace, clusterName string, in *contract.Inputs) (deps Dependencies, err error) {
	var cluster clusterv1.Cluster
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: clusterName}, &cluster); {
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		return waiting(conditions.ReasonWaitingForOwner, "waiting for the Cluster %s", clusterName), nil
	case err != nil:
		return deps, fmt.Errorf("reading Cluster %s: %w", clusterName, err)
	}
	infraRef := cluster.Spec.InfrastructureRef
	if infraRef.Name != "" && (infraRef.APIGroup != infrav1.GroupVersion.Group || infraRef.Kind != infrav1.ClusterKind.Kind) {
		return refused(conditions.ReasonClusterNotTerraform, "the Cluster %s's infrastructure is a %s, not a %s", clusterName, infraRef.Kind, infrav1.ClusterKind.Kind), nil
	}
	if provisioned := cluster.Status.Initialization.InfrastructureProvisioned; infraRef.Name == "" || provisioned == nil || !*provisioned {
		return waiting(conditions.ReasonWaitingForClusterInfrastructure, "waiting for the Cluster %s's infrastructure to be provisioned", clusterName), nil
	}
	var tc infrav1.TerraformCluster
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: infraRef.Name}, &tc); {
	case apierrors.IsNotFound(err):
		return waiting(conditions.ReasonWaitingForClusterInfrastructure, "waiting for the TerraformCluster %s", infraRef.Name), nil
	case err != nil:
		return deps, fmt.Errorf("reading TerraformCluster %s: %w", infraRef.Name, err)
	}
	if externallyManaged(&tc) {
		// Someone else made the infrastructure: there are no exports, and the failure domains
		// are what its status says.
		in.ClusterOutputs = json.RawMessage("{}")
		for _, fd := range tc.Status.FailureDomains {
			in.Pool.ClusterFailureDomains = append(in.Pool.ClusterFailureDomains, fd.Name)
		}
		return Dependencies{}, nil
	}
	exports, domains, problem, err := clusterExports(ctx, reader, namespace, tc.Name, tc.Spec.StateEncryption)
	if err != nil {
		return deps, err
	}
	if problem != "" {
		return waiting(conditions.ReasonWaitingForClusterExports, "waiting for the TerraformCluster %s's exports: %s", tc.Name, problem), nil
	}
	in.ClusterOutputs, in.Pool.ClusterFailureDomains = exports, domains
	return Dependencies{}, nil
}

// clusterExports reads a TerraformCluster's exports and failure domain names from its state,
// never from its status, which holds only exports that are small enough. problem says why they
// cannot be had.
func clusterExports(ctx context.Context, reader client.Reader, namespace, name string, enc *infrav1.StateEncryption) (exports json.RawMessage, domains []string, problem string, err error) {
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: namespace, Name: state.SecretName(jobs.StateSecretSuffix(namespace, jobs.KindCluster, name))}
	switch err := reader.Get(ctx, key, &secret); {
	case apierrors.IsNotFound(err):
		return nil, nil, "it has no state yet", nil
	case err != nil:
		return nil, nil, "", fmt.Errorf("reading the state of TerraformCluster %s: %w", name, err)
	}
	keys, _, err := readStateKeys(ctx, reader, namespace, enc)
	if err != nil {
		return nil, nil, "", err
	}
	st, err := state.Read(ctx, reader, &secret, keys.keyring)
	if errors.Is(err, state.ErrPartsUnreadable) {
		return nil, nil, "", fmt.Errorf("reading the state of TerraformCluster %s: %w", name, err)
	}
	if err != nil || st.InputsHash == "" {
		return nil, nil, "its state is not applied or cannot be read", nil
	}
	d := contract.Decode(contract.RoleCluster, st.Outputs[contract.WorkspaceOutput], contract.Expect{})
	if !d.Valid[contract.OutputExports] {
		return nil, nil, "its exports output is missing or invalid", nil
	}
	if d.Valid[contract.OutputFailureDomains] {
		for _, fd := range d.Outputs.FailureDomains {
			domains = append(domains, fd.Name)
		}
	}
	return d.Outputs.Exports, domains, "", nil
}

// bootstrapData reads the bootstrap data Secret a Machine or MachinePool of the cluster
// clusterName names, if it may be used as such (bootstrapDataProblem). A wait or a refusal is
// returned as deps; an empty deps.Status means the data is there.
func bootstrapData(ctx context.Context, reader client.Reader, namespace, clusterName string, b clusterv1.Bootstrap, owner string) (contract.Bootstrap, Dependencies, error) {
	name := b.DataSecretName
	if name == nil || *name == "" {
		return contract.Bootstrap{}, waiting(conditions.ReasonWaitingForBootstrapData, "waiting for the bootstrap data of %s", owner), nil
	}
	var secret corev1.Secret
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: *name}, &secret); {
	case apierrors.IsNotFound(err):
		return contract.Bootstrap{}, waiting(conditions.ReasonWaitingForBootstrapData, "waiting for the bootstrap data Secret %s of %s", *name, owner), nil
	case err != nil:
		return contract.Bootstrap{}, Dependencies{}, fmt.Errorf("reading the bootstrap data Secret %s: %w", *name, err)
	}
	if problem := bootstrapDataProblem(&secret, clusterName, b.ConfigRef); problem != "" {
		return contract.Bootstrap{}, refused(conditions.ReasonBootstrapDataRefused, "the Secret %s is refused as the bootstrap data of %s: %s", *name, owner, problem), nil
	}
	if len(secret.Data["value"]) == 0 {
		return contract.Bootstrap{}, waiting(conditions.ReasonWaitingForBootstrapData, "the bootstrap data Secret %s of %s has no value yet", *name, owner), nil
	}
	return contract.Bootstrap{Data: secret.Data["value"], Format: string(secret.Data["format"])}, Dependencies{}, nil
}

// bootstrapDataProblem says why a Secret is not bootstrap data written for a Machine (or
// MachinePool) of the cluster clusterName whose bootstrap config is configRef, "" when it is.
// dataSecretName is only a name: whoever may write a Machine could name any Secret of the
// namespace, the cluster's kubeconfig among them, and the module would get it. Bootstrap data as
// Cluster API's contract has providers write it is of Cluster API's Secret type, carries the
// cluster-name label and is controlled by the bootstrap config. Data a person provides (no
// configRef) is not controlled by anything of Cluster API: such a Secret is another's, say a
// control plane's kubeconfig or another machine's bootstrap data. The kubeconfig the Cluster
// itself writes is not controlled by it, so it is refused by its name.
func bootstrapDataProblem(secret *corev1.Secret, clusterName string, configRef clusterv1.ContractVersionedObjectReference) string {
	switch {
	case secret.Type != clusterv1.ClusterSecretType:
		return fmt.Sprintf("its type is %q, not %s", secret.Type, clusterv1.ClusterSecretType)
	case secret.Labels[clusterv1.ClusterNameLabel] != clusterName:
		return fmt.Sprintf("its label %s is %q, not the cluster %s", clusterv1.ClusterNameLabel, secret.Labels[clusterv1.ClusterNameLabel], clusterName)
	case secret.Name == clusterName+kubeconfigSuffix:
		return "it is the cluster's kubeconfig"
	}
	controller := metav1.GetControllerOfNoCopy(secret)
	switch {
	case configRef.IsDefined() && (controller == nil || !refersTo(controller, configRef)):
		return fmt.Sprintf("it is not controlled by the bootstrap config %s %s", configRef.Kind, configRef.Name)
	case !configRef.IsDefined() && controller != nil && clusterAPIGroup(controller.APIVersion):
		return fmt.Sprintf("it is controlled by %s %s, and no bootstrap config is named", controller.Kind, controller.Name)
	}
	return ""
}

// warnBootstrapRefused records a warning when the bootstrap data Secret is first refused, or
// refused for another reason, before DependenciesReady says so.
func (p *pass) warnBootstrapRefused(d Dependencies) {
	if d.Reason != conditions.ReasonBootstrapDataRefused {
		return
	}
	if c := conditions.Get(p.status().Conditions, conditions.DependenciesReady); c != nil && c.Reason == d.Reason && c.Message == d.Message {
		return
	}
	p.event(nil, corev1.EventTypeWarning, EventBootstrapDataRefused, "%s; no Job starts", d.Message)
}

// kubeconfigSuffix ends the name of the kubeconfig Secret Cluster API writes for a cluster.
const kubeconfigSuffix = "-kubeconfig"

// clusterAPIGroup reports whether an API version is of Cluster API's groups or its providers'
// (cluster.x-k8s.io and its subdomains); one that does not parse counts as such, so is refused.
func clusterAPIGroup(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err != nil || gv.Group == clusterv1.GroupVersion.Group || strings.HasSuffix(gv.Group, "."+clusterv1.GroupVersion.Group)
}

// refersTo reports whether an owner reference names the object ref names.
func refersTo(owner *metav1.OwnerReference, ref clusterv1.ContractVersionedObjectReference) bool {
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	return err == nil && gv.Group == ref.APIGroup && owner.Kind == ref.Kind && owner.Name == ref.Name
}

// contractVariables are the contract inputs a ready object renders; nil otherwise.
func contractVariables(d Dependencies) []inputs.Variable {
	if !d.Ready() {
		return nil
	}
	return d.Inputs.Variables()
}
