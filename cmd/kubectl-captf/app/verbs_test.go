package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// historyRun is a run of a target created minutes before now.
func historyRun(kind, name, op string, attempt int32, minutesAgo int, phase runsv1alpha1.RunPhase) runsv1alpha1.Run {
	created := metav1.NewTime(now.Add(-time.Duration(minutesAgo) * time.Minute))
	return runsv1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + op + "-a" + string(rune('0'+attempt)), CreationTimestamp: created},
		Spec:       runsv1alpha1.RunSpec{Target: runsv1alpha1.Target{Kind: kind, Name: name}, Operation: op, Attempt: attempt},
		Status:     runsv1alpha1.RunStatus{Phase: phase, StartTime: &created, RetryNumber: 1},
	}
}

func TestBuildHistory(t *testing.T) {
	const tc, tm = "TerraformCluster", "TerraformMachine"
	for _, tt := range []struct {
		rule string
		runs []runsv1alpha1.Run
		want string // target/op: attempts, oldest first; timelines separated by ";"
	}{
		{rule: "no runs, no timelines", want: ""},
		{rule: "each operation is a timeline of its own, oldest run first",
			runs: []runsv1alpha1.Run{
				historyRun(tc, "web", "apply", 2, 5, runsv1alpha1.RunPhaseFailed),
				historyRun(tc, "web", "drift", 1, 20, runsv1alpha1.RunPhaseSucceeded),
				historyRun(tc, "web", "apply", 1, 30, runsv1alpha1.RunPhaseSucceeded),
				historyRun(tc, "web", "apply", 3, 1, runsv1alpha1.RunPhaseRunning),
			},
			want: "TerraformCluster/web/apply:1,2,3;TerraformCluster/web/drift:1"},
		{rule: "operations come in the run model's order, plan after apply",
			runs: []runsv1alpha1.Run{
				historyRun(tc, "web", "plan", 1, 10, runsv1alpha1.RunPhaseSucceeded),
				historyRun(tc, "web", "restore", 1, 40, runsv1alpha1.RunPhaseSucceeded),
				historyRun(tc, "web", "apply", 1, 50, runsv1alpha1.RunPhaseSucceeded),
			},
			want: "TerraformCluster/web/apply:1;TerraformCluster/web/plan:1;TerraformCluster/web/restore:1"},
		{rule: "runs created in the same second are ordered by attempt",
			runs: []runsv1alpha1.Run{
				historyRun(tc, "web", "apply", 2, 5, runsv1alpha1.RunPhaseFailed),
				historyRun(tc, "web", "apply", 1, 5, runsv1alpha1.RunPhaseFailed),
			},
			want: "TerraformCluster/web/apply:1,2"},
		{rule: "objects of the same name but another kind are kept apart",
			runs: []runsv1alpha1.Run{
				historyRun(tm, "web", "apply", 1, 5, runsv1alpha1.RunPhaseSucceeded),
				historyRun(tc, "web", "apply", 1, 9, runsv1alpha1.RunPhaseSucceeded),
			},
			want: "TerraformCluster/web/apply:1;TerraformMachine/web/apply:1"},
		{rule: "a run of an unknown operation comes last",
			runs: []runsv1alpha1.Run{
				historyRun(tc, "web", "", 0, 5, runsv1alpha1.RunPhaseSucceeded),
				historyRun(tc, "web", "refresh", 1, 9, runsv1alpha1.RunPhaseSucceeded),
			},
			want: "TerraformCluster/web/refresh:1;TerraformCluster/web/:0"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			h := BuildHistory(tt.runs)
			var got []string
			for _, op := range h.Operations {
				var attempts []string
				for _, r := range op.Runs {
					attempts = append(attempts, string(rune('0'+r.Attempt)))
				}
				got = append(got, op.Target.Kind+"/"+op.Target.Name+"/"+op.Operation+":"+strings.Join(attempts, ","))
			}
			if strings.Join(got, ";") != tt.want {
				t.Errorf("timelines %q, want %q", strings.Join(got, ";"), tt.want)
			}
		})
	}
}

func TestPrintHistoryShowsBackoffWindows(t *testing.T) {
	failed := historyRun("TerraformCluster", "web", "apply", 2, 2, runsv1alpha1.RunPhaseFailed)
	failed.Status.Duration = &metav1.Duration{Duration: 8400 * time.Millisecond}
	failed.Status.Backoff = &runsv1alpha1.Backoff{Failures: 1, Delay: metav1.Duration{Duration: time.Minute}, RetryAfter: metav1.NewTime(now.Add(45 * time.Second)), Active: true}
	failed.Status.Error = &runsv1alpha1.RunError{Kind: "step", Step: "apply"}
	older := historyRun("TerraformCluster", "web", "drift", 1, 60, runsv1alpha1.RunPhaseFailed)
	older.Status.Backoff = &runsv1alpha1.Backoff{Failures: 1, Delay: metav1.Duration{Duration: time.Minute}, RetryAfter: metav1.NewTime(now.Add(-58 * time.Minute))}
	var out bytes.Buffer
	if err := PrintHistory(&out, BuildHistory([]runsv1alpha1.Run{failed, older}), now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"TerraformCluster/web\n  apply\n",
		"1m0s, open until 2026-11-30T15:00:45Z (in 45s)",
		"8s", "step/apply",
		"1m0s, passed at 2026-11-30T14:02:00Z",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("history lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFindTarget: a name is looked up among the three kinds; an ambiguous one lists the kinds,
// and --kind picks one.
func TestFindTarget(t *testing.T) {
	obj := func(o infrav1.Workspace) infrav1.Workspace {
		o.SetNamespace("ns")
		o.SetName("web")
		return o
	}
	for _, tt := range []struct {
		rule    string
		objects []infrav1.Workspace
		kind    string
		want    string // the kind found, or text of the error
	}{
		{rule: "the one object of the name is found", objects: []infrav1.Workspace{obj(&infrav1.TerraformMachine{})}, want: "TerraformMachine"},
		{rule: "no object of the name is a clear error", want: `no TerraformCluster, TerraformMachine or TerraformMachinePool named "web" in namespace ns`},
		{rule: "several objects of the name list their kinds", objects: []infrav1.Workspace{obj(&infrav1.TerraformCluster{}), obj(&infrav1.TerraformMachinePool{})},
			want: `"web" names a TerraformCluster and a TerraformMachinePool in namespace ns: pick one with --kind=cluster|machinepool`},
		{rule: "--kind picks one of several", objects: []infrav1.Workspace{obj(&infrav1.TerraformCluster{}), obj(&infrav1.TerraformMachinePool{})}, kind: "machinepool", want: "TerraformMachinePool"},
		{rule: "--kind of a kind without the name is not found", objects: []infrav1.Workspace{obj(&infrav1.TerraformCluster{})}, kind: "machine", want: `TerraformMachine "web" not found in namespace ns`},
		{rule: "an unknown --kind lists the kinds", kind: "bogus", want: "cluster, machine or machinepool"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(Scheme())
			for _, o := range tt.objects {
				b = b.WithObjects(o)
			}
			got, err := findTarget(context.Background(), b.Build(), "ns", "web", tt.kind)
			if err != nil {
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q, want %q", err, tt.want)
				}
				return
			}
			if got.Kind.Kind != tt.want {
				t.Errorf("found %s, want %s", got, tt.want)
			}
		})
	}
}

// TestVerbsSayWhatTheyNeed: every command is in a help group, names its ClusterRole, ends its
// long help with the rights it needs and shows an example.
func TestVerbsSayWhatTheyNeed(t *testing.T) {
	root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	for _, name := range []string{"suspend", "resume", "reconcile", "replan", "unlock", "history"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("no command %s: %v", name, err)
		}
		checkVerbHelp(t, cmd)
	}
}

func checkVerbHelp(t *testing.T, cmd *cobra.Command) {
	t.Helper()
	paragraphs := strings.Split(cmd.Long, "\n\n")
	if !strings.HasPrefix(paragraphs[len(paragraphs)-1], "Rights needed:") {
		t.Errorf("%s: the long help does not end with the rights needed", cmd.Name())
	}
	role := cmd.Annotations[RoleAnnotation]
	if role == "" || !strings.Contains(paragraphs[len(paragraphs)-1], role) {
		t.Errorf("%s: role %q is not named in the rights needed", cmd.Name(), role)
	}
	if cmd.GroupID == "" || !strings.HasPrefix(cmd.Example, "  # ") || !strings.Contains(cmd.Example, "kubectl captf "+cmd.Name()) {
		t.Errorf("%s: group %q, example %q", cmd.Name(), cmd.GroupID, cmd.Example)
	}
}
