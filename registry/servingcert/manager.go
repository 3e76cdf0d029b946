package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// ManagedByLabel marks the Secrets a Manager writes, naming the server that keeps it.
const ManagedByLabel = "app.kubernetes.io/managed-by"

var apiServiceResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// Config says which Secret holds the certificate, what it is for, and who must trust its CA.
type Config struct {
	// Namespace and SecretName name the Secret.
	Namespace, SecretName string
	// DNSNames are the serving certificate's names (see DNSNames).
	DNSNames []string
	// Validity is the serving certificate's lifetime; it is renewed with a third left.
	Validity time.Duration
	// APIServices get the CA bundle as spec.caBundle.
	APIServices []string
	// ValidatingWebhooks get it as every webhook's clientConfig.caBundle.
	ValidatingWebhooks []string
	// ManagedBy is the value of ManagedByLabel on the Secret.
	ManagedBy string
	// Interval is how often the Secret is checked; defaults to a tenth of Validity, at most a
	// minute, so a renewal written by another replica is served soon after.
	Interval time.Duration
}

// Manager keeps one serving certificate: it reads the Secret, renews what Decide asks for,
// serves the current pair and writes the CA bundle where Config says.
type Manager struct {
	cfg     Config
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	log     logr.Logger
	now     func() time.Time

	mu        sync.RWMutex
	cert      *tls.Certificate
	certPEM   []byte
	keyPEM    []byte
	listeners []func()
}

// NewManager returns a Manager; Sync or Run make it serve.
func NewManager(cfg Config, kube kubernetes.Interface, dyn dynamic.Interface, log logr.Logger) (*Manager, error) {
	if cfg.Namespace == "" || cfg.SecretName == "" {
		return nil, errors.New("servingcert: the Secret's namespace and name are required")
	}
	if len(cfg.DNSNames) == 0 {
		return nil, errors.New("servingcert: at least one DNS name is required")
	}
	if cfg.Validity < time.Minute {
		return nil, fmt.Errorf("servingcert: a validity of %s is shorter than a minute", cfg.Validity)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = min(cfg.Validity/10, time.Minute)
	}
	return &Manager{cfg: cfg, kube: kube, dynamic: dyn, log: log, now: time.Now}, nil
}

// GetCertificate serves the current pair, for tls.Config.GetCertificate.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cert == nil {
		return nil, errors.New("no serving certificate yet")
	}
	return m.cert, nil
}

// Current returns the PEM of the current certificate and key (nil before the first Sync).
func (m *Manager) Current() (cert, key []byte) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.certPEM, m.keyPEM
}

// OnChange registers f to be called after the served pair changes.
func (m *Manager) OnChange(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listeners = append(m.listeners, f)
}

// Start syncs until the first success (or ctx is done), so a server has a certificate before it
// listens, then keeps syncing every Interval in the background until ctx is done.
func (m *Manager) Start(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := m.Sync(ctx); err != nil {
			m.log.Error(err, "Keeping the serving certificate failed; retrying", "secret", klogRef(m.cfg.Namespace, m.cfg.SecretName))
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("no serving certificate: %w", err)
	}
	go func() {
		ticker := time.NewTicker(m.cfg.Interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				if err := m.Sync(ctx); err != nil {
					m.log.Error(err, "Keeping the serving certificate failed; retrying", "secret", klogRef(m.cfg.Namespace, m.cfg.SecretName))
				}
			}
		}
	}()
	return nil
}

// Sync reads the Secret, renews what is due (creating the Secret when missing), writes the CA
// bundle into the configured APIServices and webhook configurations, and serves the pair.
// Replicas race safely: a write conflicts unless it is based on the Secret as last read, and the
// loser reads the winner's certificate.
func (m *Manager) Sync(ctx context.Context) error {
	var bundle Bundle
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var err error
		bundle, err = m.syncSecret(ctx)
		return err
	})
	if err != nil {
		return err
	}
	// Trust first, then serve: a client that follows the caBundle verifies the new pair.
	if err := m.publishCABundle(ctx, bundle[CABundleKey]); err != nil {
		return err
	}
	return m.serve(bundle)
}

func (m *Manager) syncSecret(ctx context.Context) (Bundle, error) {
	secrets := m.kube.CoreV1().Secrets(m.cfg.Namespace)
	secret, err := secrets.Get(ctx, m.cfg.SecretName, metav1.GetOptions{})
	missing := apierrors.IsNotFound(err)
	if err != nil && !missing {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", m.cfg.Namespace, m.cfg.SecretName, err)
	}
	var current Bundle
	if !missing {
		current = secret.Data
	}
	now := m.now()
	action, why := Decide(current, m.cfg.DNSNames, now)
	if action == Keep {
		return current, nil
	}
	next, err := Issue(current, action, m.cfg.DNSNames, now, m.cfg.Validity)
	if err != nil {
		return nil, err
	}
	if missing {
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: m.cfg.SecretName, Namespace: m.cfg.Namespace},
			Type:       corev1.SecretTypeTLS,
		}
	}
	if secret.Labels == nil {
		secret.Labels = map[string]string{}
	}
	if m.cfg.ManagedBy != "" {
		secret.Labels[ManagedByLabel] = m.cfg.ManagedBy
	}
	secret.Data = next
	if missing {
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Another replica created it first: read theirs.
			return nil, apierrors.NewConflict(corev1.Resource("secrets"), m.cfg.SecretName, err)
		}
	} else {
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("writing Secret %s/%s: %w", m.cfg.Namespace, m.cfg.SecretName, err)
	}
	m.log.Info("Issued a serving certificate", "secret", klogRef(m.cfg.Namespace, m.cfg.SecretName), "action", action.String(), "reason", why)
	return next, nil
}

// publishCABundle writes caBundle where it is not already.
func (m *Manager) publishCABundle(ctx context.Context, caBundle []byte) error {
	encoded := base64.StdEncoding.EncodeToString(caBundle)
	for _, name := range m.cfg.APIServices {
		apiServices := m.dynamic.Resource(apiServiceResource)
		svc, err := apiServices.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading APIService %s: %w", name, err)
		}
		if got, _, _ := unstructured.NestedString(svc.Object, "spec", "caBundle"); got == encoded {
			continue
		}
		// A merge patch of one field: the rest of the APIService is the installer's.
		patch := fmt.Appendf(nil, `{"spec":{"caBundle":%q,"insecureSkipTLSVerify":false}}`, encoded)
		if _, err := apiServices.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("writing the caBundle of APIService %s: %w", name, err)
		}
		m.log.Info("Wrote the CA bundle", "apiService", name)
	}
	webhooks := m.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	for _, name := range m.cfg.ValidatingWebhooks {
		if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cfg, err := webhooks.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			changed := false
			for i := range cfg.Webhooks {
				if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caBundle) {
					cfg.Webhooks[i].ClientConfig.CABundle, changed = caBundle, true
				}
			}
			if !changed {
				return nil
			}
			_, err = webhooks.Update(ctx, cfg, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("writing the caBundle of ValidatingWebhookConfiguration %s: %w", name, err)
		}
	}
	return nil
}

// serve makes the bundle's pair the one served, telling the listeners when it changed.
func (m *Manager) serve(b Bundle) error {
	m.mu.Lock()
	if bytes.Equal(m.certPEM, b[CertKey]) && bytes.Equal(m.keyPEM, b[PrivateKeyKey]) {
		m.mu.Unlock()
		return nil
	}
	pair, err := tls.X509KeyPair(b[CertKey], b[PrivateKeyKey])
	if err != nil {
		m.mu.Unlock()
		return fmt.Errorf("the Secret's serving pair: %w", err)
	}
	m.cert, m.certPEM, m.keyPEM = &pair, bytes.Clone(b[CertKey]), bytes.Clone(b[PrivateKeyKey])
	listeners := append([]func(){}, m.listeners...)
	m.mu.Unlock()
	m.log.Info("Serving a certificate", "secret", klogRef(m.cfg.Namespace, m.cfg.SecretName), "serial", pair.Leaf.SerialNumber.Text(16), "notAfter", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	for _, f := range listeners {
		f()
	}
	return nil
}

// klogRef is the namespace/name form the logs use for an object.
func klogRef(namespace, name string) string { return namespace + "/" + name }

// CertKeyContentProvider serves the Manager's pair to a k8s.io/apiserver server
// (SecureServingInfo.Cert), which reloads it whenever it changes.
func (m *Manager) CertKeyContentProvider() dynamiccertificates.CertKeyContentProvider {
	return contentProvider{m}
}

type contentProvider struct{ m *Manager }

func (p contentProvider) Name() string { return "captf-serving-cert" }

func (p contentProvider) CurrentCertKeyContent() ([]byte, []byte) { return p.m.Current() }

func (p contentProvider) AddListener(l dynamiccertificates.Listener) { p.m.OnChange(l.Enqueue) }

// inClusterNamespaceFile holds the pod's namespace in a cluster.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// PodNamespace is the namespace a server runs in: $POD_NAMESPACE (the downward API), else the
// in-cluster ServiceAccount's namespace file.
func PodNamespace() (string, error) {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	data, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return "", fmt.Errorf("the pod's namespace is unknown (set POD_NAMESPACE): %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}
