package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/runner"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{SkipCRDs: false}))
}

// harness is one object's state: a namespace and a secret suffix of its own on the test
// apiserver, and a module from testdata.
type harness struct {
	t      *testing.T
	env    *testenv.Env
	client kubernetes.Interface
	ns     string
	suffix string
	module string
	tofu   string
	key    string
}

// newHarness gives a test its own namespace and state, for the testdata module named module.
func newHarness(t *testing.T, module string) *harness {
	t.Helper()
	testenv.RequireBinaries(t, testenv.TofuBinary)
	env := testenv.Get(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "runner-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	binDir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	_, here, _, _ := runtime.Caller(0)
	h := &harness{
		t:      t,
		env:    env,
		client: client,
		ns:     ns.Name,
		suffix: randomHex(t, 8) + "-c",
		module: filepath.Join(filepath.Dir(here), "..", "testdata", "modules", module),
		tofu:   filepath.Join(binDir, testenv.TofuBinary),
	}
	h.key = h.writeKey(randomHex(t, 16)) // 32 bytes
	return h
}

// sibling is a second object in the same namespace, with its own state.
func (h *harness) sibling() *harness {
	s := *h
	s.suffix = randomHex(h.t, 8) + "-c"
	return &s
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// writeKey writes a plan key file and returns its path.
func (h *harness) writeKey(key string) string {
	h.t.Helper()
	path := filepath.Join(h.t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(key), 0o440); err != nil {
		h.t.Fatal(err)
	}
	return path
}

// render writes a config directory the way the controller renders one (controller/inputs):
// a root main.tf.json with the kubernetes backend stub, the module call passing every variable,
// the module's outputs as one sensitive output, and terraform.tfvars.json. The module source is
// the testdata module's absolute path where a Job has /captf/module.
func (h *harness) render(vars map[string]any) string {
	h.t.Helper()
	return h.renderSensitive(vars)
}

// renderSensitive renders like render and declares the variables named in sensitive
// `"sensitive": true`, as the controller declares variables from Secrets.
func (h *harness) renderSensitive(vars map[string]any, sensitive ...string) string {
	h.t.Helper()
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	sort.Strings(names)
	module := map[string]any{"source": h.module}
	variables := map[string]any{}
	for _, name := range names {
		module[name] = "${var." + name + "}"
		variables[name] = map[string]any{}
	}
	for _, name := range sensitive {
		variables[name] = map[string]any{"sensitive": true}
	}
	root := map[string]any{
		"terraform": map[string]any{"backend": map[string]any{"kubernetes": map[string]any{}}},
		"module":    map[string]any{"workspace": module},
		"output":    map[string]any{"workspace": map[string]any{"value": "${module.workspace}", "sensitive": true}},
	}
	if len(variables) > 0 {
		root["variable"] = variables
	}
	return h.writeConfig(root, vars)
}

// renderBackendOnly writes the config of a restore: a root with only the backend, no variables.
func (h *harness) renderBackendOnly() string {
	h.t.Helper()
	root := map[string]any{"terraform": map[string]any{"backend": map[string]any{"kubernetes": map[string]any{}}}}
	return h.writeConfig(root, map[string]any{})
}

func (h *harness) writeConfig(root, vars map[string]any) string {
	h.t.Helper()
	dir := h.t.TempDir()
	for name, doc := range map[string]any{"main.tf.json": root, "terraform.tfvars.json": vars} {
		data, err := json.Marshal(doc)
		if err != nil {
			h.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			h.t.Fatal(err)
		}
	}
	return dir
}

// options are the Options of one run of op against this harness's state, as a Job passes
// them: paths, the backend configuration (a kubeconfig where a Job has in_cluster_config),
// timeouts and the plan key.
func (h *harness) options(op jobs.Op, config string) runner.Options {
	o := runner.NewOptions()
	o.Op = op
	o.Bin = []string{h.tofu}
	o.Module = h.module
	o.Config = config
	o.Workdir = h.t.TempDir()
	o.Providers = filepath.Join(o.Workdir, "no-provider-mirror")
	o.ResultFile = filepath.Join(h.t.TempDir(), "termination-log")
	o.Image = "registry.example/modules/test:v1"
	o.BackendConfig = []string{
		"config_path=" + h.env.Kubeconfig,
		"namespace=" + h.ns,
		"secret_suffix=" + h.suffix,
		"labels=" + jobspec.BackendLabels(jobs.KindCluster, "web", "prod"),
	}
	o.LockTimeout = 30 * time.Second
	o.StopTimeout = 30 * time.Second
	o.PlanKeyFile = h.key
	o.Environ = os.Environ()
	return o
}

// runResult is what one run left behind.
type runResult struct {
	jobs.RunnerResult
	code int
	log  string
	// doc is the result file as written.
	doc []byte
}

// run runs op with vars rendered into a fresh config; mut adjusts the options.
func (h *harness) run(op jobs.Op, vars map[string]any, mut func(*runner.Options)) runResult {
	h.t.Helper()
	o := h.options(op, h.render(vars))
	if mut != nil {
		mut(&o)
	}
	return h.runOptions(context.Background(), o)
}

func (h *harness) runOptions(ctx context.Context, o runner.Options) runResult {
	h.t.Helper()
	log := &syncBuffer{}
	o.Stdout, o.Stderr = log, log
	if err := o.Validate(); err != nil {
		h.t.Fatal(err)
	}
	res, code := runner.Run(ctx, o)
	doc, err := os.ReadFile(o.ResultFile)
	if err != nil {
		h.t.Fatalf("reading the result: %v\nlog:\n%s", err, log)
	}
	if len(doc) > jobs.MaxRunnerResultBytes {
		h.t.Errorf("the result has %d bytes, limit %d", len(doc), jobs.MaxRunnerResultBytes)
	}
	parsed, err := jobs.ParseRunnerResult(doc)
	if err != nil {
		h.t.Fatalf("the result does not parse: %v\n%s", err, doc)
	}
	if parsed.Op != o.Op {
		h.t.Errorf("result op %s, want %s", parsed.Op, o.Op)
	}
	return runResult{RunnerResult: res, code: code, log: log.String(), doc: doc}
}

// mustSucceed fails the test unless the run exited 0 without an error.
func (r runResult) mustSucceed(t *testing.T) runResult {
	t.Helper()
	if r.code != runner.ExitOK || r.Error != nil {
		t.Fatalf("run failed: exit %d, error %+v\nlog:\n%s", r.code, r.Error, r.log)
	}
	return r
}

// mustFail fails the test unless the run exited 1 with an error of kind.
func (r runResult) mustFail(t *testing.T, kind jobs.ErrorKind) runResult {
	t.Helper()
	if r.code != runner.ExitFailure || r.Error == nil || r.Error.Kind != kind {
		t.Fatalf("exit %d, error %+v; want exit 1 with %s\nlog:\n%s", r.code, r.Error, kind, r.log)
	}
	return r
}

func (r runResult) steps() []string {
	var names []string
	for _, s := range r.Steps {
		names = append(names, s.Name)
	}
	return names
}

func (h *harness) stateSecretName() string { return "tfstate-default-" + h.suffix }

func (h *harness) lockLeaseName() string { return "lock-" + h.stateSecretName() }

func (h *harness) stateSecret() *corev1.Secret {
	h.t.Helper()
	s, err := h.client.CoreV1().Secrets(h.ns).Get(context.Background(), h.stateSecretName(), metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("reading the state Secret: %v", err)
	}
	return s
}

// tfstate is the part of a state document the tests look at.
type tfstate struct {
	Serial    int `json:"serial"`
	Resources []struct {
		Module    string `json:"module"`
		Type      string `json:"type"`
		Name      string `json:"name"`
		Instances []struct {
			Attributes map[string]any `json:"attributes"`
		} `json:"instances"`
	} `json:"resources"`
}

// state reads and decodes the state the backend stored: gzip JSON under the tfstate key.
func (h *harness) state() (tfstate, map[string]any) {
	h.t.Helper()
	plain := gunzip(h.t, h.stateSecret().Data["tfstate"])
	var typed tfstate
	var raw map[string]any
	if err := json.Unmarshal(plain, &typed); err != nil {
		h.t.Fatal(err)
	}
	if err := json.Unmarshal(plain, &raw); err != nil {
		h.t.Fatal(err)
	}
	return typed, raw
}

// instances counts the resource instances in the state.
func (s tfstate) instances() int {
	n := 0
	for _, r := range s.Resources {
		n += len(r.Instances)
	}
	return n
}

// attribute returns an attribute of the first instance of a resource of the workspace module.
func (s tfstate) attribute(t *testing.T, name, attr string) any {
	t.Helper()
	for _, r := range s.Resources {
		if r.Name == name && len(r.Instances) > 0 {
			return r.Instances[0].Attributes[attr]
		}
	}
	t.Fatalf("the state has no resource %s", name)
	return nil
}

// inputName is the name in the input of terraform_data.this, which keeps its dynamically typed
// input as {"value": …, "type": …}.
func (s tfstate) inputName(t *testing.T) any {
	t.Helper()
	input, _ := s.attribute(t, "this", "input").(map[string]any)
	value, _ := input["value"].(map[string]any)
	return value["name"]
}

// writeState replaces the state in the Secret, as someone editing it behind OpenTofu's back.
func (h *harness) writeState(raw map[string]any) {
	h.t.Helper()
	plain, err := json.Marshal(raw)
	if err != nil {
		h.t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(plain); err != nil {
		h.t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		h.t.Fatal(err)
	}
	s := h.stateSecret()
	s.Data["tfstate"] = gz.Bytes()
	if _, err := h.client.CoreV1().Secrets(h.ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func gunzip(t *testing.T, data []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the state is not gzip: %v", err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return plain
}

// lockHolder returns the holder of the state lock Lease, "" when it is free.
func (h *harness) lockHolder() string {
	h.t.Helper()
	l, err := h.client.CoordinationV1().Leases(h.ns).Get(context.Background(), h.lockLeaseName(), metav1.GetOptions{})
	if err != nil {
		h.t.Fatalf("reading the lock Lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// syncBuffer is a log the test reads while the runner writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func vars(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[fmt.Sprint(kv[i])] = kv[i+1]
	}
	return m
}
