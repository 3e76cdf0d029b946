package system

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/hack/images/build"
	"github.com/captf/captf/hack/images/image"
	"github.com/captf/captf/hack/manifest"
	"github.com/captf/captf/test/testenv"
)

// ImageRegistryHost is the registry the install's images are named under; the node agent pulls
// it from the system's in-process registry (Options.Deployments), as a registry mirror.
const ImageRegistryHost = "ghcr.io"

// ImageVersion is the tag the system builds the images with: the install's.
const ImageVersion = "dev"

// serveImages builds the install's images from this tree (the binaries in s.BinDir, OpenTofu
// from bin/), starts an in-process registry on loopback and pushes them to it, under the
// repositories the install names. It returns the registry's host:port.
func (s *System) serveImages(ctx context.Context) (string, error) {
	s.registry = httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	host := strings.TrimPrefix(s.registry.URL, "http://")
	binaries := map[string]string{
		build.Controller:      filepath.Join(s.BinDir, build.Controller),
		build.Runner:          filepath.Join(s.BinDir, build.Runner),
		build.APIServerBinary: filepath.Join(s.BinDir, build.APIServerBinary),
		build.Tofu:            filepath.Join(s.Env.BinDir, testenv.TofuBinary),
	}
	for name, path := range binaries {
		// A dynamically linked binary (an older bin/tofu) cannot go into an image: build a
		// static one.
		if !static(path) {
			built, err := build.BuildBinaries(ctx, s.Env.RepoRoot, filepath.Join(s.Env.Dir, "static"), name)
			if err != nil {
				return "", err
			}
			binaries[name] = built[name]
		}
	}
	s.tofu = binaries[build.Tofu]
	images, err := build.Images(ctx, build.Options{
		Repository: host + "/captf/",
		Version:    ImageVersion,
		Source:     "https://github.com/captf/captf",
		RepoRoot:   s.Env.RepoRoot,
		Binaries:   binaries,
		// The sample machine module's providers, as `make tools` built them for these tests.
		ProviderMirror: filepath.Join(s.Env.BinDir, "providers"),
	})
	if err != nil {
		return "", err
	}
	if err := image.Push(ctx, images); err != nil {
		return "", err
	}
	return host, nil
}

// pushModuleImage builds the module image of dir and pushes it to the system's registry as ref,
// which must be under ImageRegistryHost, the host the node agent mirrors.
func (s *System) pushModuleImage(ctx context.Context, ref, dir string) (string, error) {
	path, ok := strings.CutPrefix(ref, ImageRegistryHost+"/")
	if !ok {
		return "", fmt.Errorf("image %q: the system's registry serves %s/ only", ref, ImageRegistryHost)
	}
	img, err := build.ModuleImage(dir, s.tofu, ImageVersion, "https://github.com/captf/captf")
	if err != nil {
		return "", err
	}
	local := strings.TrimPrefix(s.registry.URL, "http://") + "/" + path
	if err := image.Push(ctx, map[string]v1.Image{local: img}); err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), nil
}

// static reports whether path is an ELF executable without a program interpreter.
func static(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// Ports of the Deployments' containers on the node agent's host network, chosen free for each
// system so that systems in parallel test processes do not collide.
type ports struct {
	apiServer, metrics, probes, webhook int
}

func freePorts() (ports, error) {
	var p ports
	for _, port := range []*int{&p.apiServer, &p.metrics, &p.probes, &p.webhook} {
		free, err := testenv.FreePort()
		if err != nil {
			return p, err
		}
		*port = free
	}
	return p, nil
}

// startDeployments runs the controller and the API server as the install's Deployments, pods
// of the node agent, with what a node without pod networking needs changed: one replica each,
// free loopback ports in the flags and container ports (the pods share the host's network),
// and the two Services the API server calls (the API server's, for the aggregator, and the
// webhooks') as ExternalName Services to localhost, which kube-apiserver resolves to the
// port the APIService and the webhook configuration name.
func (s *System) startDeployments(ctx context.Context) error {
	objs, err := manifest.Kustomize(filepath.Join(s.Env.RepoRoot, "artifacts", Overlay))
	if err != nil {
		return err
	}
	p, err := freePorts()
	if err != nil {
		return err
	}
	s.ports = p
	var install []*unstructured.Unstructured
	for _, obj := range objs {
		switch {
		case obj.GetKind() == "Deployment":
			if err := localDeployment(obj, p); err != nil {
				return err
			}
		case obj.GetKind() == "Service" && (obj.GetName() == APIServerSA || obj.GetName() == webhookService):
			obj = externalName(obj)
		case obj.GetKind() == "APIService":
			if err := unstructured.SetNestedField(obj.Object, int64(p.apiServer), "spec", "service", "port"); err != nil {
				return err
			}
		case obj.GetKind() == "ValidatingWebhookConfiguration":
			if err := webhookPort(obj, p.webhook); err != nil {
				return err
			}
		default:
			continue // applied by install
		}
		install = append(install, obj)
	}
	if err := s.Env.ApplyObjects(ctx, install...); err != nil {
		return err
	}
	s.ControllerMetricsURL = "https://127.0.0.1:" + strconv.Itoa(p.metrics) + "/metrics"
	s.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(p.apiServer)
	if err := s.Env.WaitForAPIService(ctx, APIServiceName, 3*time.Minute); err != nil {
		return fmt.Errorf("%w; log: %s", err, s.Log("apiserver"))
	}
	if err := s.writeAPIServerCA(ctx); err != nil {
		return err
	}
	return s.waitForController(ctx)
}

// webhookService is the Service the webhook configuration names.
const webhookService = "captf-webhook-service"

// localDeployment turns one of the install's Deployments into what runs on the node agent.
func localDeployment(obj *unstructured.Unstructured, p ports) error {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
		return err
	}
	d.Spec.Replicas = ptr.To[int32](1)
	c := &d.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	containerPorts := map[int32]int{}
	switch d.Name {
	case "captf-apiserver":
		flags["--secure-port"] = strconv.Itoa(p.apiServer)
		containerPorts[8443] = p.apiServer
	case "captf-controller":
		flags["--metrics-bind-address"] = "127.0.0.1:" + strconv.Itoa(p.metrics)
		flags["--health-probe-bind-address"] = "127.0.0.1:" + strconv.Itoa(p.probes)
		flags["--webhook-port"] = strconv.Itoa(p.webhook)
		containerPorts[8443], containerPorts[8081], containerPorts[9443] = p.metrics, p.probes, p.webhook
	default:
		return fmt.Errorf("the install has a Deployment %s the system does not know", d.Name)
	}
	for i, arg := range c.Args {
		name, _, _ := strings.Cut(arg, "=")
		if value, ok := flags[name]; ok {
			c.Args[i] = name + "=" + value
			delete(flags, name)
		}
	}
	if len(flags) > 0 {
		return fmt.Errorf("Deployment %s lacks the flags %v", d.Name, flags)
	}
	for i := range c.Ports {
		if local, ok := containerPorts[c.Ports[i].ContainerPort]; ok {
			c.Ports[i].ContainerPort = int32(local)
		}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&d)
	if err != nil {
		return err
	}
	obj.Object = u
	obj.SetAPIVersion("apps/v1")
	obj.SetKind("Deployment")
	return nil
}

func externalName(svc *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": svc.GetName(), "namespace": svc.GetNamespace(), "labels": toAny(svc.GetLabels())},
		"spec":     map[string]any{"type": "ExternalName", "externalName": "localhost"},
	}}
	return out
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// webhookPort points every webhook of a configuration at port of its Service.
func webhookPort(obj *unstructured.Unstructured, port int) error {
	webhooks, _, err := unstructured.NestedSlice(obj.Object, "webhooks")
	if err != nil {
		return err
	}
	for _, w := range webhooks {
		if err := unstructured.SetNestedField(w.(map[string]any), int64(port), "clientConfig", "service", "port"); err != nil {
			return err
		}
	}
	return unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks")
}

// waitForController waits until the controller is ready, webhooks included, and its metrics
// server answers.
func (s *System) waitForController(ctx context.Context) error {
	if err := waitForReady(ctx, "http://127.0.0.1:"+strconv.Itoa(s.ports.probes)+"/readyz", 2*time.Minute); err != nil {
		return fmt.Errorf("the controller is not ready: %w; log: %s", err, s.Log("controller"))
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, _, err := s.GetControllerMetrics(ctx, "")
		return err == nil, nil
	})
}

// scaleDeployment sets a Deployment's replicas; scaling to zero kills its pods at once, as a
// crash would, and waits until they are gone.
func (s *System) scaleDeployment(ctx context.Context, name string, replicas int32) error {
	kube, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := kube.AppsV1().Deployments(Namespace).Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	if replicas > 0 {
		return nil
	}
	selector := "app.kubernetes.io/name=" + name
	pods, err := kube.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	for _, pod := range pods.Items {
		err := kube.CoreV1().Pods(Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// podLog returns the logs of the containers of a Deployment's pods (name: controller or
// apiserver), oldest pod first, from the node agent's files.
func (s *System) podLog(name string) string {
	kube, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		return err.Error()
	}
	pods, err := kube.CoreV1().Pods(Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=captf-" + name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, pod := range pods.Items {
		for _, c := range pod.Spec.Containers {
			data, err := os.ReadFile(s.agent.ContainerLogPath(pod.UID, c.Name))
			if err != nil {
				continue
			}
			b.Write(data)
		}
	}
	return b.String()
}

// restartAPIServerDeployment runs the API server's Deployment, scaled to zero, again with
// validity as its --serving-cert-validity (zero: the default), and waits until the APIService
// is Available.
func (s *System) restartAPIServerDeployment(ctx context.Context, validity time.Duration) error {
	kube, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		return err
	}
	deployments := kube.AppsV1().Deployments(Namespace)
	// The Deployment controller writes the object too: retry on a conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deployments.Get(ctx, "captf-apiserver", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := &d.Spec.Template.Spec.Containers[0]
		var args []string
		for _, a := range c.Args {
			if !strings.HasPrefix(a, "--serving-cert-validity=") {
				args = append(args, a)
			}
		}
		if validity != 0 {
			args = append(args, "--serving-cert-validity="+validity.String())
		}
		c.Args, d.Spec.Replicas = args, ptr.To[int32](1)
		_, err = deployments.Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	if err := s.waitForAPIServerTLS(ctx, s.ports.apiServer); err != nil {
		return err
	}
	if err := s.Env.WaitForAPIService(ctx, APIServiceName, 2*time.Minute); err != nil {
		return fmt.Errorf("%w; log: %s", err, s.Log("apiserver"))
	}
	return s.writeAPIServerCA(ctx)
}

// waitForAPIServerTLS waits until the API server on port serves a certificate that the CA of
// its Secret verifies for the Service's name, as the aggregator will: the APIService's
// condition may still be that of the server before.
func (s *System) waitForAPIServerTLS(ctx context.Context, port int) error {
	kube, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		secret, err := kube.CoreV1().Secrets(Namespace).Get(ctx, APIServerSecret, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(secret.Data[corev1.ServiceAccountRootCAKey])
		dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: APIServerSA + "." + Namespace + ".svc", MinVersion: tls.VersionTLS12}}
		conn, err := dialer.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not serve its certificate: %w; log: %s", err, s.Log("apiserver"))
	}
	return nil
}
