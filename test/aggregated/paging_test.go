package aggregated

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/captf/captf/jobs"
)

// TestKubectlChunksRunsAndPlans: kubectl get --chunk-size follows continue through the
// aggregator, and the pages together are the list kubectl gets unpaged.
func TestKubectlChunksRunsAndPlans(t *testing.T) {
	c := newClients(t)
	ns := c.newNamespace(t)
	pages := c.createCluster(t, ns, "pages", nil)
	other := c.createCluster(t, ns, "other", nil)
	for attempt := int32(1); attempt <= 4; attempt++ {
		c.createJob(t, pages, jobs.OpApply, attempt, nil)
		c.createJob(t, pages, jobs.OpPlan, attempt, nil)
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
		{name: "runs of every namespace, 3 a page, by name", args: []string{"get", "runs", "-A", "-o", "name"}, chunk: "3", minItems: 10, normalize: asIs},
		{name: "runs of every namespace, 3 a page, as the table", args: []string{"get", "runs", "-A", "--no-headers"}, chunk: "3", minItems: 10, normalize: firstColumns},
		{name: "runs of one object by label, 2 a page", args: []string{"get", "runs", "-n", ns, "-l", jobs.LabelOwnerName + "=pages", "-o", "name"}, chunk: "2", minItems: 8, normalize: asIs},
		{name: "runs of one namespace by a computed field, 1 a page", args: []string{"get", "runs", "-n", ns, "--field-selector", "spec.operation=plan", "-o", "name"}, chunk: "1", minItems: 4, normalize: asIs},
		{name: "plans of every namespace, 1 a page", args: []string{"get", "plans", "-A", "-o", "name"}, chunk: "1", minItems: 4, normalize: asIs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Other tests' Jobs may still change between the two lists; the two agree once
			// they hold still.
			eventually(t, 30*time.Second, func(context.Context) error {
				whole, err := kubectl(t, append(tt.args, "--chunk-size=0")...)
				if err != nil {
					return fmt.Errorf("unpaged: %w %s", err, whole)
				}
				paged, err := kubectl(t, append(tt.args, "--chunk-size="+tt.chunk)...)
				if err != nil {
					return fmt.Errorf("paged: %w %s", err, paged)
				}
				if got, want := tt.normalize(paged), tt.normalize(whole); got != want {
					return fmt.Errorf("the pages:\n%s\nthe unpaged list:\n%s", got, want)
				}
				if n := len(strings.Split(strings.TrimSpace(whole), "\n")); n < tt.minItems {
					return fmt.Errorf("%d items, want at least %d:\n%s", n, tt.minItems, whole)
				}
				return nil
			})
		})
	}

	t.Run("kubectl follows continue", func(t *testing.T) {
		out := mustKubectl(t, "get", "runs", "-n", ns, "-o", "name", "--chunk-size=3", "-v=6")
		continued := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "/runs?") && strings.Contains(l, "limit=3") && strings.Contains(l, "continue=") {
				continued++
			}
		}
		// 10 runs in pages of 3: the first page and 3 that continue.
		if continued != 3 || strings.Count(out, "run.runs.captf.io/") != 10 {
			t.Fatalf("%d requests continued a list, want 3:\n%s", continued, out)
		}
	})
}
