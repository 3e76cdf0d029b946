package system

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/test/testenv"
)

var (
	// shared is the system of the running test binary, set by Main.
	shared     *System
	skipReason string
	namespaces atomic.Int32
)

// Main starts one system for a test binary, runs its tests and stops it; call it from TestMain
// as os.Exit(system.Main(m, system.Options{})). Outside CI, missing binaries make tests that call
// Get skip; with CI=true they fail the run. A failing run prints the controller's and the API
// server's logs.
func Main(m *testing.M, opts Options) int {
	needed := append(testenv.Options{ControllerManager: true}.Binaries(), testenv.TofuBinary)
	if opts.ClusterAPI {
		needed = append(needed, ClusterAPIManager, KubeadmBootstrapManager)
	}
	if missing := testenv.MissingBinaries(needed...); len(missing) > 0 {
		if testenv.InCI() {
			fmt.Fprintf(os.Stderr, "system: binaries missing from bin/: %v\n", missing)
			return 1
		}
		skipReason = fmt.Sprintf("binaries missing from bin/: %v (run `make tools`)", missing)
		return m.Run()
	}
	s, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "system: starting: %v\n", err)
		_ = s.Stop()
		return 1
	}
	shared = s
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "controller log:\n%s\napiserver log:\n%s\n", s.Log("controller"), s.Log("apiserver"))
	}
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "system: %v\n", err)
	}
	return code
}

// Get returns the system Main started, or skips the test when its binaries are missing.
func Get(t testing.TB) *System {
	t.Helper()
	if shared == nil {
		if skipReason == "" {
			t.Fatal("system.Get called without system.Main in TestMain")
		}
		t.Skip(skipReason)
	}
	return shared
}

// NewNamespace creates a namespace of its own for a test and returns an admin client.
func (s *System) NewNamespace(t testing.TB, prefix string) (client.Client, string) {
	t.Helper()
	c, err := client.New(s.Env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("%s-%d", prefix, namespaces.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return c, ns
}
