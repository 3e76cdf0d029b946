package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/metrics"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/yaml"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	controllermetrics "github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/testenv"
)

const (
	// dashboardFile is the Grafana dashboard, the one file of the ConfigMap dashboardConfigMap.
	dashboardFile      = "dashboards/captf.json"
	dashboardConfigMap = "captf-dashboard"
	// datasourceVariable is the dashboard variable every panel reads its data source from.
	datasourceVariable = "datasource"
	// maxConfigMapBytes is what `kubectl apply` can keep of an object in its
	// last-applied-configuration annotation: the annotations of an object total at most 256 KiB.
	maxConfigMapBytes = 256 << 10
)

// dashboard is what the checks read of a Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// panel is a panel, or a row holding panels.
type panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	Interval    string      `json:"interval"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		RefID        string      `json:"refId"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Datasource   *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) ([]byte, dashboard) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return data, d
}

// graphs returns the panels that draw something, those inside rows included.
func (d dashboard) graphs() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVariables are the values the checks give Grafana's own variables, as Grafana would for
// a 30-second scrape interval.
var grafanaVariables = map[string]string{"__rate_interval": "2m", "__interval": "30s", "__range": "6h"}

var variableRef = regexp.MustCompile(`\$\{?(\w+)\}?`)

// promQL returns expr as Prometheus receives it from Grafana, or an error naming a variable the
// dashboard does not define.
func promQL(expr string) (string, error) {
	var unknown []string
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		name := variableRef.FindStringSubmatch(ref)[1]
		v, ok := grafanaVariables[name]
		if !ok {
			unknown = append(unknown, ref)
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown variables %v in %q", unknown, expr)
	}
	return out, nil
}

// rangeSelector is a range or subquery in brackets.
var rangeSelector = regexp.MustCompile(`\[[^\]]*\]`)

// legendLabel is a label a legend format prints.
var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// Units the panels may use: Grafana's ids for counts, seconds and rates.
var units = []string{"short", "none", "s", "opm", "ops", "cps", "reqps"}

func TestTheDashboard(t *testing.T) {
	_, d := readDashboard(t)
	usesDatasource := func(ds *datasource) bool {
		return ds != nil && ds.Type == "prometheus" && (ds.UID == "${"+datasourceVariable+"}" || ds.UID == "$"+datasourceVariable)
	}
	tests := []struct {
		rule  string
		check func(t *testing.T, d dashboard)
	}{
		{"it has a fixed uid and a title, so links and the sidecar's copy stay one dashboard", func(t *testing.T, d dashboard) {
			if d.UID == "" || d.Title == "" {
				t.Errorf("uid %q, title %q", d.UID, d.Title)
			}
		}},
		{"a datasource variable chooses the Prometheus", func(t *testing.T, d dashboard) {
			for _, v := range d.Templating.List {
				if v.Name == datasourceVariable {
					if v.Type != "datasource" || v.Query != "prometheus" {
						t.Errorf("variable %s is a %q of %q, want a datasource of prometheus", v.Name, v.Type, v.Query)
					}
					return
				}
			}
			t.Errorf("no variable %s", datasourceVariable)
		}},
		{"every panel and query reads the datasource variable", func(t *testing.T, d dashboard) {
			for _, p := range d.graphs() {
				if !usesDatasource(p.Datasource) {
					t.Errorf("panel %q has datasource %+v", p.Title, p.Datasource)
				}
				for _, target := range p.Targets {
					if !usesDatasource(target.Datasource) {
						t.Errorf("panel %q query %s has datasource %+v", p.Title, target.RefID, target.Datasource)
					}
				}
			}
		}},
		{"every panel has a unique id and title, queries and a description", func(t *testing.T, d dashboard) {
			ids, titles := map[int]bool{}, map[string]bool{}
			for _, p := range d.graphs() {
				if ids[p.ID] || titles[p.Title] || p.Title == "" {
					t.Errorf("panel %d %q: id or title missing or repeated", p.ID, p.Title)
				}
				ids[p.ID], titles[p.Title] = true, true
				if len(p.Targets) == 0 || strings.TrimSpace(p.Description) == "" {
					t.Errorf("panel %q has %d queries and description %q", p.Title, len(p.Targets), p.Description)
				}
			}
		}},
		{"every panel has a unit", func(t *testing.T, d dashboard) {
			for _, p := range d.graphs() {
				if !slices.Contains(units, p.FieldConfig.Defaults.Unit) {
					t.Errorf("panel %q has unit %q, want one of %v", p.Title, p.FieldConfig.Defaults.Unit, units)
				}
			}
		}},
		{"every rate window is $__rate_interval", func(t *testing.T, d dashboard) {
			for _, p := range d.graphs() {
				for _, target := range p.Targets {
					for _, r := range rangeSelector.FindAllString(target.Expr, -1) {
						if r != "[$__rate_interval]" {
							t.Errorf("panel %q query %s has window %s", p.Title, target.RefID, r)
						}
					}
				}
			}
		}},
		{"every variable a query uses is defined", func(t *testing.T, d dashboard) {
			for _, p := range d.graphs() {
				for _, target := range p.Targets {
					if _, err := promQL(target.Expr); err != nil {
						t.Errorf("panel %q: %v", p.Title, err)
					}
				}
			}
		}},
		{"every label a legend prints is one its query keeps", func(t *testing.T, d dashboard) {
			for _, p := range d.graphs() {
				for _, target := range p.Targets {
					expr, err := promQL(target.Expr)
					if err != nil {
						continue // reported above
					}
					read, err := read(expr)
					if err != nil {
						t.Errorf("panel %q: %v", p.Title, err)
						continue
					}
					for _, m := range legendLabel.FindAllStringSubmatch(target.LegendFormat, -1) {
						if !slices.Contains(read.grouping, m[1]) {
							t.Errorf("panel %q query %s prints {{%s}}, which it aggregates away (keeps %v)", p.Title, target.RefID, m[1], read.grouping)
						}
					}
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) { tt.check(t, d) })
	}
}

// TestTheFailedJobsPanelReadsTheOutcomesThatCountAsFailures: the panel's result matcher is made
// of the results of the outcomes jobs.Outcome.CountsAsFailure names, the ones that open a backoff
// window, and no other.
func TestTheFailedJobsPanelReadsTheOutcomesThatCountAsFailures(t *testing.T) {
	var want []string
	for _, o := range []jobs.Outcome{jobs.OutcomeSucceeded, jobs.OutcomeFailed, jobs.OutcomeDeadlineExceeded, jobs.OutcomeInterrupted,
		jobs.OutcomeBlocked, jobs.OutcomePlanChanged, jobs.OutcomePlanUnreadable} {
		if o.CountsAsFailure() && !slices.Contains(want, o.MetricResult()) {
			want = append(want, o.MetricResult())
		}
	}
	sort.Strings(want)
	_, d := readDashboard(t)
	found := false
	for _, p := range d.graphs() {
		for _, target := range p.Targets {
			expr, err := promQL(target.Expr)
			if err != nil {
				t.Fatal(err)
			}
			read, err := read(expr)
			if err != nil {
				t.Fatal(err)
			}
			for _, sel := range read.selectors {
				if sel.name != "captf_jobs_total" {
					continue
				}
				found = true
				got := slices.Clone(sel.labels["result"])
				sort.Strings(got)
				if !slices.Equal(got, want) {
					t.Errorf("panel %q reads results %v, want those that count as failures: %v", p.Title, got, want)
				}
			}
		}
	}
	if !found {
		t.Fatal("no panel reads captf_jobs_total")
	}
}

// histogramSeries are the series Prometheus stores of a histogram name with labels.
func histogramSeries(name string, labels []string) map[string][]string {
	return map[string][]string{
		name + "_bucket": append(slices.Clone(labels), "le"),
		name + "_sum":    labels,
		name + "_count":  labels,
	}
}

// controllerSeries are the series the controller registers, from controller/metrics.Reference
// (whose own test checks it against the registered collectors), with their labels.
func controllerSeries() map[string][]string {
	out := map[string][]string{}
	for _, s := range controllermetrics.Reference {
		if s.Type == "histogram" {
			for name, labels := range histogramSeries(s.Name, s.Labels) {
				out[name] = labels
			}
			continue
		}
		out[s.Name] = s.Labels
	}
	return out
}

// runsAPIServerSeries are the request series of the runs API server with their labels, read
// from k8s.io/apiserver itself: the server serves /metrics with routes.DefaultMetrics, which
// registers them in the legacy registry, and its request handlers record them through the
// functions called here for a LIST and a WATCH of runs. A series appears in a gather only once
// recorded, so recording them is how the test lists them; names and labels are the library's.
func runsAPIServerSeries(t *testing.T) map[string][]string {
	t.Helper()
	routes.DefaultMetrics{}.Install(mux.NewPathRecorderMux("monitoring-test"))
	gv := runsv1alpha1.SchemeGroupVersion
	serve := func(verb string, h http.HandlerFunc) {
		info := &request.RequestInfo{IsResourceRequest: true, Verb: strings.ToLower(verb), APIGroup: gv.Group, APIVersion: gv.Version, Namespace: "ns", Resource: "runs"}
		target := "/apis/" + gv.Group + "/" + gv.Version + "/namespaces/ns/runs"
		if verb == "WATCH" {
			target += "?watch=true"
		}
		req := httptest.NewRequest(http.MethodGet, target, nil).WithContext(request.WithRequestInfo(context.Background(), info))
		metrics.InstrumentHandlerFunc(verb, gv.Group, gv.Version, "runs", "", "namespace", metrics.APIServerComponent, false, "", h)(httptest.NewRecorder(), req)
	}
	serve("LIST", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	serve("WATCH", func(w http.ResponseWriter, req *http.Request) {
		info, _ := request.RequestInfoFrom(req.Context())
		metrics.RecordLongRunning(req, info, metrics.APIServerComponent, func() {
			metrics.WatchEvents.WithContext(req.Context()).WithLabelValues(gv.Group, gv.Version, "runs").Inc()
			w.WriteHeader(http.StatusOK)
		})
	})
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		if f.GetMetric()[0].GetHistogram() != nil {
			for name, l := range histogramSeries(f.GetName(), labels) {
				out[name] = l
			}
			continue
		}
		out[f.GetName()] = labels
	}
	return out
}

func TestTheRunsAPIServerSeriesAreGathered(t *testing.T) {
	series := runsAPIServerSeries(t)
	for _, name := range []string{"apiserver_request_total", "apiserver_request_duration_seconds_bucket", "apiserver_longrunning_requests", "apiserver_watch_events_total"} {
		if labels, ok := series[name]; !ok || !slices.Contains(labels, "group") {
			t.Errorf("%s: labels %v, present %v; want a series with a group label", name, labels, ok)
		}
	}
}

// TestEverySeriesTheDashboardReadsIsRegistered reads each query as Prometheus receives it: every
// series is one the controller or the runs API server registers, every label it matches or
// groups by is one the series has (or a label Prometheus adds to every scraped series), and
// every kind, op, result, retry and group it matches on is one the code reports.
func TestEverySeriesTheDashboardReadsIsRegistered(t *testing.T) {
	known := controllerSeries()
	for name, labels := range runsAPIServerSeries(t) {
		known[name] = labels
	}
	_, d := readDashboard(t)
	for _, p := range d.graphs() {
		for _, target := range p.Targets {
			t.Run(p.Title+"/"+target.RefID, func(t *testing.T) {
				expr, err := promQL(target.Expr)
				if err != nil {
					t.Fatal(err)
				}
				read, err := read(expr)
				if err != nil {
					t.Fatal(err)
				}
				if len(read.selectors) == 0 {
					t.Fatalf("reads no series: %s", expr)
				}
				for _, sel := range read.selectors {
					labels, ok := known[sel.name]
					if !ok {
						t.Errorf("series %s is registered neither by the controller nor by the runs API server", sel.name)
						continue
					}
					for _, p := range checkValues(sel, labels) {
						t.Error(p)
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
}

// checkValues reports a label sel matches that the series does not have, and a value the code
// never reports.
func checkValues(sel selector, labels []string) []string {
	var problems []string
	for label, values := range sel.labels {
		if !slices.Contains(labels, label) && !slices.Contains(targetLabels, label) {
			problems = append(problems, fmt.Sprintf("%s has no label %s (labels: %v)", sel.name, label, labels))
		}
		for _, v := range values {
			var ok bool
			switch label {
			case "result":
				ok = slices.Contains(results(), v)
			case "kind":
				ok = v == controllermetrics.Unknown || jobs.Kind(v).Valid()
			case "op":
				ok = v == controllermetrics.Unknown || jobs.Op(v).Valid()
			case "retry":
				ok = v == "true" || v == "false"
			case "group":
				ok = v == runsv1alpha1.SchemeGroupVersion.Group
			default:
				ok = true
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s %q is never reported", sel.name, label, v))
			}
		}
	}
	return problems
}

// TestTheDashboardQueriesParse has promtool check every query, written as a recording rule of a
// rules file. `make tools` builds promtool; without it the test skips, except in CI, where it
// fails.
func TestTheDashboardQueriesParse(t *testing.T) {
	testenv.RequireBinaries(t, "promtool")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	_, d := readDashboard(t)
	var rules []map[string]string
	for _, p := range d.graphs() {
		for _, target := range p.Targets {
			expr, err := promQL(target.Expr)
			if err != nil {
				t.Fatal(err)
			}
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:panel_%d:%s", p.ID, target.RefID), "expr": expr})
		}
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "promtool"), "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, data)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(string(out), want) {
		t.Fatalf("promtool check rules says %q, want %q", out, want)
	}
}

// TestTheDashboardShipsAsTheConfigMapTheSidecarLoads reads the rendered kustomization.
func TestTheDashboardShipsAsTheConfigMapTheSidecarLoads(t *testing.T) {
	data, _ := readDashboard(t)
	var cm *struct {
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	var size int
	for _, obj := range objects(t) {
		if obj.GetKind() != "ConfigMap" || obj.GetName() != dashboardConfigMap {
			continue
		}
		raw, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		size = len(raw)
		if err := json.Unmarshal(raw, &cm); err != nil {
			t.Fatal(err)
		}
	}
	if cm == nil {
		t.Fatalf("the kustomization renders no ConfigMap %s (a name suffix hash would rename it)", dashboardConfigMap)
	}
	tests := []struct {
		rule string
		ok   bool
		got  any
	}{
		{"it is labelled for Grafana's dashboard sidecar", cm.Metadata.Labels["grafana_dashboard"] == "1", cm.Metadata.Labels},
		{"it is in captf-system", cm.Metadata.Namespace == namespace, cm.Metadata.Namespace},
		{"it holds the dashboard file, and only it", len(cm.Data) == 1 && cm.Data[filepath.Base(dashboardFile)] == string(data), len(cm.Data)},
		{"kubectl apply can keep it in its last-applied annotation", size < maxConfigMapBytes, size},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if !tt.ok {
				t.Errorf("got %v", tt.got)
			}
		})
	}
}
