package workspace_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/jobs"
)

var optIn = map[string]string{infrav1.VariablesLabel: "true"}

func (h *harness) secretSource(name string, labels map[string]string, data map[string]string) {
	h.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: labels}, StringData: data}
	if err := h.c.Create(h.ctx, s); err != nil {
		h.t.Fatal(err)
	}
}

// setConfigMapValue sets one key of a ConfigMap of the harness's namespace.
func (h *harness) setConfigMapValue(name, key, value string) {
	h.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, cm); err != nil {
		h.t.Fatal(err)
	}
	cm.Data[key] = value
	if err := h.c.Update(h.ctx, cm); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) configMapSource(name string, labels map[string]string, data map[string]string) {
	h.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: labels}, Data: data}
	if err := h.c.Create(h.ctx, cm); err != nil {
		h.t.Fatal(err)
	}
}

func secretRef(name string) infrav1.VariablesSource {
	return infrav1.VariablesSource{SecretRef: &infrav1.SourceReference{Name: name}}
}

func configMapRef(name string, format infrav1.VariablesFormat) infrav1.VariablesSource {
	return infrav1.VariablesSource{ConfigMapRef: &infrav1.SourceReference{Name: name}, Format: format}
}

func TestVariablesFromSecretsAndConfigMaps(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.secretSource("creds", optIn, map[string]string{"token": "s3cret", "region": "from-secret", "zone": "from-secret"})
	h.configMapSource("settings", optIn, map[string]string{"sizes": `{"a":1}`, "region": `"from-configmap"`, "zone": `"from-configmap"`})
	tc := h.cluster("web", func(tc *infrav1.TerraformCluster) {
		tc.Spec.VariablesFrom = []infrav1.VariablesSource{secretRef("creds"), configMapRef("settings", infrav1.VariablesFormatJSON)}
	})
	h.settle(tc)
	h.wantDependencies(tc, jobs.KindCluster, metav1.ConditionTrue, conditions.ReasonDependenciesReady)
	durable := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	if durable == nil {
		t.Fatal("no apply started")
	}
	var root struct {
		Variable map[string]map[string]any `json:"variable"`
	}
	var vars map[string]any
	if err := json.Unmarshal(durable.Data["main.tf.json"], &root); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(durable.Data["terraform.tfvars.json"], &vars); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"a Secret's key is a variable", vars["token"], "s3cret"},
		{"a Secret's value is sensitive in the root", root.Variable["token"]["sensitive"], true},
		{"a JSON-format value is parsed", equalJSON(vars["sizes"], map[string]any{"a": 1}), true},
		{"a later source wins", vars["zone"], "from-configmap"},
		{"a ConfigMap's value is not sensitive", root.Variable["zone"]["sensitive"], nil},
		{"spec.variables wins over the sources", vars["region"], "eu"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.rule, tc.got, tc.want)
		}
	}
}

func TestVariablesFromRefusesWhatItCannotUse(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		prepare func(h *harness)
		sources []infrav1.VariablesSource
		reason  string
		names   string
	}{
		{"a missing source", func(*harness) {}, []infrav1.VariablesSource{secretRef("none")}, conditions.ReasonVariablesSourceNotFound, "Secret none"},
		{"a source without the opt-in label", func(h *harness) { h.secretSource("plain", nil, map[string]string{"a": "b"}) },
			[]infrav1.VariablesSource{secretRef("plain")}, conditions.ReasonVariablesSourceNotFound, infrav1.VariablesLabel},
		{"a key that is no variable name", func(h *harness) { h.configMapSource("bad", optIn, map[string]string{"a.b": "x"}) },
			[]infrav1.VariablesSource{configMapRef("bad", "")}, conditions.ReasonVariablesInvalid, "key a.b"},
		{"a key that is a contract input", func(h *harness) { h.configMapSource("input", optIn, map[string]string{"captf_cluster": "x"}) },
			[]infrav1.VariablesSource{configMapRef("input", "")}, conditions.ReasonVariablesInvalid, "key captf_cluster"},
		{"a value that is not JSON in format JSON", func(h *harness) { h.secretSource("notjson", optIn, map[string]string{"k": "{nope"}) },
			[]infrav1.VariablesSource{{SecretRef: &infrav1.SourceReference{Name: "notjson"}, Format: infrav1.VariablesFormatJSON}}, conditions.ReasonVariablesInvalid, "key k"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			tc.prepare(h)
			obj := h.cluster("web", func(c *infrav1.TerraformCluster) { c.Spec.VariablesFrom = tc.sources })
			h.settle(obj)
			h.wantDependencies(obj, jobs.KindCluster, metav1.ConditionFalse, tc.reason)
			c := conditions.Get(obj.Status.Conditions, conditions.DependenciesReady)
			if !strings.Contains(c.Message, tc.names) || strings.Contains(c.Message, "{nope") {
				t.Fatalf("message %q does not name %q, or shows a value", c.Message, tc.names)
			}
		})
	}
}

func TestAnOptionalMissingSourceIsSkipped(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Spec.VariablesFrom = []infrav1.VariablesSource{{SecretRef: &infrav1.SourceReference{Name: "later"}, Optional: true}}
	})
	h.settle(tc)
	h.wantDependencies(tc, jobs.KindCluster, metav1.ConditionTrue, conditions.ReasonDependenciesReady)
	if len(h.jobs(jobs.KindCluster, "web")) != 1 {
		t.Fatal("no apply without the optional source")
	}
}
