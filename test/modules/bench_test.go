package modules

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/runner"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
	"github.com/captf/captf/test/testenv"
)

// BenchmarkRunCost is the cost of a run: machines of the sample machine module (two real
// providers) provisioned through captf, from the TerraformMachines' creation until every one is
// provisioned (a Job each: pod, runner, init, plan, apply, the state in its Secret, the
// status), against the same module run directly with `tofu init && tofu apply` in a fresh
// directory per machine, with the same inputs, the providers from the same mirror and the same
// parallelism (every machine at once). direct-same-steps runs, directly, the OpenTofu commands a
// captf machine runs (captfSteps), so that what captf's machinery costs shows apart from what its
// run model asks of OpenTofu. One op is one batch of machines.
func BenchmarkRunCost(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("machines=%d/captf", n), func(b *testing.B) { benchCaptf(b, n) })
		b.Run(fmt.Sprintf("machines=%d/direct", n), func(b *testing.B) { benchDirect(b, n, directSteps) })
		b.Run(fmt.Sprintf("machines=%d/direct-same-steps", n), func(b *testing.B) { benchDirect(b, n, captfSteps) })
	}
}

// directSteps are the commands of a direct run, as a pipeline runs them.
var directSteps = [][]string{{"init", "-input=false", "-lockfile=readonly"}, {"apply", "-auto-approve", "-input=false"}}

// captfSteps are the OpenTofu commands a captf machine runs for the same result: its apply Job's
// version, init, validate and apply, then the refresh Job every machine gets after an apply,
// from a fresh work directory (a nil step): version, init and apply -refresh-only.
var captfSteps = [][]string{
	{"version", "-json"}, directSteps[0], {"validate", "-json", "-no-color"}, directSteps[1],
	nil, {"version", "-json"}, directSteps[0], {"apply", "-refresh-only", "-auto-approve", "-input=false"},
}

func benchCaptf(b *testing.B, n int) {
	s := system.NewSuite(b, "modules-bench")
	for i := range b.N {
		b.StopTimer()
		// Cluster API's owners first, outside the measure: they are what a user's Machines are.
		machines := make([]*infrav1.TerraformMachine, n)
		for j := range machines {
			m := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%d-%d", i, j), Namespace: s.NS}}
			m.Spec.Source.Image = system.SampleMachineImage
			m.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(fmt.Sprintf(`{"name":%q}`, m.Name))}
			m.Spec.Drift.IntervalSeconds = new(int64)
			if err := capitest.Own(s.Ctx, s.C, m); err != nil {
				b.Fatal(err)
			}
			machines[j] = m
		}
		b.StartTimer()
		for _, m := range machines {
			if err := s.C.Create(s.Ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		// The poll's period (50 ms) is part of the measure.
		prefix := fmt.Sprintf("m-%d-", i)
		err := wait.PollUntilContextTimeout(s.Ctx, 50*time.Millisecond, 10*time.Minute, false, func(ctx context.Context) (bool, error) {
			var list infrav1.TerraformMachineList
			if err := s.C.List(ctx, &list, client.InNamespace(s.NS)); err != nil {
				return false, err
			}
			provisioned := 0
			for _, m := range list.Items {
				if strings.HasPrefix(m.Name, prefix) && m.Status.IsProvisioned() {
					provisioned++
				}
			}
			return provisioned == n, nil
		})
		if err != nil {
			b.Fatalf("%d machines provisioned: %v", n, err)
		}
	}
	b.StopTimer()
	seconds := appliesInit(b, s)
	if len(seconds) != n*b.N {
		b.Fatalf("%d applies timed, want one per machine (%d)", len(seconds), n*b.N)
	}
	reportInit(b, seconds)
}

// appliesInit returns the init step's seconds of every apply of the namespace, from the
// runners' results.
func appliesInit(b *testing.B, s *system.Suite) []float64 {
	var pods corev1.PodList
	if err := s.C.List(s.Ctx, &pods, client.InNamespace(s.NS)); err != nil {
		b.Fatal(err)
	}
	var seconds []float64
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name != jobspec.SourceContainer || c.State.Terminated == nil {
				continue
			}
			res, err := jobs.ParseRunnerResult([]byte(c.State.Terminated.Message))
			if err != nil || res.Op != jobs.OpApply {
				continue
			}
			for _, step := range res.Steps {
				if step.Name == "init" {
					seconds = append(seconds, step.Seconds)
				}
			}
		}
	}
	return seconds
}

// reportInit reports the mean seconds of tofu init per run.
func reportInit(b *testing.B, seconds []float64) {
	if len(seconds) == 0 {
		b.Fatal("no init step was timed")
	}
	var sum float64
	for _, s := range seconds {
		sum += s
	}
	b.ReportMetric(sum/float64(len(seconds)), "init-s/run")
}

func benchDirect(b *testing.B, n int, steps [][]string) {
	bin, err := testenv.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	module := filepath.Join(system.Get(b).Env.RepoRoot, "artifacts", "samples", "modules", "machine")
	lock, err := os.ReadFile(filepath.Join(module, ".terraform.lock.hcl"))
	if err != nil {
		b.Fatal(err)
	}
	cli := filepath.Join(b.TempDir(), "cli.tfrc")
	if err := os.WriteFile(cli, []byte(runner.MirrorOnlyCLIConfig(filepath.Join(bin, "providers"))), 0o600); err != nil {
		b.Fatal(err)
	}
	tofu := filepath.Join(bin, testenv.TofuBinary)
	var seconds []float64
	for i := range b.N {
		b.StopTimer()
		dirs := make([]string, n)
		for j := range dirs {
			dirs[j] = directRoot(b, module, lock, fmt.Sprintf("m-%d-%d", i, j))
		}
		b.StartTimer()
		var wg sync.WaitGroup
		errs := make([]error, n)
		inits := make([]float64, n)
		for j, dir := range dirs {
			wg.Go(func() { inits[j], errs[j] = runSteps(tofu, cli, dir, steps) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		seconds = append(seconds, inits...)
	}
	b.StopTimer()
	reportInit(b, seconds)
}

// directRoot writes the root captf renders for the machine, stand-alone, with the module's lock
// file, into a fresh directory.
func directRoot(b *testing.B, module string, lock []byte, name string) string {
	b.Helper()
	in := contract.Inputs{
		Role: contract.RoleMachine, ClusterName: "bench", Namespace: "bench", Kind: infrav1.MachineKind.Kind, Name: name,
		ClusterOutputs: json.RawMessage("{}"),
		Machine:        contract.MachineInputs{MachineName: name, Bootstrap: contract.Bootstrap{Data: []byte(capitest.BootstrapData), Format: "cloud-config"}},
	}
	rendered, err := inputs.Render(system.SampleMachineImage, in.Variables(), []byte(fmt.Sprintf(`{"name":%q}`, name)), nil, field.NewPath("spec", "variables"))
	if err != nil {
		b.Fatal(err)
	}
	root, err := rendered.Standalone(module)
	if err != nil {
		b.Fatal(err)
	}
	main, err := json.Marshal(root)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for file, data := range map[string][]byte{inputs.MainFile: main, inputs.VarsFile: rendered.Vars, ".terraform.lock.hcl": lock} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// runSteps runs the OpenTofu commands steps in dir, one after the other, and returns how long the
// first init took. A nil step removes the work directory's .terraform, as a new Job starts
// without it.
func runSteps(tofu, cli, dir string, steps [][]string) (initSeconds float64, err error) {
	env := []string{"HOME=" + dir, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1", "TF_CLI_CONFIG_FILE=" + cli, "PATH=" + os.Getenv("PATH")}
	inits := 0
	for _, args := range steps {
		if args == nil {
			if err := os.RemoveAll(filepath.Join(dir, ".terraform")); err != nil {
				return 0, err
			}
			continue
		}
		start := time.Now()
		cmd := exec.CommandContext(context.Background(), tofu, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("tofu %s in %s: %w\n%s", args[0], dir, err, out)
		}
		if args[0] == "init" && inits == 0 {
			initSeconds, inits = time.Since(start).Seconds(), 1
		}
	}
	return initSeconds, nil
}
