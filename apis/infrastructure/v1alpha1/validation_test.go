package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}))
}

func newClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(testenv.Get(t).Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cluster(name string, mutate func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "modules/net:v1"}}},
	}
	if mutate != nil {
		mutate(tc)
	}
	return tc
}

func TestTheAPIServerRejectsInvalidSpecsWithAFieldPath(t *testing.T) {
	c := newClient(t)
	for i, tc := range []struct {
		rule      string
		mutate    func(*infrav1.TerraformCluster)
		wantField string
	}{
		{"the image is required", func(c *infrav1.TerraformCluster) { c.Spec.Source.Image = "" }, "spec.source.image"},
		{"the image is at most 512 characters", func(c *infrav1.TerraformCluster) { c.Spec.Source.Image = strings.Repeat("a", 513) }, "spec.source.image"},
		{"the successful history limit is at most 100", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.SuccessfulJobsHistoryLimit = ptr.To[int32](101) }, "spec.jobs.successfulJobsHistoryLimit"},
		{"the failed history limit is not negative", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.FailedJobsHistoryLimit = ptr.To[int32](-1) }, "spec.jobs.failedJobsHistoryLimit"},
		{"the deadline is at least a second", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.ActiveDeadlineSeconds = ptr.To[int64](0) }, "spec.jobs.activeDeadlineSeconds"},
		{"the deadline is at most a day", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.ActiveDeadlineSeconds = ptr.To[int64](86401) }, "spec.jobs.activeDeadlineSeconds"},
		{"the lock timeout is below the deadline", func(c *infrav1.TerraformCluster) {
			c.Spec.Jobs.ActiveDeadlineSeconds, c.Spec.Jobs.LockTimeoutSeconds = ptr.To[int64](600), ptr.To[int64](600)
		}, "spec.jobs.lockTimeoutSeconds"},
		{"the lock timeout is below the default deadline", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.LockTimeoutSeconds = ptr.To[int64](3600) }, "spec.jobs.lockTimeoutSeconds"},
		{"the CLI configuration Secret needs a name", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.CLIConfigSecretRef = &infrav1.SourceReference{} }, "spec.jobs.cliConfigSecretRef.name"},
		{"the CLI configuration Secret's name is at most 253 characters", func(c *infrav1.TerraformCluster) {
			c.Spec.Jobs.CLIConfigSecretRef = &infrav1.SourceReference{Name: strings.Repeat("a", 254)}
		}, "spec.jobs.cliConfigSecretRef.name"},
		{"the apply policy is Automatic or Manual", func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = "Sometimes" }, "spec.applyPolicy"},
		{"the drift action is Report or Remediate", func(c *infrav1.TerraformCluster) { c.Spec.Drift.Action = "Ignore" }, "spec.drift.action"},
		{"variables are a JSON object", func(c *infrav1.TerraformCluster) { c.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`[1]`)} }, "spec.variables"},
		{"a variables source names a ConfigMap or a Secret", func(c *infrav1.TerraformCluster) {
			c.Spec.VariablesFrom = []infrav1.VariablesSource{{Optional: true}}
		}, "spec.variablesFrom[0]"},
		{"a variables source names not both", func(c *infrav1.TerraformCluster) {
			c.Spec.VariablesFrom = []infrav1.VariablesSource{{ConfigMapRef: &infrav1.SourceReference{Name: "a"}, SecretRef: &infrav1.SourceReference{Name: "a"}}}
		}, "spec.variablesFrom[0]"},
		{"a variables source's format is String or JSON", func(c *infrav1.TerraformCluster) {
			c.Spec.VariablesFrom = []infrav1.VariablesSource{{SecretRef: &infrav1.SourceReference{Name: "a"}, Format: "YAML"}}
		}, "spec.variablesFrom[0].format"},
		{"at most 16 variables sources", func(c *infrav1.TerraformCluster) {
			for i := 0; i < 17; i++ {
				c.Spec.VariablesFrom = append(c.Spec.VariablesFrom, infrav1.VariablesSource{SecretRef: &infrav1.SourceReference{Name: "a"}})
			}
		}, "spec.variablesFrom"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			err := c.Create(context.Background(), cluster("bad-"+string(rune('a'+i)), tc.mutate))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create = %v, want Invalid", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("error %q does not name %s", err, tc.wantField)
			}
		})
	}
}

func TestAValidSpecWithEveryLimitAtItsBoundIsAccepted(t *testing.T) {
	c := newClient(t)
	tc := cluster("good", func(c *infrav1.TerraformCluster) {
		c.Spec.Jobs.SuccessfulJobsHistoryLimit, c.Spec.Jobs.FailedJobsHistoryLimit = ptr.To[int32](0), ptr.To[int32](100)
		c.Spec.Jobs.ActiveDeadlineSeconds, c.Spec.Jobs.LockTimeoutSeconds = ptr.To[int64](86400), ptr.To[int64](3600)
		c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual
		c.Spec.Jobs.CLIConfigSecretRef = &infrav1.SourceReference{Name: strings.Repeat("a", 253)}
	})
	if err := c.Create(context.Background(), tc); err != nil {
		t.Fatal(err)
	}
}

func TestMachineSourceAndVariablesAreImmutable(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	m := &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: "default"},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Source: infrav1.SourceSpec{Image: "modules/vm:v1"}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{"size":"s"}`)},
			VariablesFrom: []infrav1.VariablesSource{{SecretRef: &infrav1.SourceReference{Name: "creds"}}},
		}},
	}
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule      string
		mutate    func(*infrav1.TerraformMachine)
		wantField string
	}{
		{"the source is immutable", func(m *infrav1.TerraformMachine) { m.Spec.Source.Image = "modules/vm:v2" }, "spec.source"},
		{"the variables are immutable", func(m *infrav1.TerraformMachine) { m.Spec.Variables.Raw = []byte(`{"size":"l"}`) }, "spec.variables"},
		{"the variables cannot be removed", func(m *infrav1.TerraformMachine) { m.Spec.Variables = nil }, "spec.variables"},
		{"the variables sources are immutable", func(m *infrav1.TerraformMachine) { m.Spec.VariablesFrom[0].SecretRef.Name = "other" }, "spec.variablesFrom"},
		{"the variables sources cannot be removed", func(m *infrav1.TerraformMachine) { m.Spec.VariablesFrom = nil }, "spec.variablesFrom"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var current infrav1.TerraformMachine
			if err := c.Get(ctx, client.ObjectKeyFromObject(m), &current); err != nil {
				t.Fatal(err)
			}
			tc.mutate(&current)
			err := c.Update(ctx, &current)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("update = %v, want Invalid naming %s", err, tc.wantField)
			}
		})
	}
	t.Run("the job policy stays mutable", func(t *testing.T) {
		var current infrav1.TerraformMachine
		if err := c.Get(ctx, client.ObjectKeyFromObject(m), &current); err != nil {
			t.Fatal(err)
		}
		current.Spec.Jobs.FailedJobsHistoryLimit = ptr.To[int32](5)
		if err := c.Update(ctx, &current); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTemplatesAreServedAndKeepProviderIDsToTheModule(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	spec := infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "modules/net:v1"}}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "default"} }
	tmplMeta := infrav1.TemplateObjectMeta{Labels: map[string]string{"tier": "a"}}
	for _, tc := range []struct {
		rule      string
		obj       client.Object
		wantField string // "" when the template is accepted
	}{
		{"a cluster template is served", &infrav1.TerraformClusterTemplate{ObjectMeta: meta("ct"),
			Spec: infrav1.TerraformClusterTemplateSpec{Template: infrav1.TerraformClusterTemplateResource{ObjectMeta: tmplMeta, Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: spec}}}}, ""},
		{"a machine template is served", &infrav1.TerraformMachineTemplate{ObjectMeta: meta("mt"),
			Spec: infrav1.TerraformMachineTemplateSpec{Template: infrav1.TerraformMachineTemplateResource{ObjectMeta: tmplMeta, Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: spec}}}}, ""},
		{"a pool template is served", &infrav1.TerraformMachinePoolTemplate{ObjectMeta: meta("pt"),
			Spec: infrav1.TerraformMachinePoolTemplateSpec{Template: infrav1.TerraformMachinePoolTemplateResource{ObjectMeta: tmplMeta, Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: spec}}}}, ""},
		{"a machine template does not set a provider ID", &infrav1.TerraformMachineTemplate{ObjectMeta: meta("mt-id"),
			Spec: infrav1.TerraformMachineTemplateSpec{Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: spec, ProviderID: "aws:///i-1"}}}},
			"spec.template.spec.providerID"},
		{"a pool template does not list provider IDs", &infrav1.TerraformMachinePoolTemplate{ObjectMeta: meta("pt-ids"),
			Spec: infrav1.TerraformMachinePoolTemplateSpec{Template: infrav1.TerraformMachinePoolTemplateResource{Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: spec, ProviderIDList: []string{"p"}}}}},
			"spec.template.spec.providerIDList"},
		{"a pool template does not set a group provider ID", &infrav1.TerraformMachinePoolTemplate{ObjectMeta: meta("pt-id"),
			Spec: infrav1.TerraformMachinePoolTemplateSpec{Template: infrav1.TerraformMachinePoolTemplateResource{Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: spec, ProviderID: "g"}}}},
			"spec.template.spec.providerID"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			err := c.Create(ctx, tc.obj)
			switch {
			case tc.wantField == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.wantField != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantField)):
				t.Fatalf("err = %v, want Invalid at %s", err, tc.wantField)
			}
		})
	}
}

func TestAnIdentityNamesItsSecretAndAllowsNamespacesExplicitly(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		rule      string
		spec      infrav1.TerraformClusterIdentitySpec
		wantField string
	}{
		{"the Secret's name is required", infrav1.TerraformClusterIdentitySpec{SecretRef: infrav1.SecretReference{Namespace: "ids"}}, "spec.secretRef.name"},
		{"the Secret's namespace is required", infrav1.TerraformClusterIdentitySpec{SecretRef: infrav1.SecretReference{Name: "cloud"}}, "spec.secretRef.namespace"},
		{"empty allowed namespaces say nothing and are refused", infrav1.TerraformClusterIdentitySpec{
			SecretRef: infrav1.SecretReference{Name: "cloud", Namespace: "ids"}, AllowedNamespaces: &infrav1.AllowedNamespaces{}}, "spec.allowedNamespaces"},
		{"at most 100 namespaces by name", infrav1.TerraformClusterIdentitySpec{
			SecretRef: infrav1.SecretReference{Name: "cloud", Namespace: "ids"}, AllowedNamespaces: &infrav1.AllowedNamespaces{List: manyNames(101)}}, "spec.allowedNamespaces.list"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			err := c.Create(ctx, &infrav1.TerraformClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: "id-bad"}, Spec: tc.spec})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("create = %v, want Invalid naming %s", err, tc.wantField)
			}
		})
	}
	good := &infrav1.TerraformClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: "id-good"}, Spec: infrav1.TerraformClusterIdentitySpec{
		SecretRef: infrav1.SecretReference{Name: "cloud", Namespace: "ids"}, AllowedNamespaces: &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{}}}}
	if err := c.Create(ctx, good); err != nil {
		t.Fatal(err)
	}
}

func manyNames(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("ns-%d", i))
	}
	return out
}
