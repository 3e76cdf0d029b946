package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// requestToken asks the TokenRequest API for a token of the pod's ServiceAccount, bound to the
// pod so that it stops working once the pod is gone, as a kubelet does for projected tokens. A
// missing ServiceAccount is a *waitError.
func (w *podWorker) requestToken(ctx context.Context, pod *corev1.Pod, audiences []string, expiration time.Duration) (string, time.Time, error) {
	sa := serviceAccountName(pod)
	seconds := int64(expiration / time.Second)
	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: &seconds,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID,
			},
		},
	}
	resp, err := w.a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return "", time.Time{}, &waitError{reason: "ContainerCreating", message: fmt.Sprintf("failed to fetch token: serviceaccount %q not found", sa)}
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting a token for serviceaccount %s/%s: %w", pod.Namespace, sa, err)
	}
	return resp.Status.Token, resp.Status.ExpirationTimestamp.Time, nil
}

// kubeconfigPath is the kubeconfig a pod gets in place of in-cluster configuration.
func (w *podWorker) kubeconfigPath() string { return filepath.Join(w.dir, "kube", "kubeconfig") }

func (w *podWorker) tokenPath() string { return filepath.Join(w.dir, "kube", "token") }

// writeKubeconfig writes the pod's kubeconfig: the API server of Config and the pod's
// ServiceAccount token, read from a file (tokenFile) so that renewing the file renews the
// credentials of a running client. It returns when the token should be renewed.
func (w *podWorker) writeKubeconfig(ctx context.Context, pod *corev1.Pod) (time.Time, error) {
	if err := w.renewToken(ctx, pod); err != nil {
		return time.Time{}, err
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = w.a.cfg.APIServerURL
	cluster.CertificateAuthorityData = w.a.cfg.APIServerCA
	cluster.InsecureSkipTLSVerify = w.a.cfg.RESTConfig.Insecure && len(w.a.cfg.APIServerCA) == 0
	cfg.Clusters["local"] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.TokenFile = w.tokenPath()
	name := "system:serviceaccount:" + pod.Namespace + ":" + serviceAccountName(pod)
	cfg.AuthInfos[name] = user
	kctx := clientcmdapi.NewContext()
	kctx.Cluster, kctx.AuthInfo, kctx.Namespace = "local", name, pod.Namespace
	cfg.Contexts["pod"] = kctx
	cfg.CurrentContext = "pod"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return time.Time{}, fmt.Errorf("encoding the pod's kubeconfig: %w", err)
	}
	if err := writeFileAtomic(w.kubeconfigPath(), data, 0o600); err != nil {
		return time.Time{}, err
	}
	return w.tokenRenewal, nil
}

// renewToken requests a fresh token into the token file.
func (w *podWorker) renewToken(ctx context.Context, pod *corev1.Pod) error {
	token, expires, err := w.requestToken(ctx, pod, nil, w.a.cfg.TokenExpiration)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(w.tokenPath(), []byte(token), 0o600); err != nil {
		return err
	}
	// Renew at 80% of the lifetime, as the kubelet does.
	now := time.Now()
	w.tokenRenewal = now.Add(expires.Sub(now) * 4 / 5)
	return nil
}

// writeFileAtomic replaces path, so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, firstErr(werr, cerr))
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
