package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

func newUnlockCommand(o *Options) *cobra.Command {
	var kind string
	var yes bool
	cmd := &cobra.Command{
		Use:   "unlock TARGET",
		Short: "Release a stale OpenTofu state lock of a captf object, after showing who holds it",
		Long: "Read the state lock of the TerraformCluster, TerraformMachine or TerraformMachinePool named\n" +
			"TARGET (OpenTofu's kubernetes backend keeps it on the Lease lock-tfstate-default-<suffix>:\n" +
			"the lock ID as holder, the details in " + workspace.LockInfoAnnotation + "), show its ID,\n" +
			"operation, holder and age, and judge it by the controller's own stale-lock rule: a lock\n" +
			"left by a pod of the object's Jobs that is gone or finished is stale. A lock whose holder's\n" +
			"pod still runs is never released. Any other holder (a workstation, unreadable details) is\n" +
			"released only if you confirm that it is dead. Asks for confirmation unless --yes, then\n" +
			"releases the lock as the backend unlocks (holder and details removed) by an update that\n" +
			"applies only to the Lease as read, so a lock taken again meanwhile is left alone.\n\n" +
			"Rights needed: get on terraformclusters, terraformmachines and terraformmachinepools\n" +
			"(infrastructure.cluster.x-k8s.io), get and update on leases (coordination.k8s.io) and get on\n" +
			"pods, granted by ClusterRole " + RoleStateUnlocker + ", which no other role aggregates: it may\n" +
			"update every Lease of the namespace, so an administrator binds it to the few who may break a lock.",
		Example: "  # Show who holds the state lock of the TerraformCluster web and release it after confirmation\n" +
			"  kubectl captf unlock web\n\n" +
			"  # Release it without asking\n" +
			"  kubectl captf unlock web --yes",
		Args:              cobra.ExactArgs(1),
		GroupID:           GroupOperate,
		Annotations:       map[string]string{RoleAnnotation: RoleStateUnlocker},
		ValidArgsFunction: CompleteTargets(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.unlock(cmd.Context(), args[0], kind, yes)
		},
	}
	addKindFlag(cmd, &kind)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Release without asking.")
	return cmd
}

// unlock shows the state lock of the object named name, refuses while its holder's pod runs,
// asks unless yes, and releases it.
func (o *Options) unlock(ctx context.Context, name, kind string, yes bool) error {
	c, t, err := o.lookupTarget(ctx, name, kind)
	if err != nil {
		return err
	}
	held, err := o.readLock(ctx, c, t)
	if err != nil || held == nil {
		return err
	}
	o.printLock(t, held)
	if !workspace.PodDone(held.pod) {
		return fmt.Errorf("the lock of %s is in use: its holder's pod %s still runs (phase %s%s); wait for it to end, or delete that pod",
			t, Printable(held.pod.Name), Printable(string(held.pod.Status.Phase)), deleting(held.pod))
	}
	objKind := jobs.Kind(t.Kind.Kind)
	var ownPod *corev1.Pod
	if held.lock.OwnPod(objKind, name) != "" {
		ownPod = held.pod
	}
	if verdict := workspace.JudgeStateLock(held.lock, objKind, name, ownPod); verdict.StaleID != "" {
		fmt.Fprintf(o.Out, "Stale:     yes: a pod of this object's Jobs took it and is gone or finished (the controller would also release it before the next run)\n")
	} else {
		fmt.Fprintf(o.Out, "Stale:     unknown: %s; release it only if you know that holder is dead\n", Printable(verdict.HeldBy))
	}
	if !yes {
		ok, err := confirm(o.In, o.Out, fmt.Sprintf("\nRelease the state lock of %s? [y/N]: ", t))
		if err != nil {
			return err
		}
		if !ok {
			_, err := fmt.Fprintln(o.Out, "Not released: nothing was written.")
			return err
		}
	}
	return o.release(ctx, c, t, held)
}

// heldLock is a held state lock as read: its Lease, the lock, and the pod the holder's host
// names in the namespace (nil when there is none).
type heldLock struct {
	lease *coordinationv1.Lease
	lock  workspace.StateLock
	pod   *corev1.Pod
}

// readLock reads the object's state lock and the pod its holder names; nil, after saying so,
// when the state is not locked.
func (o *Options) readLock(ctx context.Context, c client.Client, t target) (*heldLock, error) {
	ns := t.Obj.GetNamespace()
	leaseName := state.LockLeaseName(jobs.StateSecretSuffix(ns, jobs.Kind(t.Kind.Kind), t.Obj.GetName()))
	var lease coordinationv1.Lease
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, &lease); {
	case apierrors.IsNotFound(err):
		_, err := fmt.Fprintf(o.Out, "The state of %s is not locked: it has no lock Lease %s yet.\n", t, leaseName)
		return nil, err
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("reading the lock Lease %s: %w (bind ClusterRole %s for get on leases)", leaseName, err, RoleStateUnlocker)
	case err != nil:
		return nil, fmt.Errorf("reading the lock Lease %s: %w", leaseName, err)
	}
	lock, locked := workspace.ReadStateLock(&lease)
	if !locked {
		_, err := fmt.Fprintf(o.Out, "The state of %s is not locked (Lease %s has no holder).\n", t, leaseName)
		return nil, err
	}
	held := &heldLock{lease: &lease, lock: lock}
	// The pod the holder names, when it names one: whose ever it is, a pod that still runs may
	// still use the state.
	host := lock.Host()
	if host == "" || len(validation.IsDNS1123Subdomain(host)) > 0 {
		return held, nil
	}
	var pod corev1.Pod
	switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: host}, &pod); {
	case err == nil:
		held.pod = &pod
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("reading pod %s, which the lock holder names: %w (bind ClusterRole %s for get on pods)", host, err, RoleStateUnlocker)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading pod %s, which the lock holder names: %w", host, err)
	}
	return held, nil
}

// release unlocks as the backend does: no holder, no details. Update carries the
// resourceVersion read, so it fails rather than release a lock someone took since.
func (o *Options) release(ctx context.Context, c client.Client, t target, held *heldLock) error {
	lease := held.lease
	lease.Spec.HolderIdentity = nil
	delete(lease.Annotations, workspace.LockInfoAnnotation)
	switch err := c.Update(ctx, lease); {
	case apierrors.IsConflict(err):
		return fmt.Errorf("the lock Lease %s changed since it was read: nothing was released; run `kubectl captf unlock %s` again to see its holder now", lease.Name, t.Obj.GetName())
	case apierrors.IsForbidden(err):
		return fmt.Errorf("releasing the lock Lease %s: %w (bind ClusterRole %s for update on leases)", lease.Name, err, RoleStateUnlocker)
	case err != nil:
		return fmt.Errorf("releasing the lock Lease %s: %w", lease.Name, err)
	}
	_, err := fmt.Fprintf(o.Out, "Released the state lock %s of %s.\n", Printable(orNone(held.lock.ID)), t)
	return err
}

// printLock shows the lock and its holder. Whoever may write the Lease wrote every field of
// the lock, so each is shown Printable.
func (o *Options) printLock(t target, held *heldLock) {
	lock, pod := held.lock, held.pod
	fmt.Fprintf(o.Out, "Object:    %s\n", t)
	fmt.Fprintf(o.Out, "Lease:     %s\n", held.lease.Name)
	if !lock.Readable {
		fmt.Fprintf(o.Out, "Lock:      %s (its details in %s cannot be read)\n", Printable(lock.Holder), workspace.LockInfoAnnotation)
		return
	}
	fmt.Fprintf(o.Out, "Lock:      %s\n", Printable(lock.ID))
	fmt.Fprintf(o.Out, "Operation: %s\n", Printable(orNone(lock.Operation)))
	fmt.Fprintf(o.Out, "Holder:    %s\n", Printable(orNone(lock.Who)))
	fmt.Fprintf(o.Out, "Created:   %s\n", Printable(orNone(lock.Created)))
	switch host := lock.Host(); {
	case host == "":
	case pod == nil:
		fmt.Fprintf(o.Out, "Pod:       no pod %s in the namespace (gone, or the holder is no pod)\n", Printable(host))
	default:
		fmt.Fprintf(o.Out, "Pod:       %s is %s%s\n", Printable(pod.Name), Printable(string(pod.Status.Phase)), deleting(pod))
	}
}

func deleting(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return ", being deleted"
	}
	return ""
}
