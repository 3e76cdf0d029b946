// Package testenv starts a real control plane for tests and for `make run`: etcd and
// kube-apiserver through controller-runtime's envtest, with front-proxy (requestheader)
// certificates so that an APIService can route to an aggregated server, the captf CRDs installed,
// and optionally kube-controller-manager for the Job controller and the garbage collector. The
// binaries come from the repository's bin/, built by `make tools`.
package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Binaries every control plane needs, by their file names in bin/.
var (
	ControlPlaneBinaries = []string{"etcd", "kube-apiserver", "kubectl"}
	// ControllerManagerBinary runs the Job controller and the garbage collector.
	ControllerManagerBinary = "kube-controller-manager"
	// TofuBinary is OpenTofu, used by the runner.
	TofuBinary = "tofu"
)

// FrontProxyClientName is the common name the aggregator's client certificate carries and the
// only name an aggregated server accepts request headers from.
const FrontProxyClientName = "front-proxy-client"

// Options selects what a control plane runs.
type Options struct {
	// ControllerManager also starts kube-controller-manager with the Job controller and the
	// garbage collector, so Jobs get pods and owned objects are collected.
	ControllerManager bool
	// ClusterAPICore installs every CRD of Cluster API's core manager, not only those captf
	// reads, and those of its kubeadm bootstrap provider (KubeadmBootstrapCRDs), so both
	// managers can run.
	ClusterAPICore bool
	// SkipCRDs leaves out the CRDs of artifacts/crd and Cluster API's.
	SkipCRDs bool
}

// FrontProxy holds the files of the front-proxy (requestheader) trust: the CA that the
// aggregated servers trust for request headers and the client certificate the aggregator uses.
type FrontProxy struct {
	CAFile         string
	ClientCertFile string
	ClientKeyFile  string
}

// Env is a running control plane.
type Env struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig file for kubectl and other processes.
	Kubeconfig string
	// Dir is a scratch directory that lives as long as the control plane.
	Dir string
	// BinDir holds the control-plane and tool binaries.
	BinDir string
	// RepoRoot is the root of the captf repository.
	RepoRoot string
	// FrontProxy is the requestheader trust configured on kube-apiserver.
	FrontProxy FrontProxy

	env *envtest.Environment
	kcm *exec.Cmd
	// kcmExited is closed once kcm has exited.
	kcmExited chan struct{}
}

// RepoRoot finds the root of the captf repository: CAPTF_REPO_ROOT if set, else the nearest
// directory above the working directory whose go.mod declares the captf module.
func RepoRoot() (string, error) {
	if root := os.Getenv("CAPTF_REPO_ROOT"); root != "" {
		return root, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && isCaptfModule(data) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no captf go.mod above the working directory; set CAPTF_REPO_ROOT")
		}
		dir = parent
	}
}

func isCaptfModule(goMod []byte) bool {
	const want = "module github.com/captf/captf\n"
	return len(goMod) >= len(want) && string(goMod[:len(want)]) == want
}

// BinDir returns the directory of the tool binaries: CAPTF_BIN_DIR if set, else <repo>/bin.
func BinDir() (string, error) {
	if dir := os.Getenv("CAPTF_BIN_DIR"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// MissingBinaries lists which of names are not executable files in BinDir.
func MissingBinaries(names ...string) []string {
	dir, err := BinDir()
	if err != nil {
		return names
	}
	var missing []string
	for _, name := range names {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	return missing
}

// Binaries lists the binaries a control plane with opts needs.
func (opts Options) Binaries() []string {
	names := append([]string{}, ControlPlaneBinaries...)
	if opts.ControllerManager {
		names = append(names, ControllerManagerBinary)
	}
	return names
}

// Start brings up a control plane. Stop it with Stop, also when Start fails halfway.
func Start(ctx context.Context, opts Options) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	if missing := MissingBinaries(opts.Binaries()...); len(missing) > 0 {
		return nil, fmt.Errorf("binaries missing from %s: %v (run `make tools`)", binDir, missing)
	}
	reapOrphans(binDir)
	dir, err := os.MkdirTemp("", "captf-env-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, BinDir: binDir, RepoRoot: root}

	if err := e.writeFrontProxy(); err != nil {
		return e, err
	}
	e.env = &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		ErrorIfCRDPathMissing: !opts.SkipCRDs,
	}
	if !opts.SkipCRDs {
		capi, err := ClusterAPICRDs(opts.ClusterAPICore)
		if err != nil {
			return e, err
		}
		e.env.CRDDirectoryPaths = append([]string{filepath.Join(root, "artifacts", "crd")}, capi...)
		if opts.ClusterAPICore {
			// Labelled in memory: the module's files lack the contract labels.
			if e.env.CRDs, err = KubeadmBootstrapCRDs(); err != nil {
				return e, err
			}
		}
	}
	args := e.env.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", e.FrontProxy.CAFile)
	args.Set("requestheader-allowed-names", FrontProxyClientName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", e.FrontProxy.ClientCertFile)
	args.Set("proxy-client-key-file", e.FrontProxy.ClientKeyFile)
	// The test apiserver serves many short-lived clients; do not let the defaults throttle them.
	args.Set("max-requests-inflight", "1000")
	args.Set("max-mutating-requests-inflight", "500")

	if _, err := e.env.Start(); err != nil {
		return e, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	admin, err := e.env.AddUser(envtest.User{Name: "captf-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return e, fmt.Errorf("adding the admin user: %w", err)
	}
	e.Config = admin.Config()
	e.Config.QPS, e.Config.Burst = 200, 400
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return e, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	e.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, kubeconfig, 0o600); err != nil {
		return e, err
	}
	if opts.ControllerManager {
		if err := e.startControllerManager(ctx); err != nil {
			return e, err
		}
	}
	return e, nil
}

func (e *Env) writeFrontProxy() error {
	ca, err := newCA("captf-test-front-proxy-ca")
	if err != nil {
		return err
	}
	client, err := ca.issue(FrontProxyClientName, nil, false)
	if err != nil {
		return err
	}
	caFile, _, err := ca.write(e.Dir, "front-proxy-ca")
	if err != nil {
		return err
	}
	certFile, keyFile, err := client.write(e.Dir, "front-proxy-client")
	if err != nil {
		return err
	}
	e.FrontProxy = FrontProxy{CAFile: caFile, ClientCertFile: certFile, ClientKeyFile: keyFile}
	return nil
}

// startControllerManager runs the parts of kube-controller-manager captf relies on: the Job
// controller and the garbage collector for its Jobs, the Deployment and ReplicaSet controllers
// for the install's Deployments, and the aggregation of the user ClusterRoles.
func (e *Env) startControllerManager(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	certDir := filepath.Join(e.Dir, "kube-controller-manager")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(e.Dir, "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(e.BinDir, ControllerManagerBinary),
		"--kubeconfig="+e.Kubeconfig,
		"--authentication-kubeconfig="+e.Kubeconfig,
		"--authorization-kubeconfig="+e.Kubeconfig,
		"--controllers=job-controller,garbage-collector-controller,clusterrole-aggregation-controller,deployment-controller,replicaset-controller",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+certDir,
		"--service-account-private-key-file="+filepath.Join(e.env.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"--use-service-account-credentials=false",
		"--kube-api-qps=200", "--kube-api-burst=400",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The controller manager must not outlive the process that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	e.kcm = cmd
	exited := make(chan struct{})
	e.kcmExited = exited
	var exitErr error // read once exited is closed
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()

	healthz := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	// The controller manager serves a self-signed certificate from its cert dir; this probe only
	// asks whether it is up.
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			e.kcm = nil
			return exitError("kube-controller-manager exited", exitErr, logPath)
		case <-deadline.C:
			return fmt.Errorf("kube-controller-manager not healthy after 60s; log: %s", tail(logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			resp, err := client.Get(healthz)
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
	}
}

// AddUser creates a client-certificate user of the control plane and returns its client
// configuration and the path of a kubeconfig file for it. RBAC decides what it may do.
func (e *Env) AddUser(name string, groups ...string) (*rest.Config, string, error) {
	user, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(e.Dir, "kubeconfig-"+name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, "", err
	}
	return user.Config(), path, nil
}

// Kubectl returns a command that runs the real kubectl against the control plane as admin.
func (e *Env) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(e.BinDir, "kubectl"), append([]string{"--kubeconfig=" + e.Kubeconfig}, args...)...)
}

// Stop stops everything Start started and removes the scratch directory.
func (e *Env) Stop() error {
	var errs []error
	if e.kcm != nil {
		_ = syscall.Kill(-e.kcm.Process.Pid, syscall.SIGTERM)
		select {
		case <-e.kcmExited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-e.kcm.Process.Pid, syscall.SIGKILL)
			<-e.kcmExited
		}
		e.kcm = nil
	}
	if e.env != nil {
		if err := e.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
	}
	if e.Dir != "" {
		if err := os.RemoveAll(e.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the end of a log file for an error message.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const maxTail = 4000
	if len(data) > maxTail {
		data = data[len(data)-maxTail:]
	}
	return string(data)
}

// exitError reports a process that exited while it should have kept running: what happened,
// its exit error (nil for a clean exit) and the end of its log.
func exitError(what string, err error, logPath string) error {
	if err == nil {
		return fmt.Errorf("%s (exit status 0); log: %s", what, tail(logPath))
	}
	return fmt.Errorf("%s (%w); log: %s", what, err, tail(logPath))
}
