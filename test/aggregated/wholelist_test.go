package aggregated

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/jobs"
)

// TestKubectlChunkSizeGetsTheWholeList: the server answers every list whole through the
// aggregator, whatever limit kubectl get --chunk-size asks for, so kubectl gets the list it
// gets unchunked in one request; a continue token is 410 Gone.
func TestKubectlChunkSizeGetsTheWholeList(t *testing.T) {
	c := newClients(t)
	ns := c.newNamespace(t)
	whole := c.createCluster(t, ns, "whole", nil)
	other := c.createCluster(t, ns, "other", nil)
	for attempt := int32(1); attempt <= 4; attempt++ {
		c.createJob(t, whole, jobs.OpApply, attempt, nil)
		c.createJob(t, whole, jobs.OpPlan, attempt, nil)
	}
	c.createJob(t, other, jobs.OpDrift, 1, nil)
	c.createJob(t, other, jobs.OpRefresh, 1, nil)
	eventually(t, 10*time.Second, func(context.Context) error {
		out, err := kubectl(t, "get", "runs", "-n", ns, "-o", "name")
		if err != nil {
			return fmt.Errorf("runs: %w %s", err, out)
		}
		if n := strings.Count(out, "run.runs.captf.io/"); n != 10 {
			return fmt.Errorf("%d runs: %s", n, out)
		}
		return nil
	})

	// firstColumns keeps the namespace and name of each table row; the other columns tell
	// ages, which move between two requests.
	firstColumns := func(out string) string {
		var rows []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) >= 2 {
				rows = append(rows, f[0]+" "+f[1])
			}
		}
		return strings.Join(rows, "\n")
	}
	asIs := func(out string) string { return out }
	tests := []struct {
		name      string
		args      []string
		chunk     string
		minItems  int
		normalize func(string) string
	}{
		{name: "runs of every namespace with chunk size 3, by name, are the unchunked list", args: []string{"get", "runs", "-A", "-o", "name"}, chunk: "3", minItems: 10, normalize: asIs},
		{name: "runs of every namespace with chunk size 3, as the table, are the unchunked list", args: []string{"get", "runs", "-A", "--no-headers"}, chunk: "3", minItems: 10, normalize: firstColumns},
		{name: "runs of one object by label with chunk size 2 are the unchunked list", args: []string{"get", "runs", "-n", ns, "-l", jobs.LabelOwnerName + "=whole", "-o", "name"}, chunk: "2", minItems: 8, normalize: asIs},
		{name: "runs of one namespace by a computed field with chunk size 1 are the unchunked list", args: []string{"get", "runs", "-n", ns, "--field-selector", "spec.operation=plan", "-o", "name"}, chunk: "1", minItems: 4, normalize: asIs},
		{name: "plans of every namespace with chunk size 1 are the unchunked list", args: []string{"get", "plans", "-A", "-o", "name"}, chunk: "1", minItems: 4, normalize: asIs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Other tests' Jobs may still change between the two lists; the two agree once
			// they hold still.
			eventually(t, 30*time.Second, func(context.Context) error {
				unchunked, err := kubectl(t, append(tt.args, "--chunk-size=0")...)
				if err != nil {
					return fmt.Errorf("unchunked: %w %s", err, unchunked)
				}
				chunked, err := kubectl(t, append(tt.args, "--chunk-size="+tt.chunk)...)
				if err != nil {
					return fmt.Errorf("chunked: %w %s", err, chunked)
				}
				if got, want := tt.normalize(chunked), tt.normalize(unchunked); got != want {
					return fmt.Errorf("with --chunk-size=%s:\n%s\nunchunked:\n%s", tt.chunk, got, want)
				}
				if n := len(strings.Split(strings.TrimSpace(unchunked), "\n")); n < tt.minItems {
					return fmt.Errorf("%d items, want at least %d:\n%s", n, tt.minItems, unchunked)
				}
				return nil
			})
		})
	}

	t.Run("kubectl with a chunk size makes one request for the whole list", func(t *testing.T) {
		out := mustKubectl(t, "get", "runs", "-n", ns, "-o", "name", "--chunk-size=3", "-v=6")
		requests := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "/runs?") && strings.Contains(l, "limit=3") {
				requests++
			}
		}
		if requests != 1 || strings.Contains(out, "continue=") || strings.Count(out, "run.runs.captf.io/") != 10 {
			t.Fatalf("%d list requests, want 1 without continue, for 10 runs:\n%s", requests, out)
		}
	})

	// The API itself, past kubectl.
	rc := c.kube.BatchV1().RESTClient()
	runsPath := "/apis/runs.captf.io/v1alpha1/namespaces/" + ns + "/runs"
	plansPath := "/apis/runs.captf.io/v1alpha1/namespaces/" + ns + "/plans"
	const asTable = "application/json;as=Table;v=v1;g=meta.k8s.io"
	lists := []struct {
		name   string
		path   string
		params map[string]string
		accept string
		want   int
	}{
		{name: "a list of runs with limit=2 has every run and no continue", path: runsPath, params: map[string]string{"limit": "2"}, want: 10},
		{name: "a Table of runs with limit=2 has every run and no continue", path: runsPath, params: map[string]string{"limit": "2"}, accept: asTable, want: 10},
		{name: "a list of plans with limit=1 has every plan and no continue", path: plansPath, params: map[string]string{"limit": "1"}, want: 4},
	}
	for _, tt := range lists {
		t.Run(tt.name, func(t *testing.T) {
			req := rc.Get().AbsPath(tt.path)
			for k, v := range tt.params {
				req = req.Param(k, v)
			}
			if tt.accept != "" {
				req = req.SetHeader("Accept", tt.accept)
			}
			raw, err := req.DoRaw(context.Background())
			if err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
			var list struct {
				Metadata metav1.ListMeta   `json:"metadata"`
				Items    []json.RawMessage `json:"items"`
				Rows     []json.RawMessage `json:"rows"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				t.Fatal(err)
			}
			if n := len(list.Items) + len(list.Rows); n != tt.want {
				t.Errorf("%d items, want %d:\n%s", n, tt.want, raw)
			}
			if list.Metadata.Continue != "" || list.Metadata.RemainingItemCount != nil || list.Metadata.ResourceVersion == "" {
				t.Errorf("metadata %+v, want a resourceVersion and neither continue nor remainingItemCount", list.Metadata)
			}
		})
	}
	gone := []struct {
		name   string
		path   string
		params map[string]string
	}{
		{name: "a list of runs with continue is 410 Gone", path: runsPath, params: map[string]string{"continue": "x"}},
		{name: "a list of runs with limit and continue is 410 Gone", path: runsPath, params: map[string]string{"limit": "500", "continue": "x"}},
		{name: "a list of plans with continue is 410 Gone", path: plansPath, params: map[string]string{"limit": "1", "continue": "x"}},
	}
	for _, tt := range gone {
		t.Run(tt.name, func(t *testing.T) {
			req := rc.Get().AbsPath(tt.path)
			for k, v := range tt.params {
				req = req.Param(k, v)
			}
			res := req.Do(context.Background())
			var code int
			res.StatusCode(&code)
			raw, _ := res.Raw()
			var status metav1.Status
			if err := json.Unmarshal(raw, &status); err != nil {
				t.Fatalf("status %d, not a Status: %v\n%s", code, err, raw)
			}
			if code != http.StatusGone || status.Reason != metav1.StatusReasonExpired || !strings.Contains(status.Message, "list again without continue") {
				t.Fatalf("status %d %s, want 410 Gone saying to list again without continue:\n%s", code, status.Reason, raw)
			}
			if status.Continue != "" {
				t.Errorf("the answer offers a token to continue with: %s", raw)
			}
		})
	}
}
