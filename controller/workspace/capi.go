package workspace

import (
	"context"
	"fmt"
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// What Cluster API and clusterctl read and write on the objects. The Cluster is read with Cluster
// API's own Go types; without Cluster API installed, or without the Cluster, nothing is paused.

// BlockMoveAnnotation makes `clusterctl move` wait: the object carries it while one of its Jobs
// may run.
const BlockMoveAnnotation = "clusterctl.cluster.x-k8s.io/block-move"

// AbandonAnnotation lets a deletion go without a destroy when it holds the object's UID: the
// infrastructure is left as it is and forgotten. Another value is ignored, so the annotation
// cannot be copied onto another object by accident.
const AbandonAnnotation = "captf.io/abandon-infrastructure"

// Pause says whether an object is paused, and why.
type Pause struct {
	Paused bool
	// Why names what pauses it: the object's annotation or its Cluster's spec.paused.
	Why string
}

// PauseOf reads whether obj or its Cluster API Cluster (named by its cluster-name label) is
// paused. Before a Job starts, reader must read live: a pause must stop the next Job, not one a
// cache lags behind.
func PauseOf(ctx context.Context, reader client.Reader, obj client.Object) (Pause, error) {
	if _, ok := obj.GetAnnotations()[clusterv1.PausedAnnotation]; ok {
		return Pause{Paused: true, Why: "the object has the annotation " + clusterv1.PausedAnnotation}, nil
	}
	name := obj.GetLabels()[jobs.LabelClusterName]
	if name == "" {
		return Pause{}, nil
	}
	var cluster clusterv1.Cluster
	err := reader.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, &cluster)
	switch {
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		return Pause{}, nil
	case err != nil:
		return Pause{}, fmt.Errorf("reading Cluster %s: %w", name, err)
	case cluster.Spec.Paused != nil && *cluster.Spec.Paused:
		return Pause{Paused: true, Why: "Cluster " + name + " has spec.paused"}, nil
	}
	return Pause{}, nil
}

// abandoned reports whether the object's infrastructure was abandoned: the annotation holds its
// UID.
func abandoned(obj client.Object) bool {
	v, ok := obj.GetAnnotations()[AbandonAnnotation]
	return ok && v != "" && v == string(obj.GetUID())
}

// dependents lists, by kind, the machines and pools of a TerraformCluster: the objects in its
// namespace with its cluster-name label (read live, so a deletion never waits on a stale list).
func dependents(ctx context.Context, reader client.Reader, obj client.Object) (map[string][]string, error) {
	cluster := obj.GetLabels()[jobs.LabelClusterName]
	if cluster == "" {
		return nil, nil
	}
	found := map[string][]string{}
	for _, kind := range []infrav1.KindInfo{infrav1.MachineKind, infrav1.MachinePoolKind} {
		list := kind.NewList()
		if err := reader.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{jobs.LabelClusterName: cluster}); err != nil {
			return nil, fmt.Errorf("listing the cluster's %ss: %w", kind.Kind, err)
		}
		items, err := apimeta.ExtractList(list)
		if err != nil {
			return nil, fmt.Errorf("reading the list of %ss: %w", kind.Kind, err)
		}
		for _, item := range items {
			if o, ok := item.(client.Object); ok {
				found[kind.Kind] = append(found[kind.Kind], o.GetName())
			}
		}
	}
	return found, nil
}

// maxDependentNames is how many names of each kind a DependentsExist message lists.
const maxDependentNames = 3

// dependentsMessage describes the dependents a deletion waits for, e.g. "2 TerraformMachine(s)
// (a, b)", at most maxDependentNames names of each kind, sorted.
func dependentsMessage(found map[string][]string) (string, int) {
	var parts []string
	total := 0
	for _, kind := range []string{infrav1.MachineKind.Kind, infrav1.MachinePoolKind.Kind} {
		names := append([]string(nil), found[kind]...)
		if len(names) == 0 {
			continue
		}
		total += len(names)
		sort.Strings(names)
		shown := names[:min(len(names), maxDependentNames)]
		list := strings.Join(shown, ", ")
		if more := len(names) - len(shown); more > 0 {
			list += fmt.Sprintf(" and %d more", more)
		}
		parts = append(parts, fmt.Sprintf("%d %s(s) (%s)", len(names), kind, list))
	}
	return strings.Join(parts, " and "), total
}

// externallyManaged reports whether Cluster API's managed-by annotation hands the object to
// someone else: captf then provisions nothing and writes nothing on it.
func externallyManaged(obj client.Object) bool {
	_, ok := obj.GetAnnotations()[clusterv1.ManagedByAnnotation]
	return ok
}

// releaseExternallyManaged lets a deleted, externally managed object go: once none of its Jobs
// runs, its state, backups and durable inputs lose their owner reference to it (so the garbage
// collector keeps them for whoever manages the infrastructure), its state lock and run Lease go,
// and the finalizer is dropped, with no destroy.
func (r *Reconciler) releaseExternallyManaged(ctx context.Context, obj infrav1.Workspace) (ctrl.Result, error) {
	finalizer := r.KindInfo.Finalizer()
	if obj.GetDeletionTimestamp().IsZero() || !controllerutil.ContainsFinalizer(obj, finalizer) {
		return ctrl.Result{}, nil
	}
	own, err := r.ownJobs(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	if jobs.ActiveJob(own) != nil {
		return ctrl.Result{RequeueAfter: decide.JobActiveRequeue}, nil
	}
	ns := obj.GetNamespace()
	suffix := jobs.StateSecretSuffix(ns, r.Kind, obj.GetName())
	keep := []client.ObjectKey{
		{Namespace: ns, Name: state.SecretName(suffix)},
		{Namespace: ns, Name: jobs.InputsSecretName(r.Kind, obj.GetName())},
	}
	var backups corev1.SecretList
	if err := r.APIReader.List(ctx, &backups, client.InNamespace(ns), client.MatchingLabels{LabelStateBackup: "true", LabelStateBackupSuffix: suffix}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing state backups: %w", err)
	}
	for _, b := range backups.Items {
		keep = append(keep, client.ObjectKeyFromObject(&b))
	}
	var chunks corev1.SecretList
	if err := r.APIReader.List(ctx, &chunks, client.InNamespace(ns), client.MatchingLabels{LabelStateBackupPart: "true", LabelStateBackupSuffix: suffix}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing state backup chunks: %w", err)
	}
	for _, b := range chunks.Items {
		keep = append(keep, client.ObjectKeyFromObject(&b))
	}
	for _, key := range keep {
		if err := r.disown(ctx, key, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	for _, lease := range []string{state.LockLeaseName(suffix), jobs.RunLeaseName(suffix)} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease}}
		if err := r.Client.Delete(ctx, l); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("deleting Lease %s: %w", lease, err)
		}
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(obj, finalizer)
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("released an externally managed object without a destroy; its state and inputs are kept")
	r.newPass(obj).event(nil, corev1.EventTypeNormal, EventExternallyManagedReleased, "Released without a destroy: %s hands the object to another manager; its state, backups and inputs are kept", clusterv1.ManagedByAnnotation)
	return ctrl.Result{}, nil
}

// disown removes obj's owner references from the Secret key names, if it exists.
func (r *Reconciler) disown(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	var s corev1.Secret
	if err := r.APIReader.Get(ctx, key, &s); err != nil {
		return client.IgnoreNotFound(err)
	}
	refs := s.OwnerReferences[:0:0]
	for _, ref := range s.OwnerReferences {
		if ref.UID != obj.GetUID() {
			refs = append(refs, ref)
		}
	}
	if len(refs) == len(s.OwnerReferences) {
		return nil
	}
	patch := client.MergeFrom(s.DeepCopy())
	s.OwnerReferences = refs
	if err := r.Client.Patch(ctx, &s, patch); err != nil {
		return fmt.Errorf("keeping Secret %s for its next manager: %w", key.Name, err)
	}
	return nil
}
