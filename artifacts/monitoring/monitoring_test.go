// Package monitoring holds no code: its tests check the Prometheus Operator objects of this
// kustomize directory, and the alerts' expressions against the series the code registers.
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/hack/manifest"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/testenv"
)

const (
	providerLabel = "cluster.x-k8s.io/provider"
	providerName  = "infrastructure-terraform"
	namespace     = "captf-system"
)

// kubeAPIServerSeries are the series of kube-apiserver the alerts read, with their labels.
var kubeAPIServerSeries = map[string][]string{
	"aggregator_unavailable_apiservice": {"name"},
}

// targetLabels are the labels Prometheus adds to every scraped series, beside the series' own.
var targetLabels = []string{"pod", "instance", "job", "namespace", "service", "endpoint", "container"}

// objects renders the kustomization as `kubectl apply -k` would and returns its objects.
func objects(t *testing.T) []unstructured.Unstructured {
	t.Helper()
	rendered, err := manifest.Kustomize(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(rendered) == 0 {
		t.Fatal("kustomization.yaml renders no objects")
	}
	all := make([]unstructured.Unstructured, 0, len(rendered))
	for _, obj := range rendered {
		all = append(all, *obj)
	}
	return all
}

// TestNoScrapeSkipsTLSVerification: no object here turns off verifying a server's certificate,
// under any field.
func TestNoScrapeSkipsTLSVerification(t *testing.T) {
	for _, obj := range objects(t) {
		data, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.ToLower(string(data)), "insecureskipverify") {
			t.Errorf("%s %s skips TLS verification: %s", obj.GetKind(), obj.GetName(), data)
		}
	}
}

// certManagerInstall is the install whose certificates the scrapes verify.
const certManagerInstall = "../overlays/cert-manager"

// servingFlags are the flags that give the server behind each scraped Service the certificate
// its metrics port serves.
var servingFlags = map[string]string{
	"captf-controller-metrics": "--metrics-cert-dir",
	"captf-apiserver":          "--tls-cert-file",
}

// TestEveryScrapeVerifiesTheServer: each HTTPS endpoint of a ServiceMonitor names the Service it
// scrapes as serverName and a CA Secret, and in the cert-manager install a Certificate issues
// that Secret for that name, and the Deployment behind the Service serves with it.
func TestEveryScrapeVerifiesTheServer(t *testing.T) {
	rendered, err := manifest.Kustomize(certManagerInstall)
	if err != nil {
		t.Fatal(err)
	}
	install := make([]unstructured.Unstructured, 0, len(rendered))
	for _, obj := range rendered {
		install = append(install, *obj)
	}
	monitors := 0
	for _, sm := range objects(t) {
		if sm.GetKind() != "ServiceMonitor" {
			continue
		}
		monitors++
		selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(endpoints) == 0 {
			t.Errorf("ServiceMonitor %s has no endpoints", sm.GetName())
		}
		for _, e := range endpoints {
			endpoint := e.(map[string]any)
			t.Run(sm.GetName()+"/"+fmt.Sprint(endpoint["port"]), func(t *testing.T) {
				if problem := verifiedScrape(install, selector, endpoint); problem != "" {
					t.Error(problem)
				}
			})
		}
	}
	if monitors == 0 {
		t.Fatal("no ServiceMonitor")
	}
}

// verifiedScrape says what is wrong with an endpoint's TLS against the install, or "".
func verifiedScrape(install []unstructured.Unstructured, selector map[string]string, endpoint map[string]any) string {
	if scheme, _, _ := unstructured.NestedString(endpoint, "scheme"); scheme != "https" {
		return "scheme " + scheme + ", want https"
	}
	serverName, _, _ := unstructured.NestedString(endpoint, "tlsConfig", "serverName")
	caSecret, _, _ := unstructured.NestedString(endpoint, "tlsConfig", "ca", "secret", "name")
	caKey, _, _ := unstructured.NestedString(endpoint, "tlsConfig", "ca", "secret", "key")
	if serverName == "" || caSecret == "" || caKey != "ca.crt" {
		return fmt.Sprintf("tlsConfig names server %q and CA Secret %q key %q, want a server name and the ca.crt of a Secret", serverName, caSecret, caKey)
	}
	port, _, _ := unstructured.NestedString(endpoint, "port")
	svc := scrapedService(install, selector, port)
	if svc == nil {
		return fmt.Sprintf("no Service labelled %v has a port %q", selector, port)
	}
	if want := svc.GetName() + "." + svc.GetNamespace() + ".svc"; serverName != want {
		return fmt.Sprintf("serverName %s, want the scraped Service's name %s", serverName, want)
	}
	if !issues(install, caSecret, serverName) {
		return fmt.Sprintf("no Certificate of %s issues Secret %s for %s", certManagerInstall, caSecret, serverName)
	}
	podSelector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	flag, known := servingFlags[svc.GetName()]
	if !known {
		return "no serving flag is known for Service " + svc.GetName()
	}
	if d := deploymentOf(install, podSelector); d == nil || !servesFrom(d, caSecret, flag) {
		return fmt.Sprintf("the Deployment behind Service %s does not serve with the certificate of Secret %s (%s)", svc.GetName(), caSecret, flag)
	}
	return ""
}

// scrapedService is the Service of the install a ServiceMonitor's selector and port name pick.
func scrapedService(install []unstructured.Unstructured, selector map[string]string, port string) *unstructured.Unstructured {
	for i, o := range install {
		if o.GetKind() != "Service" || !matches(o.GetLabels(), selector) {
			continue
		}
		ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
		for _, p := range ports {
			if name, _, _ := unstructured.NestedString(p.(map[string]any), "name"); name == port {
				return &install[i]
			}
		}
	}
	return nil
}

// issues reports whether a Certificate of the install issues Secret secret for dnsName.
func issues(install []unstructured.Unstructured, secret, dnsName string) bool {
	for _, o := range install {
		name, _, _ := unstructured.NestedString(o.Object, "spec", "secretName")
		names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
		if o.GetKind() == "Certificate" && name == secret && slices.Contains(names, dnsName) {
			return true
		}
	}
	return false
}

// deploymentOf is the Deployment of the install whose pods carry the labels of selector.
func deploymentOf(install []unstructured.Unstructured, selector map[string]string) *unstructured.Unstructured {
	for i, o := range install {
		labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		if o.GetKind() == "Deployment" && len(selector) > 0 && matches(labels, selector) {
			return &install[i]
		}
	}
	return nil
}

// servesFrom reports whether the Deployment's first container mounts Secret secret and its flag
// names a certificate file or directory under that mount.
func servesFrom(d *unstructured.Unstructured, secret, flag string) bool {
	volumes, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	var volume string
	for _, v := range volumes {
		if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name == secret {
			volume, _, _ = unstructured.NestedString(v.(map[string]any), "name")
		}
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if volume == "" || len(containers) == 0 {
		return false
	}
	container := containers[0].(map[string]any)
	mounts, _, _ := unstructured.NestedSlice(container, "volumeMounts")
	args, _, _ := unstructured.NestedStringSlice(container, "args")
	for _, m := range mounts {
		mount := m.(map[string]any)
		if mount["name"] != volume {
			continue
		}
		for _, arg := range args {
			if value, ok := strings.CutPrefix(arg, flag+"="); ok && strings.HasPrefix(value, fmt.Sprint(mount["mountPath"])) {
				return true
			}
		}
	}
	return false
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestEveryObjectCarriesTheProviderLabelInCaptfSystem(t *testing.T) {
	for _, obj := range objects(t) {
		if got := obj.GetLabels()[providerLabel]; got != providerName {
			t.Errorf("%s %s has %s=%q, want %q", obj.GetKind(), obj.GetName(), providerLabel, got, providerName)
		}
		if obj.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q, want %s", obj.GetKind(), obj.GetName(), obj.GetNamespace(), namespace)
		}
	}
}

// rule is one alerting rule of the PrometheusRule.
type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ruleGroups returns spec.groups of the PrometheusRule, as written, and its alerting rules.
func ruleGroups(t *testing.T) (groups any, rules []rule) {
	t.Helper()
	for _, obj := range objects(t) {
		if obj.GetKind() != "PrometheusRule" {
			continue
		}
		groups, _, err := unstructured.NestedFieldNoCopy(obj.Object, "spec", "groups")
		if err != nil || groups == nil {
			t.Fatalf("PrometheusRule %s has no spec.groups (%v)", obj.GetName(), err)
		}
		data, err := yaml.Marshal(groups)
		if err != nil {
			t.Fatal(err)
		}
		var typed []struct {
			Rules []rule `json:"rules"`
		}
		if err := yaml.Unmarshal(data, &typed); err != nil {
			t.Fatal(err)
		}
		for _, g := range typed {
			rules = append(rules, g.Rules...)
		}
		return groups, rules
	}
	t.Fatal("no PrometheusRule")
	return nil, nil
}

func TestEveryAlertSaysHowBadWhatAndHowLong(t *testing.T) {
	_, rules := ruleGroups(t)
	for _, r := range rules {
		t.Run(r.Alert, func(t *testing.T) {
			if r.Alert == "" {
				t.Fatalf("a rule without alert name: %s", r.Expr)
			}
			if !slices.Contains([]string{"info", "warning", "critical"}, r.Labels["severity"]) {
				t.Errorf("severity %q, want info, warning or critical", r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("annotations %v, want a summary and a description", r.Annotations)
			}
			if r.For == "" {
				t.Error("no for: a single evaluation fires it")
			}
		})
	}
}

// selector is a series an expression selects, with the label names it matches on.
type selector struct {
	name   string
	labels map[string][]string // label name -> the values matched, split at | for =~
}

// series is what an expression reads: its selectors and the labels it groups or joins on.
type series struct {
	selectors []selector
	grouping  []string
}

var (
	ident = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// matcher is one label matcher inside braces.
	matcher = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?`)
	// PromQL words that are neither functions nor series.
	keywords     = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
	aggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)

// read picks out what expr reads. It is no PromQL parser: it knows identifiers, label matchers
// in braces, grouping lists and range brackets, which is all the rules here use, and fails on
// anything else it cannot place, so a rule it does not understand is noticed.
func read(expr string) (series, error) {
	var out series
	s := expr
	for len(s) > 0 {
		switch c := s[0]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '(' || c == ')' || c == ',' || strings.ContainsRune("+-*/%^<>=!", rune(c)):
			s = s[1:]
		case c == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return out, fmt.Errorf("unclosed [ in %q", expr)
			}
			s = s[end+1:]
		case c >= '0' && c <= '9' || c == '.':
			s = strings.TrimLeft(s, "0123456789.eEsmhdwy") // a number or a duration
		case c == '{':
			return out, fmt.Errorf("a selector without a series name in %q", expr)
		default:
			word := ident.FindString(s)
			if word == "" {
				return out, fmt.Errorf("cannot read %q in %q", s, expr)
			}
			s = s[len(word):]
			next := strings.TrimLeft(s, " \t\n")
			switch {
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, word):
				if !strings.HasPrefix(next, "(") {
					continue
				}
				end := strings.IndexByte(next, ')')
				if end < 0 {
					return out, fmt.Errorf("unclosed %s( in %q", word, expr)
				}
				for _, l := range strings.Split(next[1:end], ",") {
					if l = strings.TrimSpace(l); l != "" {
						out.grouping = append(out.grouping, l)
					}
				}
				s = next[end+1:]
			case slices.Contains(keywords, word) || slices.Contains(aggregations, word) || strings.HasPrefix(next, "("):
				// an operator, an aggregation or a function
			default:
				sel := selector{name: word, labels: map[string][]string{}}
				if strings.HasPrefix(s, "{") {
					rest := s[1:]
					for !strings.HasPrefix(strings.TrimLeft(rest, " "), "}") {
						m := matcher.FindStringSubmatch(rest)
						if m == nil {
							return out, fmt.Errorf("cannot read the matchers of %s in %q", word, expr)
						}
						values := []string{m[3]}
						if m[2] == "=~" || m[2] == "!~" {
							values = strings.Split(m[3], "|")
						}
						sel.labels[m[1]] = append(sel.labels[m[1]], values...)
						rest = rest[len(m[0]):]
					}
					s = strings.TrimLeft(rest, " ")[1:]
				}
				out.selectors = append(out.selectors, sel)
			}
		}
	}
	return out, nil
}

// labelsOf returns the labels of a series the code or kube-apiserver registers.
func labelsOf(name string) ([]string, bool) {
	for _, s := range metrics.Reference {
		if s.Name == name {
			return s.Labels, true
		}
	}
	labels, ok := kubeAPIServerSeries[name]
	return labels, ok
}

// results are the values of captf_jobs_total's result label.
func results() []string {
	out := []string{metrics.Unknown}
	for _, o := range []jobs.Outcome{jobs.OutcomeSucceeded, jobs.OutcomeFailed, jobs.OutcomeDeadlineExceeded, jobs.OutcomeInterrupted,
		jobs.OutcomeBlocked, jobs.OutcomePlanChanged, jobs.OutcomePlanUnreadable} {
		out = append(out, o.MetricResult())
	}
	return out
}

// checkSelector reports a series no code registers, a label it does not have and a result or
// kind it never reports.
func checkSelector(sel selector, extraLabels []string) []string {
	labels, ok := labelsOf(sel.name)
	if !ok {
		return []string{fmt.Sprintf("series %s is neither in controller/metrics.Reference nor a known kube-apiserver series", sel.name)}
	}
	var problems []string
	for label, values := range sel.labels {
		if !slices.Contains(labels, label) && !slices.Contains(extraLabels, label) {
			problems = append(problems, fmt.Sprintf("%s has no label %s (labels: %v)", sel.name, label, labels))
		}
		for _, v := range values {
			switch {
			case label == "result" && !slices.Contains(results(), v):
				problems = append(problems, fmt.Sprintf("%s: result %q is never reported (results: %v)", sel.name, v, results()))
			case label == "kind" && v != metrics.Unknown && !jobs.Kind(v).Valid():
				problems = append(problems, fmt.Sprintf("%s: kind %q is not one of captf's", sel.name, v))
			}
		}
	}
	return problems
}

func TestEverySeriesTheAlertsReadIsRegistered(t *testing.T) {
	_, rules := ruleGroups(t)
	for _, r := range rules {
		t.Run(r.Alert, func(t *testing.T) {
			read, err := read(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			if len(read.selectors) == 0 {
				t.Fatalf("reads no series: %s", r.Expr)
			}
			for _, sel := range read.selectors {
				for _, p := range checkSelector(sel, nil) {
					t.Error(p)
				}
				labels, known := labelsOf(sel.name)
				if !known {
					continue // reported above
				}
				for _, g := range read.grouping {
					if !slices.Contains(labels, g) {
						t.Errorf("groups by %s, which %s does not have (labels: %v)", g, sel.name, labels)
					}
				}
			}
		})
	}
}

// TestTheReaderOfExpressions: the check above is only as good as read, so each rule of read is a
// row here.
func TestTheReaderOfExpressions(t *testing.T) {
	tests := []struct {
		name     string
		expr     string
		want     []string // name{label=values...} of each selector
		grouping []string
		err      bool
	}{
		{name: "a bare series", expr: "captf_jobs_active", want: []string{"captf_jobs_active{}"}},
		{name: "matchers, a range and a comparison", expr: `increase(captf_jobs_total{result=~"failed|deadline", kind="TerraformCluster"}[1h]) >= 3`,
			want: []string{"captf_jobs_total{kind=TerraformCluster result=failed,deadline}"}},
		{name: "grouping labels of an aggregation", expr: "sum by (kind, op) (rate(captf_jobs_total[5m]))",
			want: []string{"captf_jobs_total{}"}, grouping: []string{"kind", "op"}},
		{name: "both sides of a binary operator", expr: "captf_jobs_active / on (kind) group_left captf_plans_awaiting_approval",
			want: []string{"captf_jobs_active{}", "captf_plans_awaiting_approval{}"}, grouping: []string{"kind"}},
		{name: "a selector without a name is refused", expr: `{__name__="captf_jobs_active"}`, err: true},
		{name: "unreadable matchers are refused", expr: `captf_jobs_active{kind=TerraformCluster}`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := read(tt.expr)
			if (err != nil) != tt.err {
				t.Fatalf("read(%q) error = %v, want error %v", tt.expr, err, tt.err)
			}
			if tt.err {
				return
			}
			var sels []string
			for _, sel := range got.selectors {
				var ls []string
				for l, v := range sel.labels {
					ls = append(ls, l+"="+strings.Join(v, ","))
				}
				slices.Sort(ls)
				sels = append(sels, sel.name+"{"+strings.Join(ls, " ")+"}")
			}
			if !slices.Equal(sels, tt.want) || !slices.Equal(got.grouping, tt.grouping) {
				t.Fatalf("read(%q) = %q by %q, want %q by %q", tt.expr, sels, got.grouping, tt.want, tt.grouping)
			}
		})
	}
}

// promtoolTests is the file of the alerts' unit tests.
const promtoolTests = "prometheusrule_test.yaml"

// unitTests is what the alerts' unit tests hold, as far as the checks here read them.
type unitTests struct {
	Tests []struct {
		Name        string `json:"name"`
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readUnitTests(t *testing.T) unitTests {
	t.Helper()
	data, err := os.ReadFile(promtoolTests)
	if err != nil {
		t.Fatal(err)
	}
	var u unitTests
	if err := yaml.Unmarshal(data, &u); err != nil {
		t.Fatalf("%s: %v", promtoolTests, err)
	}
	return u
}

// TestEveryAlertHasAUnitTestThatFiresItAndOneThatDoesNot reads the promtool tests: each alert is
// expected to fire somewhere and to stay silent somewhere, and the input series are real ones.
func TestEveryAlertHasAUnitTestThatFiresItAndOneThatDoesNot(t *testing.T) {
	_, rules := ruleGroups(t)
	u := readUnitTests(t)
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, test := range u.Tests {
		for _, in := range test.InputSeries {
			read, err := read(in.Series)
			if err != nil || len(read.selectors) != 1 {
				t.Errorf("%s: cannot read input series %q (%v)", test.Name, in.Series, err)
				continue
			}
			for _, p := range checkSelector(read.selectors[0], targetLabels) {
				t.Errorf("%s: %s", test.Name, p)
			}
		}
		for _, a := range test.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, r := range rules {
		if !fires[r.Alert] {
			t.Errorf("no test of %s expects it to fire", r.Alert)
		}
		if !silent[r.Alert] {
			t.Errorf("no test of %s expects it to stay silent", r.Alert)
		}
	}
}

// TestAlertsWithPromtool runs the alerts' unit tests with promtool, on the rule groups of the
// PrometheusRule written out as the plain rules file promtool reads. `make tools` builds
// promtool; without it the test skips, except in CI, where it fails.
func TestAlertsWithPromtool(t *testing.T) {
	testenv.RequireBinaries(t, "promtool")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	promtool := filepath.Join(bin, "promtool")
	groups, _ := ruleGroups(t)
	rules, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(promtoolTests)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, promtoolTests), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", promtoolTests}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
