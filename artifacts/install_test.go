package artifacts

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/captf/captf/controller/workspace"
	hackmanifest "github.com/captf/captf/hack/manifest"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.Options{SkipCRDs: true})) }

// certManagerGroup holds the kinds only a cluster with cert-manager knows; the clusterctl
// repository's tests check them.
const certManagerGroup = "cert-manager.io"

// Each install renders and a real API server accepts every object of it with a server-side
// apply dry run: schemas, CRDs, RBAC, APIService, webhooks, Deployments, PDBs.
func TestEveryInstallIsAcceptedByTheAPIServer(t *testing.T) {
	env := testenv.Get(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(env.Config)))
	for _, overlay := range Overlays {
		t.Run(overlay, func(t *testing.T) {
			objs, err := hackmanifest.Kustomize(overlay)
			if err != nil {
				t.Fatal(err)
			}
			applied := 0
			for _, obj := range objs {
				gvk := obj.GroupVersionKind()
				if gvk.Group == certManagerGroup {
					continue
				}
				if gvk.Kind == "Namespace" {
					// A dry run does not create it, and what lives in it needs it.
					_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName()}}, metav1.CreateOptions{})
					if err != nil && !apierrors.IsAlreadyExists(err) {
						t.Fatal(err)
					}
				}
				mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("%s %s: %v", gvk.Kind, obj.GetName(), err)
				}
				var resource dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
				if obj.GetNamespace() != "" {
					resource = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
				}
				if _, err := resource.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "captf-install", DryRun: []string{metav1.DryRunAll}, Force: true}); err != nil {
					t.Errorf("%s %s: %v", gvk.Kind, obj.GetName(), err)
				}
				applied++
			}
			t.Logf("%s: %d objects accepted", overlay, applied)
		})
	}
}

// The rules of the two certificate modes, a row each.
func TestEachInstallGivesEveryServerACertificate(t *testing.T) {
	render := map[string][]*unstructured.Unstructured{}
	for _, overlay := range Overlays {
		objs, err := hackmanifest.Kustomize(overlay)
		if err != nil {
			t.Fatal(err)
		}
		render[overlay] = objs
	}
	for _, rule := range []struct {
		name    string
		overlay string
		holds   func(objs []*unstructured.Unstructured) string
	}{
		{"self-managed: the API server keeps captf-apiserver-tls", "overlays/self-managed", func(objs []*unstructured.Unstructured) string {
			return hasArg(objs, "captf-apiserver", "--serving-cert-secret=captf-apiserver-tls")
		}},
		{"self-managed: the controller keeps captf-webhook-server-cert", "overlays/self-managed", func(objs []*unstructured.Unstructured) string {
			return hasArg(objs, "captf-controller", "--webhook-cert-secret=captf-webhook-server-cert")
		}},
		{"self-managed: no Deployment mounts a Secret", "overlays/self-managed", func(objs []*unstructured.Unstructured) string {
			for _, d := range ofKind(objs, "Deployment") {
				if s := secretVolumes(d); len(s) > 0 {
					return d.GetName() + " mounts " + strings.Join(s, ",")
				}
			}
			return ""
		}},
		{"self-managed: no Certificate", "overlays/self-managed", func(objs []*unstructured.Unstructured) string {
			for _, o := range objs {
				if o.GroupVersionKind().Group == certManagerGroup {
					return o.GetKind() + " " + o.GetName()
				}
			}
			return ""
		}},
		{"cert-manager: every Secret a Deployment mounts is a Certificate's", "overlays/cert-manager", func(objs []*unstructured.Unstructured) string {
			var issued []string
			for _, c := range ofKind(objs, "Certificate") {
				s, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
				issued = append(issued, s)
			}
			for _, d := range ofKind(objs, "Deployment") {
				mounted := secretVolumes(d)
				if len(mounted) == 0 {
					return d.GetName() + " mounts no certificate"
				}
				for _, s := range mounted {
					if !slices.Contains(issued, s) {
						return d.GetName() + " mounts " + s + ", which no Certificate issues"
					}
				}
			}
			return ""
		}},
		{"both: no APIService skips TLS verification or carries a literal caBundle", "", func(objs []*unstructured.Unstructured) string {
			for _, a := range ofKind(objs, "APIService") {
				if skip, _, _ := unstructured.NestedBool(a.Object, "spec", "insecureSkipTLSVerify"); skip {
					return a.GetName() + " skips TLS verification"
				}
				if _, found, _ := unstructured.NestedString(a.Object, "spec", "caBundle"); found {
					return a.GetName() + " has a literal caBundle"
				}
			}
			return ""
		}},
		{"both: the approval policy is bound to deny and lets the install's own ServiceAccounts write", "", func(objs []*unstructured.Unstructured) string {
			return approvalPolicyHolds(objs)
		}},
		{"both: every PodDisruptionBudget leaves a replica to disrupt", "", func(objs []*unstructured.Unstructured) string {
			for _, pdb := range ofKind(objs, "PodDisruptionBudget") {
				selector, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
				minAvailable, _, _ := unstructured.NestedInt64(pdb.Object, "spec", "minAvailable")
				found := false
				for _, d := range ofKind(objs, "Deployment") {
					labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
					if labels["app.kubernetes.io/name"] != selector["app.kubernetes.io/name"] {
						continue
					}
					found = true
					if replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); replicas <= minAvailable {
						return pdb.GetName() + ": a drain could never evict a pod"
					}
				}
				if !found {
					return pdb.GetName() + " selects no Deployment"
				}
			}
			return ""
		}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			for _, overlay := range Overlays {
				if rule.overlay != "" && rule.overlay != overlay {
					continue
				}
				if broken := rule.holds(render[overlay]); broken != "" {
					t.Errorf("%s: %s", overlay, broken)
				}
			}
		})
	}
}

// approvalPolicyHolds says what is wrong with the policy that keeps approval annotations to the
// runs API server: it must be bound, everywhere, with Deny, and the ServiceAccounts its
// expressions name must be those of the install, in their namespace.
func approvalPolicyHolds(objs []*unstructured.Unstructured) string {
	name := workspace.ApprovalPolicyName
	policy, binding := named(objs, "ValidatingAdmissionPolicy", name), named(objs, "ValidatingAdmissionPolicyBinding", name)
	if policy == nil || binding == nil {
		return "no ValidatingAdmissionPolicy and binding " + name
	}
	// The controller's own rule for a policy in force.
	var typedBinding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	var typedPolicy admissionregistrationv1.ValidatingAdmissionPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(binding.Object, &typedBinding); err != nil {
		return err.Error()
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(policy.Object, &typedPolicy); err != nil {
		return err.Error()
	}
	if problem := workspace.ApprovalPolicyProblem(&typedBinding, &typedPolicy); problem != "" {
		return problem
	}
	// The annotations it keeps are the ones the controller reads as approvals.
	var keys string
	for _, v := range typedPolicy.Spec.Variables {
		if v.Name == "keys" {
			keys = v.Expression
		}
	}
	for _, key := range jobs.ApprovalAnnotations() {
		if !strings.Contains(keys, "'"+key+"'") {
			return "the policy's keys do not hold " + key
		}
	}
	if n := strings.Count(keys, "'") / 2; n != len(jobs.ApprovalAnnotations()) {
		return fmt.Sprintf("the policy's keys hold %d annotations, the controller reads %d as approvals", n, len(jobs.ApprovalAnnotations()))
	}
	validations, _, _ := unstructured.NestedSlice(policy.Object, "spec", "validations")
	text := fmt.Sprint(validations)
	for _, sa := range []string{"captf-apiserver", "captf-controller"} {
		account := named(objs, "ServiceAccount", sa)
		if account == nil {
			return "no ServiceAccount " + sa
		}
		if user := "system:serviceaccount:" + account.GetNamespace() + ":" + sa; !strings.Contains(text, "'"+user+"'") {
			return "the policy does not name " + user
		}
	}
	return ""
}

func named(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range ofKind(objs, kind) {
		if o.GetName() == name {
			return o
		}
	}
	return nil
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// hasArg says what is wrong unless the Deployment name's first container has arg.
func hasArg(objs []*unstructured.Unstructured, name, arg string) string {
	for _, d := range ofKind(objs, "Deployment") {
		if d.GetName() != name {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if len(containers) == 0 {
			return name + " has no container"
		}
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		if !slices.Contains(args, arg) {
			return name + " lacks " + arg
		}
		return ""
	}
	return "no Deployment " + name
}

func secretVolumes(d *unstructured.Unstructured) []string {
	volumes, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	var out []string
	for _, v := range volumes {
		if name, found, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); found {
			out = append(out, name)
		}
	}
	return out
}
