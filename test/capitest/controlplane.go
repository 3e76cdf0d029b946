package capitest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The LocalControlPlane stands in for a control plane provider where none can run: Cluster API's
// kubeadm control plane needs kubeadm on a node to initialize, and a ClusterClass must name a
// control plane template. A LocalControlPlane is not machine-based. Once its Cluster's
// infrastructure is provisioned, RunLocalControlPlanes does what a control plane provider does
// once its first control plane instance answers: it writes the cluster's CA (<cluster>-ca, a CA
// generated for the purpose, which the kubeadm bootstrap provider pins in join data) and its
// admin kubeconfig (<cluster>-kubeconfig, the local kube-apiserver's, which stands in for the
// workload cluster), and reports the control plane initialized, at its spec.version and
// Available (the v1beta2 control plane contract: status.initialization.controlPlaneInitialized,
// status.versions and status.version, the Available condition).

// The LocalControlPlane kinds, in the control plane API group whose objects Cluster API's core
// manager may read and write.
var (
	LocalControlPlaneKind         = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha1", Kind: "LocalControlPlane"}
	LocalControlPlaneTemplateKind = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha1", Kind: "LocalControlPlaneTemplate"}
)

// contractLabel says which version of the kinds implements Cluster API's v1beta2 contract; core
// reads it from the CRD to resolve references that name only a group and a kind.
var contractLabel = map[string]string{clusterv1.GroupVersion.Group + "/" + clusterv1.GroupVersion.Version: LocalControlPlaneKind.Version}

// preserved is an object schema that keeps every field.
func preserved(properties map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: properties, XPreserveUnknownFields: ptr.To(true)}
}

// LocalControlPlaneCRDs are the CRDs of the two kinds, labelled with the contract version.
func LocalControlPlaneCRDs() []*apiextensionsv1.CustomResourceDefinition {
	spec := preserved(map[string]apiextensionsv1.JSONSchemaProps{"version": {Type: "string"}})
	controlPlane := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec": spec, "status": preserved(nil),
	}}
	template := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec": {Type: "object", Required: []string{"template"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"template": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"metadata": preserved(nil), "spec": spec}},
		}},
	}}
	return []*apiextensionsv1.CustomResourceDefinition{
		crd(LocalControlPlaneKind, controlPlane, true),
		crd(LocalControlPlaneTemplateKind, template, false),
	}
}

// crd is the CRD of a namespaced kind with the schema, plural and singular names as Cluster API
// derives them from the kind, and a status subresource when status.
func crd(gvk schema.GroupVersionKind, openAPI apiextensionsv1.JSONSchemaProps, status bool) *apiextensionsv1.CustomResourceDefinition {
	plural := strings.ToLower(gvk.Kind) + "s"
	version := apiextensionsv1.CustomResourceDefinitionVersion{
		Name: gvk.Version, Served: true, Storage: true,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &openAPI},
	}
	if status {
		version.Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + gvk.Group, Labels: contractLabel},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvk.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: gvk.Kind, ListKind: gvk.Kind + "List", Plural: plural, Singular: strings.ToLower(gvk.Kind),
				Categories: []string{"cluster-api"},
			},
			Scope:    apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version},
		},
	}
}

// ReaderRole is the ClusterRole that lets read the LocalControlPlane kinds.
const ReaderRole = "capitest-localcontrolplane-reader"

// InstallLocalControlPlane creates the LocalControlPlane CRDs, unless they exist, waits until
// both kinds are served, and lets readers read them (ReaderRole). Cluster API's core manager may
// already; its kubeadm bootstrap provider reads the Cluster's control plane for every join
// (its spec.version, for templated files) but may read only kubeadm control planes, so a control
// plane provider that works with it must grant it this, as a real one's install would.
func InstallLocalControlPlane(ctx context.Context, config *rest.Config, readers ...rbacv1.Subject) error {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := rbacv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	for _, crd := range LocalControlPlaneCRDs() {
		if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the CRD %s: %w", crd.Name, err)
		}
		if err := waitEstablished(ctx, c, crd); err != nil {
			return err
		}
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ReaderRole},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{LocalControlPlaneKind.Group},
			Resources: []string{"localcontrolplanes", "localcontrolplanetemplates"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ReaderRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ReaderRole},
		Subjects:   readers,
	}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// waitEstablished waits until the API server serves the CRD's kind.
func waitEstablished(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CRD %s: %w", crd.Name, err)
	}
	return nil
}

// RunLocalControlPlanes plays the control plane provider of the LocalControlPlanes of namespace
// (every namespace when empty) until ctx ends, looking every half second; kubeconfig is the
// admin kubeconfig each cluster gets. A failed look is tried again; it returns the first error
// it met, if any. A paused Cluster's control plane is left alone.
func RunLocalControlPlanes(ctx context.Context, c client.Client, namespace string, kubeconfig []byte) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var first error
	for {
		if err := lookAtControlPlanes(ctx, c, namespace, kubeconfig); err != nil && ctx.Err() == nil && first == nil {
			first = err
		}
		select {
		case <-ctx.Done():
			return first
		case <-tick.C:
		}
	}
}

func lookAtControlPlanes(ctx context.Context, c client.Client, namespace string, kubeconfig []byte) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(LocalControlPlaneKind.GroupVersion().WithKind(LocalControlPlaneKind.Kind + "List"))
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing LocalControlPlanes: %w", err)
	}
	for i := range list.Items {
		if err := reconcileControlPlane(ctx, c, &list.Items[i], kubeconfig); err != nil {
			return fmt.Errorf("LocalControlPlane %s/%s: %w", list.Items[i].GetNamespace(), list.Items[i].GetName(), err)
		}
	}
	return nil
}

// reconcileControlPlane initializes one LocalControlPlane once its Cluster (the one its
// cluster-name label names, which Cluster API sets) has its infrastructure provisioned.
func reconcileControlPlane(ctx context.Context, c client.Client, cp *unstructured.Unstructured, kubeconfig []byte) error {
	name := cp.GetLabels()[clusterv1.ClusterNameLabel]
	if name == "" || !cp.GetDeletionTimestamp().IsZero() {
		return nil
	}
	var cluster clusterv1.Cluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: cp.GetNamespace(), Name: name}, &cluster); err != nil {
		return client.IgnoreNotFound(err)
	}
	_, paused := cp.GetAnnotations()[clusterv1.PausedAnnotation]
	if paused || ptr.Deref(cluster.Spec.Paused, false) || !ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false) {
		return nil
	}
	if err := ensureClusterSecret(ctx, c, cp, name+"-ca", newCA); err != nil {
		return err
	}
	if err := ensureClusterSecret(ctx, c, cp, name+"-kubeconfig", func() (map[string][]byte, error) {
		return map[string][]byte{"value": kubeconfig}, nil
	}); err != nil {
		return err
	}
	return reportInitialized(ctx, c, cp)
}

// ensureClusterSecret creates the cluster's Secret of the name with data, unless it exists, as
// Cluster API's contract wants a control plane's Secrets: its type, the cluster-name label, and
// controlled by the control plane.
func ensureClusterSecret(ctx context.Context, c client.Client, cp *unstructured.Unstructured, name string, data func() (map[string][]byte, error)) error {
	err := c.Get(ctx, client.ObjectKey{Namespace: cp.GetNamespace(), Name: name}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	values, err := data()
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cp.GetNamespace(),
			Labels:          map[string]string{clusterv1.ClusterNameLabel: cp.GetLabels()[clusterv1.ClusterNameLabel]},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cp, cp.GroupVersionKind())},
		},
		Type: clusterv1.ClusterSecretType,
		Data: values,
	}
	if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Secret %s: %w", name, err)
	}
	return nil
}

// newCA generates a self-signed CA certificate and its key, as tls.crt and tls.key.
func newCA() (map[string][]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		IsCA:     true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// reportInitialized writes the status a control plane provider reports once its control plane
// is up at spec.version: initialized, the version (status.versions, and status.version for
// readers of the older field), Available, and the generation it saw. Cluster API's topology
// controller creates a ClusterClass's workers only once the control plane reports its version.
func reportInitialized(ctx context.Context, c client.Client, cp *unstructured.Unstructured) error {
	version, _, _ := unstructured.NestedString(cp.Object, "spec", "version")
	current, _, _ := unstructured.NestedMap(cp.Object, "status")
	available := metav1.Condition{
		Type: clusterv1.AvailableCondition, Status: metav1.ConditionTrue, Reason: "Available",
		ObservedGeneration: cp.GetGeneration(), LastTransitionTime: metav1.Now(),
	}
	if was := availableCondition(current); was != nil && was.Status == metav1.ConditionTrue {
		available.LastTransitionTime = was.LastTransitionTime
	}
	conditions, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&available)
	if err != nil {
		return err
	}
	status := map[string]any{
		"initialization":     map[string]any{"controlPlaneInitialized": true},
		"observedGeneration": cp.GetGeneration(),
		"conditions":         []any{conditions},
	}
	if version != "" {
		status["version"] = version
		status["versions"] = []any{map[string]any{"version": version}}
	}
	if sameStatus(current, status) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, cp, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("reporting the control plane initialized: %w", err)
	}
	return nil
}

// availableCondition is the Available condition of an unstructured status, if any.
func availableCondition(status map[string]any) *metav1.Condition {
	list, _, _ := unstructured.NestedSlice(status, "conditions")
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok || m["type"] != clusterv1.AvailableCondition {
			continue
		}
		var cond metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond); err == nil {
			return &cond
		}
	}
	return nil
}

// sameStatus reports whether current already says what status does, compared as JSON so that
// numbers of either decoding compare equal.
func sameStatus(current, status map[string]any) bool {
	for key, want := range status {
		a, _ := json.Marshal(current[key])
		b, _ := json.Marshal(want)
		var x, y any
		_ = json.Unmarshal(a, &x)
		_ = json.Unmarshal(b, &y)
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
