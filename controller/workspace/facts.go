package workspace

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// Facts are what one decision is made from, read from the API server without changing
// anything. The controller acts on them; `kubectl captf why` only explains them, so both see the
// same decision.
type Facts struct {
	// Input is what decide.Decide takes.
	Input decide.Input
	// Rendered are the object's inputs; RenderErr says why they could not be rendered.
	Rendered  inputs.Rendered
	RenderErr error
	// StateSecret is the state Secret, nil when there is none or the state was remembered.
	StateSecret *corev1.Secret
	// RestoreProblem says why a captf.io/restore-state annotation names no usable backup.
	RestoreProblem string
	// Dependents describes the machines and pools a deleted cluster waits for, "" for none.
	Dependents string
	// Dependencies are what Cluster API provides for a run, and the contract inputs from it.
	Dependencies Dependencies
	// Credentials are what the object's identity lends its runs.
	Credentials Credentials
	// ExportsGuard is how a pool renders and guards its cluster's exports; ExportsHash the hash
	// of those it renders.
	ExportsGuard ExportsGuard
	ExportsHash  string

	// FromCache is set when something was not read live: the state came from the state memo,
	// the durable inputs' annotations from the metadata cache, or the owners from the
	// manager's cache. A pass reads live before it acts.
	FromCache bool
	// StateRemembered is set when the state came from the state memo, which holds only states
	// already backed up.
	StateRemembered bool
	// stateKey and stateVersion identify the state Secret read live, for the memo.
	stateKey     types.NamespacedName
	stateVersion string
	// durableRead is set when the durable inputs Secret was read live; durable is what the
	// read found, nil for none.
	durableRead bool
	durable     *corev1.Secret
	// Durable is the durable inputs Secret's metadata, live or cached; DurableExists says
	// whether one was found.
	Durable       metav1.ObjectMeta
	DurableExists bool
}

// GatherFacts reads what the decision needs about obj: its state, its durable inputs, a
// requested restore, and its rendered inputs, alongside its retained Jobs. Reads go to reader,
// which must not be a cache (Secrets are never cached).
func (r *Reconciler) GatherFacts(ctx context.Context, reader client.Reader, obj infrav1.Workspace, retained []batchv1.Job, now time.Time) (Facts, error) {
	return r.gatherFacts(ctx, reader, obj, retained, now, false)
}

// gatherFacts is GatherFacts; with useCache, a state Secret whose cached metadata shows the
// resourceVersion the memo read is not read again, the durable inputs' annotations come
// from the metadata cache, and the owners and identities from the manager's cache.
func (r *Reconciler) gatherFacts(ctx context.Context, reader client.Reader, obj infrav1.Workspace, retained []batchv1.Job, now time.Time, useCache bool) (Facts, error) {
	if !useCache {
		return r.gatherFactsFrom(ctx, reader, reader, obj, retained, now, false)
	}
	owners := ownersCached{cache: r.Client, live: reader, used: new(bool)}
	f, err := r.gatherFactsFrom(ctx, reader, owners, obj, retained, now, true)
	f.FromCache = f.FromCache || *owners.used
	return f, err
}

// gatherFactsFrom is gatherFacts reading the owners and identities through owners.
func (r *Reconciler) gatherFactsFrom(ctx context.Context, reader, owners client.Reader, obj infrav1.Workspace, retained []batchv1.Job, now time.Time, useCache bool) (Facts, error) {
	var f Facts
	ns, suffix := obj.GetNamespace(), jobs.StateSecretSuffix(obj.GetNamespace(), r.Kind, obj.GetName())
	f.stateKey = types.NamespacedName{Namespace: ns, Name: state.SecretName(suffix)}
	st, stateErr, err := r.readState(ctx, reader, &f, useCache, obj.WorkspaceSpec().StateEncryption)
	if err != nil {
		return f, err
	}
	if err := r.readDurable(ctx, reader, &f, client.ObjectKey{Namespace: ns, Name: jobs.InputsSecretName(r.Kind, obj.GetName())}, useCache); err != nil {
		return f, err
	}
	if stateErr == nil {
		stateErr = stateMismatch(obj, st, f.Durable.Annotations[jobs.AnnotationApplied] == "true")
	}
	obj = withProvisioningRebuilt(r.KindInfo, obj, st, stateErr)
	restore, problem, err := restoreRequest(ctx, reader, obj, suffix)
	if err != nil {
		return f, err
	}
	f.RestoreProblem = problem

	spec := obj.WorkspaceSpec()
	var variables []byte
	if spec.Variables != nil {
		variables = spec.Variables.Raw
	}
	var durableVars []byte
	if f.durable != nil {
		durableVars = f.durable.Data[inputs.VarsFile]
	}
	if f.Dependencies, err = r.dependencies(ctx, owners, obj, durableVars); err != nil {
		return f, err
	}
	if f.Credentials, err = r.credentials(ctx, owners, obj, f.Durable.Annotations); err != nil {
		return f, err
	}
	if r.Kind == jobs.KindMachinePool && f.Dependencies.Ready() {
		durable := f.durable
		if !f.durableRead && f.DurableExists {
			// From the cache: the records are there, the held exports are not; a held pool
			// reads as guarded, a decision to run is then made again from a live read.
			durable = &corev1.Secret{ObjectMeta: f.Durable}
		}
		f.ExportsGuard, f.ExportsHash = guardExports(obj, durable, &f.Dependencies)
	}
	f.Rendered, f.RenderErr = inputs.Render(spec.Source.Image, contractVariables(f.Dependencies), variables, f.Dependencies.Sourced, field.NewPath("spec", "variables"))
	f.Input = r.decideInput(obj, f, st, stateErr, retained, restore, now)
	if f.Input.Deleting && r.Kind == jobs.KindCluster {
		found, err := dependents(ctx, reader, obj)
		if err != nil {
			return f, err
		}
		f.Dependents, f.Input.Dependents = dependentsMessage(found)
	}
	return f, nil
}

// stateMismatch says why a state read without error is not the one the object's history
// allows: a missing state after a successful apply is lost, not new (the applied marker outlives
// the state), and a state in the clear where the controller read an encrypted one was written
// without the key.
func stateMismatch(obj infrav1.Workspace, st state.State, applied bool) error {
	switch {
	case !st.Exists && applied:
		return state.ErrLost
	case st.Exists && st.KeyID == "" && obj.WorkspaceSpec().StateEncryption != nil && obj.WorkspaceStatus().StateKeyID != "":
		return state.ErrNotEncrypted
	}
	return nil
}

// readState reads the state into f: from the memo when useCache and the cached metadata shows
// the resourceVersion the memo read, otherwise live. stateErr says why a state that exists
// cannot be used; err is a failed read.
func (r *Reconciler) readState(ctx context.Context, reader client.Reader, f *Facts, useCache bool, enc *infrav1.StateEncryption) (st state.State, stateErr, err error) {
	var cached *metav1.PartialObjectMetadata
	if useCache {
		if m, found, err := cachedMetadata(ctx, r.Metadata, secretGVK, f.stateKey); err == nil && found {
			if e, ok := r.states.lookup(f.stateKey, m); ok {
				f.FromCache, f.StateRemembered = true, true
				return e.state, e.err, nil
			}
			cached = m
		}
	}
	var stateSecret corev1.Secret
	err = reader.Get(ctx, f.stateKey, &stateSecret)
	switch {
	case err == nil:
		f.StateSecret, f.stateVersion = &stateSecret, stateSecret.ResourceVersion
		if cached != nil && cached.ResourceVersion == stateSecret.ResourceVersion {
			// The memo then keeps the metadata cache's strings, not copies of its own.
			f.stateKey, f.stateVersion = types.NamespacedName{Namespace: cached.Namespace, Name: cached.Name}, cached.ResourceVersion
		}
		// Keys that cannot be used decrypt nothing: an encrypted state then reads as
		// StateEncrypted, and a Job waits on StateKeysNotFound.
		keys, _, err := readStateKeys(ctx, reader, stateSecret.Namespace, enc)
		if err != nil {
			return st, nil, err
		}
		st, stateErr = state.Read(ctx, reader, &stateSecret, keys.keyring)
		if errors.Is(stateErr, state.ErrPartsUnreadable) {
			return state.State{}, nil, fmt.Errorf("reading the state: %w", stateErr)
		}
		return st, stateErr, nil
	case apierrors.IsNotFound(err):
		return st, nil, nil
	default:
		return st, nil, fmt.Errorf("reading the state Secret: %w", err)
	}
}

// readDurable reads the durable inputs Secret into f: its metadata from the cache when
// useCache, otherwise the Secret live.
func (r *Reconciler) readDurable(ctx context.Context, reader client.Reader, f *Facts, key client.ObjectKey, useCache bool) error {
	if useCache && r.Metadata != nil {
		// Only its annotations count. Every durable inputs Secret carries the managed label, so
		// the metadata cache has it, or it does not exist yet, or its event is on the way and
		// brings another pass.
		m, found, err := cachedMetadata(ctx, r.Metadata, secretGVK, key)
		if err != nil {
			return fmt.Errorf("reading the durable inputs Secret from the cache: %w", err)
		}
		if found {
			f.Durable, f.DurableExists = m.ObjectMeta, true
		}
		f.FromCache = true
		return nil
	}
	var secret corev1.Secret
	switch err := reader.Get(ctx, key, &secret); {
	case err == nil:
		f.durable, f.DurableExists = &secret, true
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the durable inputs Secret: %w", err)
	}
	f.Durable, f.durableRead = secret.ObjectMeta, true
	return nil
}

// decideInput assembles what decide.Decide takes from the object and the facts read about it.
func (r *Reconciler) decideInput(obj infrav1.Workspace, f Facts, st state.State, stateErr error, retained []batchv1.Job, restore *decide.Restore, now time.Time) decide.Input {
	spec, status := obj.WorkspaceSpec(), obj.WorkspaceStatus()
	approvals := jobs.ApprovalsOf(obj.GetAnnotations())
	in := decide.Input{
		Kind:              r.Kind,
		UID:               obj.GetUID(),
		CreatedAt:         obj.GetCreationTimestamp().Time,
		Deleting:          !obj.GetDeletionTimestamp().IsZero(),
		Abandoned:         abandoned(obj),
		Mutable:           r.KindInfo.InputsMutable(obj),
		State:             st,
		StateErr:          stateErr,
		Jobs:              retained,
		Limits:            jobs.LimitsOf(spec.Jobs),
		Drift:             r.KindInfo.DriftPolicy(obj),
		LastDriftCheck:    lastSuccess(retained, jobs.OpDrift, status.LastDriftCheck),
		LastRefresh:       lastSuccess(retained, jobs.OpRefresh, status.LastRefresh),
		Now:               now,
		CurrentInputsHash: f.Rendered.Hash,
		InterruptedApply:  f.Durable.Annotations[jobs.AnnotationInterruptedApply],
		ApprovedPlan:      approvals.Plan,
		// The guard is always on for a cluster's applies under Automatic, and for a pool's that
		// carry a change of its cluster's exports.
		Guarded:             r.Kind == jobs.KindCluster || f.ExportsGuard == ExportsGuarded,
		ApprovedDestructive: approvals.DestructivePlan,
		Restore:             restore,
	}
	if pool, ok := obj.(*infrav1.TerraformMachinePool); ok {
		in.MembershipRefresh, in.MembershipConverging = membershipSchedule(pool)
	}
	if m, ok := obj.(*infrav1.TerraformMachine); ok {
		in.HealthCheck = healthCheckInterval(m)
	}
	if planned, ok := obj.(infrav1.Planned); ok && planned.ManualApply() {
		in.Manual, in.Guarded = true, false
		in.Replan = obj.GetAnnotations()[jobs.AnnotationReplan]
		if plan := *planned.PlanPreview(); plan != nil {
			in.Plan = &decide.Plan{InputsHash: plan.InputsHash, PlanHash: plan.PlanHash}
		}
	}
	if f.RenderErr != nil {
		in.CurrentInputsHash = ""
	}
	if !f.Dependencies.Ready() {
		in.Dependencies = f.Dependencies.Reason
	}
	if !f.Credentials.Allowed() {
		in.IdentityNotAllowed = f.Credentials.Reason
	}
	return in
}

// membershipSchedule is how often a pool's members are refreshed, and whether they are
// converging: the provider IDs and the replicas disagree, or the module says its health is
// pending.
func membershipSchedule(pool *infrav1.TerraformMachinePool) (time.Duration, bool) {
	every := decide.DefaultMembershipRefresh
	if s := pool.Spec.MembershipRefreshIntervalSeconds; s != nil {
		every = time.Duration(*s) * time.Second
	}
	pending := conditions.Get(pool.Status.Conditions, conditions.InfrastructureHealthy)
	converging := pool.Status.Replicas == nil || int(*pool.Status.Replicas) != len(pool.Spec.ProviderIDList) ||
		(pending != nil && pending.Reason == conditions.ReasonInstancePending)
	return every, converging
}

// healthCheckInterval is how often a provisioned machine that may ask for its replacement has
// its health read again; 0 for one that may not.
func healthCheckInterval(m *infrav1.TerraformMachine) time.Duration {
	r := m.Spec.Remediation
	if !r.AnnotateMachine || !m.Status.IsProvisioned() {
		return 0
	}
	if r.HealthCheckIntervalSeconds != nil {
		return time.Duration(*r.HealthCheckIntervalSeconds) * time.Second
	}
	return defaultHealthCheckInterval
}

// restoreRequest reads captf.io/restore-state: the serial of a backup to push back. A bad
// serial or a missing backup is no request, with the problem in words.
func restoreRequest(ctx context.Context, reader client.Reader, obj client.Object, suffix string) (*decide.Restore, string, error) {
	serialText, ok := obj.GetAnnotations()[jobs.AnnotationRestoreState]
	if !ok {
		return nil, "", nil
	}
	serial, err := strconv.ParseInt(serialText, 10, 64)
	if err != nil || serial < 1 {
		return nil, fmt.Sprintf("%s=%q is not a state serial (a positive whole number)", jobs.AnnotationRestoreState, serialText), nil
	}
	name := BackupName(suffix, serial)
	var backup corev1.Secret
	err = reader.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, &backup)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf(restoreReasonBackupMissing, serialText, name+" does not exist"), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading state backup %s: %w", name, err)
	}
	problem, chunks, err := backupProblem(ctx, reader, &backup, obj, suffix)
	if err != nil {
		return nil, "", err
	}
	if problem != "" {
		return nil, fmt.Sprintf(restoreReasonBackupMissing, serialText, problem), nil
	}
	resources, _ := strconv.Atoi(backup.Annotations[AnnotationBackupResources])
	return &decide.Restore{Serial: serialText, BackupName: name, InputsHash: backup.Annotations[state.InputsHashAnnotation], Resources: resources, Chunks: chunks}, "", nil
}

// ownersCached reads the kinds the manager watches anyway — Cluster API's Clusters, Machines
// and MachinePools, TerraformClusters and identities — from its cache, and everything else
// (Secrets, ConfigMaps, Namespaces) live. Lists stay live: a deletion never waits on a stale one.
type ownersCached struct {
	cache, live client.Reader
	// used is set once the cache served a read.
	used *bool
}

// Get implements client.Reader.
func (o ownersCached) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch obj.(type) {
	case *clusterv1.Cluster, *clusterv1.Machine, *clusterv1.MachinePool, *infrav1.TerraformCluster, *infrav1.TerraformClusterIdentity:
		*o.used = true
		return o.cache.Get(ctx, key, obj, opts...)
	}
	return o.live.Get(ctx, key, obj, opts...)
}

// List implements client.Reader.
func (o ownersCached) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return o.live.List(ctx, list, opts...)
}
