// Package aggregated tests the captf aggregated API server through the real aggregator of a
// real kube-apiserver and the real kubectl: the server binary, built from this tree, runs as a
// process on a loopback port with its own serving certificate, under a ServiceAccount bound by the RBAC of
// artifacts/apiserver, with the approval policy of artifacts/policy in force, and is registered by an ExternalName Service and the APIService of
// artifacts/apiserver with its CA as caBundle. The run key Secret is made in the server's
// namespace as the controller makes it, and the tests sign the Jobs they make with it, as the
// controller does.
package aggregated

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/test/testenv"
)

// Names of the server's installation, as in artifacts/apiserver.
const (
	serverNamespace = "captf-system"
	serverName      = "captf-apiserver"
	apiServiceName  = "v1alpha1.runs.captf.io"
)

// env is the control plane; skipReason is set when its binaries are missing outside CI.
var (
	// serverPort and serverCA reach the aggregated server directly, past the aggregator;
	// serverPID is its process.
	serverPort int
	serverPID  int
	serverCA   string
	env        *testenv.Env
	skipReason string
	// runKey is the install's run key, which the controller would sign its Jobs with.
	runKey runkey.Key
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	opts := testenv.Options{}
	binaries := append(opts.Binaries(), testenv.ControllerManagerBinary)
	if missing := testenv.MissingBinaries(binaries...); len(missing) > 0 {
		if testenv.InCI() {
			fmt.Fprintf(os.Stderr, "aggregated: binaries missing from bin/: %v\n", missing)
			return 1
		}
		skipReason = fmt.Sprintf("binaries missing from bin/: %v (run `make tools`)", missing)
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := testenv.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aggregated: %v\n", err)
		if e != nil {
			_ = e.Stop()
		}
		return 1
	}
	env = e
	stop, err := startAggregatedServer(ctx, e)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aggregated: %v\n", err)
		_ = e.Stop()
		return 1
	}
	code := m.Run()
	stop()
	cancel()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "aggregated: %v\n", err)
	}
	return code
}

// getEnv returns the control plane, or skips the test when its binaries are missing.
func getEnv(t testing.TB) *testenv.Env {
	t.Helper()
	if env == nil {
		t.Skip(skipReason)
	}
	return env
}

// startAggregatedServer installs and registers the server the way artifacts/apiserver
// describes, with the Deployment replaced by a process on a loopback port.
func startAggregatedServer(ctx context.Context, e *testenv.Env) (stop func(), err error) {
	artifacts := filepath.Join(e.RepoRoot, "artifacts", "apiserver")
	// The server's namespace, ServiceAccount and RBAC, the user roles and the policy that keeps
	// approvals to the server, exactly as shipped.
	for _, f := range []string{"../controller/namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "user-roles.yaml", "../policy/approvals.yaml"} {
		if out, err := e.Kubectl(ctx, "apply", "-f", filepath.Join(artifacts, f)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("applying %s: %w\n%s", f, err, out)
		}
	}
	// The run key, made by the controller's own code where the controller keeps it.
	if runKey, err = makeRunKey(ctx, e); err != nil {
		return nil, err
	}
	kubeconfig, err := e.ServiceAccountKubeconfig(ctx, serverNamespace, serverName)
	if err != nil {
		return nil, err
	}
	cert, err := e.NewServingCert(serverName, serverNamespace)
	if err != nil {
		return nil, err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	serverPort, serverCA = port, cert.CAFile

	// The server is the binary built from this tree, run as its own process, so that its
	// memory can be measured apart from the test's.
	binDir := filepath.Join(e.Dir, "bin")
	build := exec.CommandContext(ctx, "go", "build", "-o", binDir+"/", "./cmd/apiserver")
	build.Dir = e.RepoRoot
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the apiserver: %w\n%s", err, out)
	}
	logFile, err := os.Create(filepath.Join(e.Dir, "apiserver.log"))
	if err != nil {
		return nil, err
	}
	serverCtx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(serverCtx, filepath.Join(binDir, "apiserver"),
		"--secure-port="+strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--tls-cert-file="+cert.CertFile,
		"--tls-private-key-file="+cert.KeyFile,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
	)
	// The install gives the server its namespace, where it reads the run key, this way.
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+serverNamespace)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		logFile.Close()
		return nil, fmt.Errorf("starting the apiserver: %w", err)
	}
	serverPID = cmd.Process.Pid
	// exited is closed once the server has exited, with its exit error in exitErr: stopServer
	// waits for it without looking at the error (cancelled, the server exits by SIGTERM), the
	// start-up below reports it.
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	stopServer := func() {
		cancel()
		<-exited
		logFile.Close()
	}
	fail := func(err error) (func(), error) {
		stopServer()
		return nil, err
	}
	readyErr := make(chan error, 1)
	go func() { readyErr <- testenv.WaitForHTTPSReady(ctx, port, cert.CAFile, 90*time.Second) }()
	select {
	case <-exited:
		if exitErr == nil {
			return fail(fmt.Errorf("the apiserver exited (log: %s)", logFile.Name()))
		}
		return fail(fmt.Errorf("the apiserver exited: %w (log: %s)", exitErr, logFile.Name()))
	case err := <-readyErr:
		if err != nil {
			return fail(err)
		}
	}

	if err := e.RegisterAPIService(ctx, serverNamespace, serverName, apiServiceName, port, cert.CAPEM); err != nil {
		return fail(err)
	}
	stopKCM, err := e.StartClusterRoleAggregation(ctx)
	if err != nil {
		return fail(err)
	}
	return func() { stopKCM(); stopServer() }, nil
}

// makeRunKey makes the Secret captf-run-key in the server's namespace as the controller makes it
// on its first start, and returns its key.
func makeRunKey(ctx context.Context, e *testenv.Env) (runkey.Key, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return runkey.Key{}, err
	}
	c, err := client.New(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		return runkey.Key{}, err
	}
	key, err := controller.LoadRunKey(ctx, c, serverNamespace, serverNamespace)
	if err != nil {
		return runkey.Key{}, fmt.Errorf("making the run key: %w", err)
	}
	return key, nil
}
