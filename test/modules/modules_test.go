// Package modules runs modules with real providers through captf: the sample machine module
// (hashicorp/time and hashicorp/local, built from the module proxy into bin/providers) from the
// provider mirror its image carries, and from a provider network mirror named by a run's CLI
// configuration, with nothing fetched from anywhere else.
package modules

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/test/providermirror"
	"github.com/captf/captf/test/system"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(system.Main(m, system.Options{}))
}

// The sample machine module's image carries its providers in its mirror: the run installs them
// from there, pinned by the module's lock file, and both do their part: time stamps the provider
// ID, local reads the machine image for the version.
func TestTheSampleMachineModuleRunsOnTheProvidersItsImageCarries(t *testing.T) {
	t.Parallel()
	s := system.NewSuite(t, "modules-image")
	m := machine(s, "web-0", system.SampleMachineImage)
	provisioned(t, s, m)
}

// A run whose CLI configuration names only a provider network mirror installs every provider
// from it, over HTTPS with the mirror's CA from the module image; every other address goes
// through a proxy that refuses it and records that it was asked, and none is. The same image
// without that configuration does ask the proxy, for the public registry.
func TestANetworkMirrorIsTheOnlyProviderSource(t *testing.T) {
	t.Parallel()
	s := system.NewSuite(t, "modules-network")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := providermirror.Start(filepath.Join(bin, "providers"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mirror.Close)
	trap := refusingProxy(t)

	// The same module, in an image without a provider mirror but with the mirror's CA.
	module := t.TempDir()
	copyDir(t, filepath.Join(s.Sys.Env.RepoRoot, "artifacts", "samples", "modules", "machine"), module)
	if err := os.Mkdir(filepath.Join(module, "ca"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(module, "ca", "mirror.pem"), mirror.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	image := "ghcr.io/captf/captf-test-network-mirror:" + s.NS
	if _, err := s.Sys.PushModuleImage(s.Ctx, image, module); err != nil {
		t.Fatal(err)
	}
	cli := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "network-mirror", Namespace: s.NS, Labels: map[string]string{infrav1.CLIConfigLabel: "true"}},
		StringData: map[string]string{infrav1.CLIConfigKey: mirror.CLIConfig()},
	}
	if err := s.C.Create(s.Ctx, cli); err != nil {
		t.Fatal(err)
	}
	behind := func(p *proxy) func(*infrav1.TerraformMachine) {
		return func(m *infrav1.TerraformMachine) {
			m.Spec.Jobs.Env = append(m.Spec.Jobs.Env,
				// Loopback (the mirror, the API server) is never proxied; everything else is.
				corev1.EnvVar{Name: "HTTPS_PROXY", Value: p.url}, corev1.EnvVar{Name: "HTTP_PROXY", Value: p.url})
		}
	}
	m := machine(s, "web-0", image, behind(trap), func(m *infrav1.TerraformMachine) {
		m.Spec.Jobs.CLIConfigSecretRef = &infrav1.SourceReference{Name: cli.Name}
		// A directory of certificates adds to the system's roots; SSL_CERT_FILE would replace them.
		m.Spec.Jobs.Env = append(m.Spec.Jobs.Env, corev1.EnvVar{Name: "SSL_CERT_DIR", Value: "/captf/module/ca"})
	})
	// The proxy sees what reaches beyond loopback: the same image without the CLI configuration
	// asks the public registry for its providers, through its own proxy, and gets nothing.
	control := refusingProxy(t)
	machine(s, "control-0", image, behind(control))
	s.Eventually("a run without the mirror asks the registry through the proxy", 2*time.Minute, func(context.Context) (bool, error) {
		return slices.ContainsFunc(control.asked(), func(line string) bool { return strings.Contains(line, "registry.opentofu.org") }), nil
	})
	provisioned(t, s, m)

	served := map[string]bool{}
	for _, path := range mirror.Requests() {
		served[path] = true
	}
	for _, want := range []string{
		"/registry.opentofu.org/hashicorp/time/index.json", "/registry.opentofu.org/hashicorp/time/0.14.2.json", "/registry.opentofu.org/hashicorp/time/0.14.2/linux_amd64.zip",
		"/registry.opentofu.org/hashicorp/local/index.json", "/registry.opentofu.org/hashicorp/local/1.4.0.json", "/registry.opentofu.org/hashicorp/local/1.4.0/linux_amd64.zip",
	} {
		if !served[want] {
			t.Errorf("the network mirror did not serve %s; it served %v", want, mirror.Requests())
		}
	}
	if asked := trap.asked(); len(asked) > 0 {
		t.Errorf("the run reached beyond the mirror: %v", asked)
	}
}

// machine creates a TerraformMachine of the image (with its owner Machine, capitest.Own), its
// drift checks off.
func machine(s *system.Suite, name, image string, mutate ...func(*infrav1.TerraformMachine)) *infrav1.TerraformMachine {
	s.T.Helper()
	m := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.NS}}
	m.Spec.Source.Image = image
	m.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, name))}
	m.Spec.Drift.IntervalSeconds = new(int64)
	for _, mutate := range mutate {
		mutate(m)
	}
	s.Create(m)
	return m
}

// providerIDOf matches the sample machine module's provider ID: the machine and its creation
// time, from hashicorp/time.
var providerIDOf = regexp.MustCompile(`^local://web-0-[0-9]{10}$`)

// provisioned waits until the machine is provisioned with the sample machine module's outputs:
// a provider ID stamped by hashicorp/time and a health message naming the machine image
// hashicorp/local read.
func provisioned(t *testing.T, s *system.Suite, m *infrav1.TerraformMachine) {
	t.Helper()
	s.Eventually("the machine is provisioned by its module's providers", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return false, err
		}
		return m.Status.IsProvisioned(), nil
	})
	if !providerIDOf.MatchString(m.Spec.ProviderID) {
		t.Errorf("provider ID %q, want one stamped with its creation time", m.Spec.ProviderID)
	}
	if c := conditions.Get(m.Status.Conditions, conditions.InfrastructureHealthy); c == nil || !strings.Contains(c.Message, "booted local-node-image-v1.37") {
		t.Errorf("InfrastructureHealthy %+v, want the machine image read from images.json", c)
	}
}

// proxy is an HTTP proxy on loopback that answers every request 403 and records its target.
type proxy struct {
	url     string
	mu      sync.Mutex
	targets []string
}

func (p *proxy) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

func refusingProxy(t *testing.T) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p := &proxy{url: "http://" + l.Addr().String()}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, _ := bufio.NewReader(conn).ReadString('\n')
				p.mu.Lock()
				p.targets = append(p.targets, strings.TrimSpace(line))
				p.mu.Unlock()
				_, _ = conn.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}()
		}
	}()
	return p
}

// copyDir copies the regular files of src (one level, dotfiles included) into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
