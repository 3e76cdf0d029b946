package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

func TestPrintable(t *testing.T) {
	for _, tt := range []struct {
		rule, in, want, wantText string
	}{
		{rule: "plain text is kept", in: "root@captf-c-web-apply-a1-x", want: "root@captf-c-web-apply-a1-x"},
		{rule: "other scripts and symbols are kept", in: "café ✓ 日本", want: "café ✓ 日本"},
		{rule: "ESC is escaped", in: "a\x1b[2Jb", want: `a\x1b[2Jb`},
		{rule: "an OSC sequence loses its ESC and BEL", in: "\x1b]0;owned\x07", want: `\x1b]0;owned\x07`},
		{rule: "carriage return and backspace are escaped", in: "ok\r\bno", want: `ok\x0d\x08no`},
		{rule: "DEL is escaped", in: "a\x7fb", want: `a\x7fb`},
		{rule: "C1 controls are escaped", in: "a\u009b2Jb\u0085", want: `a\u009b2Jb\u0085`},
		{rule: "bytes that are not UTF-8 are escaped", in: "a\x9b2J\xffb", want: `a\x9b2J\xffb`},
		{rule: "bidirectional controls are escaped", in: "a\u202eb\u2066c", want: `a\u202eb\u2066c`},
		{rule: "a value's newline and tab are escaped, a text's are kept", in: "a\nb\tc\x1b", want: `a\x0ab\x09c\x1b`, wantText: "a\nb\tc\\x1b"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			if got := Printable(tt.in); got != tt.want {
				t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
			}
			wantText := tt.wantText
			if wantText == "" {
				wantText = tt.want
			}
			if got := PrintableText(tt.in); got != wantText {
				t.Errorf("PrintableText(%q) = %q, want %q", tt.in, got, wantText)
			}
		})
	}
}

// A value that would clear the screen, retitle the window, hide text, and forge a line.
const (
	escClear  = "\x1b[2J\x1b[H"
	escTitle  = "\x1b]0;owned\x07"
	csiC1     = "\u009b8m"
	forgeLine = "\nStale:     yes: forged"
)

// fakeCluster is a fake API server holding a TerraformCluster web in namespace ns and objs.
func fakeCluster(funcs interceptor.Funcs, objs ...client.Object) func() (client.Client, error) {
	web := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(append(objs, web)...).WithInterceptorFuncs(funcs).Build()
	return func() (client.Client, error) { return c, nil }
}

// lockLease is web's state lock Lease held by holder, with details info (none when nil).
func lockLease(holder string, info map[string]string) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: state.LockLeaseName(jobs.StateSecretSuffix("ns", jobs.KindCluster, "web"))},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
	}
	if info != nil {
		data, _ := json.Marshal(info)
		lease.Annotations = map[string]string{workspace.LockInfoAnnotation: string(data)}
	}
	return lease
}

// awaitingPlan is a plan of web that waits for approval, with a resource address that carries
// escape sequences, as a module's run can report.
func awaitingPlan() *runsv1alpha1.Plan {
	p := &runsv1alpha1.Plan{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "captf-c-web-plan-a1-76a829"}}
	p.Spec.Target = runsv1alpha1.Target{Kind: "TerraformCluster", Name: "web"}
	p.Status.Phase = runsv1alpha1.PlanPhaseAwaitingApproval
	p.Status.PlanHash, p.Status.ApprovalHash = "p3:"+strings.Repeat("ab", 32), "p3:"+strings.Repeat("ab", 32)
	p.Status.ApprovedBy = "mallory" + csiC1
	p.Status.Resources = []runsv1alpha1.ResourceChange{{Address: `terraform_data.x["` + escClear + `"]`, Actions: []string{"update" + escTitle}}}
	return p
}

// approvalAnswer makes the fake server answer an approval by writing the status given, or err.
func approvalAnswer(status runsv1alpha1.PlanApprovalStatus, err error) interceptor.Funcs {
	return interceptor.Funcs{SubResourceCreate: func(_ context.Context, _ client.Client, sub string, _ client.Object, subResource client.Object, _ ...client.SubResourceCreateOption) error {
		if sub != "approval" {
			return errors.New("unexpected subresource " + sub)
		}
		if err != nil {
			return err
		}
		subResource.(*runsv1alpha1.PlanApproval).Status = status
		return nil
	}}
}

// TestVerbsPrintServerValuesEscaped: unlock and approve print what the cluster holds (a lock's
// holder, ID and operation, a pod's phase, a plan's addresses and approver, the server's
// messages and refusals) with no raw control character, on stdout and in the error.
func TestVerbsPrintServerValuesEscaped(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	unlock := func(o *Options) error { return o.unlock(context.Background(), "web", "", true) }
	approve := func(o *Options) error {
		return o.approve(context.Background(), "captf-c-web-plan-a1-76a829", "", true, false)
	}
	for _, tt := range []struct {
		rule    string
		cluster func() (client.Client, error)
		run     func(*Options) error
		// visible is text the output must show, escaped.
		visible []string
	}{
		{
			rule: "a lock's ID, operation and holder identity",
			cluster: fakeCluster(interceptor.Funcs{}, lockLease("6c1e9d3a"+escTitle, map[string]string{
				"ID": "6c1e9d3a" + escTitle, "Operation": "OperationTypeApply" + escClear, "Who": "alice@laptop" + forgeLine, "Created": "2026" + csiC1,
			})),
			run:     unlock,
			visible: []string{`6c1e9d3a\x1b]0;owned\x07`, `OperationTypeApply\x1b[2J`, `alice@laptop\x0aStale:`, `2026\u009b8m`, "Released the state lock"},
		},
		{
			rule:    "a lock holder with unreadable details",
			cluster: fakeCluster(interceptor.Funcs{}, lockLease("holder"+escClear+forgeLine, nil)),
			run:     unlock,
			visible: []string{`holder\x1b[2J\x1b[H\x0aStale:`, "Stale:     unknown: lock holder"},
		},
		{
			rule: "the phase of the holder's pod, which still runs",
			cluster: fakeCluster(interceptor.Funcs{},
				lockLease("6c1e9d3a", map[string]string{"ID": "6c1e9d3a", "Operation": "OperationTypeApply", "Who": "root@captf-c-web-apply-a1-26914b-q7x2k"}),
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "captf-c-web-apply-a1-26914b-q7x2k"}, Status: corev1.PodStatus{Phase: corev1.PodPhase("Running" + escClear)}}),
			run:     unlock,
			visible: []string{`phase Running\x1b[2J\x1b[H`},
		},
		{
			rule:    "a plan's resource address and actions, the approver and the server's message",
			cluster: fakeCluster(approvalAnswer(runsv1alpha1.PlanApprovalStatus{ApprovedBy: "bob" + escTitle, Message: "approved" + escClear + forgeLine}, nil), awaitingPlan()),
			run:     approve,
			visible: []string{`terraform_data.x["\x1b[2J\x1b[H"]`, `update\x1b]0;owned\x07`, `as bob\x1b]0;owned\x07`, `approved\x1b[2J\x1b[H\x0aStale:`},
		},
		{
			rule: "the server's refusal",
			cluster: fakeCluster(approvalAnswer(runsv1alpha1.PlanApprovalStatus{},
				apierrors.NewConflict(runsv1alpha1.Resource("plans"), "captf-c-web-plan-a1-76a829", errors.New("has hash p3:cd"+escTitle+forgeLine))), awaitingPlan()),
			run:     approve,
			visible: []string{`409 Conflict`, `has hash p3:cd\x1b]0;owned\x07\x0aStale:`},
		},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			streams, _, out, errOut := genericiooptions.NewTestIOStreams()
			flags := genericclioptions.NewConfigFlags(false)
			flags.Namespace = ptr.To("ns")
			o := &Options{IOStreams: streams, Flags: flags, Now: time.Now, NewClient: tt.cluster}
			if err := tt.run(o); err != nil {
				PrintError(errOut, &cobra.Command{Use: "x"}, err)
			}
			printed := out.String() + errOut.String()
			if bad := firstControl(printed); bad != "" {
				t.Errorf("the output holds the raw control character %s:\n%s", bad, printed)
			}
			if strings.Contains(printed, "\nStale:     yes: forged") {
				t.Errorf("a value forged a line of the output:\n%s", printed)
			}
			for _, want := range tt.visible {
				if !strings.Contains(printed, want) {
					t.Errorf("the output does not show %s:\n%s", want, printed)
				}
			}
		})
	}
}

// firstControl quotes the first control character of s other than the newlines that end
// lines, or is "" when there is none.
func firstControl(s string) string {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Sprintf("byte %#x", s[i])
		case r == '\n':
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return fmt.Sprintf("%U", r)
		}
		i += size
	}
	return ""
}
