// Package load puts the aggregated API server of the whole system (test/system) under 50
// concurrent watch clients and 20 list requests per second on runs, against N retained Jobs,
// while the controller churns real runs of another cluster; it asserts zero errors and that
// every watcher receives all its initial events, and reports the API server's peak memory.
// CAPTF_LOAD_JOBS and CAPTF_LOAD_SECONDS size it (defaults 1,000 Jobs and 15 s, for a plain
// `go test ./...`; `make test` runs it at the full 10,000 and 60 through `make load`, see
// docs/reliability.md). The lists are issued at 20/s; the figure reports how many completed.
package load

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
)

func TestMain(m *testing.M) {
	os.Exit(system.Main(m, system.Options{}))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// apiserverPID finds the aggregated API server the system started, by its binary path.
func apiserverPID(bin string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(cmd), bin+"\x00") {
			return pid
		}
	}
	return 0
}

// memKB reads a field (VmRSS, VmHWM) of /proc/<pid>/status in KB.
func memKB(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// saveProfiles writes the aggregated API server's heap profile and Go memory statistics into
// dir, for finding where its memory goes (CAPTF_LOAD_PROFILE=dir).
func saveProfiles(t *testing.T, sys *system.System, dir string) {
	httpClient, err := rest.HTTPClientFor(sys.APIServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	for file, path := range map[string]string{"heap.pprof": "/debug/pprof/heap", "metrics.txt": "/metrics"} {
		resp, err := httpClient.Get(sys.APIServerURL + path)
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("reading %s: %s", path, resp.Status)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if file == "metrics.txt" {
			for _, line := range strings.Split(string(data), "\n") {
				if strings.HasPrefix(line, "go_memstats_") || strings.HasPrefix(line, "go_gc_") {
					t.Log(line)
				}
			}
		}
	}
}

func TestWatchAndListUnderLoad(t *testing.T) {
	sys := system.Get(t)
	ctx := context.Background()
	nJobs, seconds := envInt("CAPTF_LOAD_JOBS", 1000), envInt("CAPTF_LOAD_SECONDS", 15)
	c, ns := sys.NewNamespace(t, "load")
	cfg := rest.CopyConfig(sys.Env.Config)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	cfg.QPS, cfg.Burst = 1000, 1000
	kube := kubernetes.NewForConfigOrDie(cfg)
	pid := apiserverPID(filepath.Join(sys.BinDir, "apiserver"))
	if pid == 0 {
		t.Fatalf("no aggregated API server process of %s", sys.BinDir)
	}

	// Owners, paused so the controller leaves their Jobs alone; 100 Jobs each.
	setup := time.Now()
	rssBefore := memKB(pid, "VmRSS")
	owners := (nJobs + 99) / 100
	var ownerObjs []*infrav1.TerraformCluster
	for i := 0; i < owners; i++ {
		tc := &infrav1.TerraformCluster{}
		tc.Name, tc.Namespace = fmt.Sprintf("o%d", i), ns
		tc.Annotations = map[string]string{workspace.PausedAnnotation: "true"}
		tc.Spec.Source.Image = system.SampleNoopImage
		tc.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"name":"o"}`)}
		if err := c.Create(ctx, tc); err != nil {
			t.Fatal(err)
		}
		ownerObjs = append(ownerObjs, tc)
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var createMu sync.Mutex
	var createErr error
	storeErr := func(err error) { createMu.Lock(); createErr = err; createMu.Unlock() }
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				owner := ownerObjs[i/100]
				attempt := int32(i%100 + 1)
				name, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: owner.Name, Op: jobs.OpApply, Attempt: attempt, InputsHash: "h1:load"})
				job := &batchv1.Job{
					ObjectMeta: metav1.ObjectMeta{
						Name: name, Namespace: ns, Labels: jobs.Labels(jobs.KindCluster, owner.Name, "", jobs.OpApply, attempt),
						Annotations:     map[string]string{jobs.AnnotationInputsHash: "h1:load"},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: string(jobs.KindCluster), Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}},
					},
					Spec: batchv1.JobSpec{
						BackoffLimit: ptr.To[int32](0), Suspend: ptr.To(true),
						Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "runner", Image: "example.invalid/runner:1"}}}},
					},
				}
				created, err := kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
				if err != nil {
					storeErr(err)
					continue
				}
				// Its per-run Secret, so the controller never takes it for a Job that cannot start.
				secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
					Name: jobs.RunSecretName(name), Namespace: ns,
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(created, batchv1.SchemeGroupVersion.WithKind("Job"))},
				}}
				if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
					storeErr(err)
				}
			}
		}()
	}
	for i := 0; i < nJobs; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if createErr != nil {
		t.Fatalf("creating Jobs: %v", createErr)
	}
	runsPath := fmt.Sprintf("/apis/runs.captf.io/v1alpha1/namespaces/%s/runs", ns)
	countRuns := func(labelSelector string) (int, error) {
		req := kube.RESTClient().Get().AbsPath(runsPath)
		if labelSelector != "" {
			req = req.Param("labelSelector", labelSelector)
		}
		raw, err := req.DoRaw(ctx)
		if err != nil {
			return 0, err
		}
		var list struct{ Items []json.RawMessage }
		err = json.Unmarshal(raw, &list)
		return len(list.Items), err
	}
	// Wait for the server to show every run, object by object: small lists, so that the RSS
	// sampled next is what holding the Jobs costs, not the garbage of large lists.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		shown, err := 0, error(nil)
		for _, o := range ownerObjs {
			n, lerr := countRuns(jobs.LabelOwnerName + "=" + o.Name)
			if lerr != nil {
				err = lerr
				break
			}
			shown += n
		}
		if err == nil && shown >= nJobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server shows %d of %d runs (%v)", shown, nJobs, err)
		}
		time.Sleep(200 * time.Millisecond) // polling the server's cache with a deadline
	}
	setupTime := time.Since(setup)
	// What holding the Jobs costs the server, before the load: its RSS growth per Job.
	rssPerJob := float64(memKB(pid, "VmRSS")-rssBefore) * 1024 / float64(nJobs)
	if dir := os.Getenv("CAPTF_LOAD_PROFILE"); dir != "" {
		saveProfiles(t, sys, dir)
	}
	if n, err := countRuns(""); err != nil || n < nJobs {
		t.Fatalf("a list of the namespace shows %d of %d runs (%v)", n, nJobs, err)
	}

	// The churn: a live cluster whose inputs change every few seconds, run by real Jobs.
	churn := &infrav1.TerraformCluster{}
	churn.Name, churn.Namespace = "churn", ns
	churn.Spec.Source.Image = system.SampleNoopImage
	churn.Spec.Drift.IntervalSeconds = ptr.To[int64](0)
	churn.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"name":"churn"}`)}
	if err := capitest.Own(ctx, c, churn); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, churn); err != nil {
		t.Fatal(err)
	}

	loadCtx, stop := context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	defer stop()
	var errs, lists, watchEvents, watchOpens atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	fail := func(err error) {
		errs.Add(1)
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	// Each watcher asks for the initial events with their end bookmark, as client-go's
	// streaming lists do, and records how long they took and how many runs they carried.
	type initialRecord struct {
		added int
		took  time.Duration
	}
	initial := make([]initialRecord, 50)
	for i := range initial {
		initial[i].added = -1
	}
	var load sync.WaitGroup
	watchStart := time.Now()
	for w := 0; w < 50; w++ {
		load.Add(1)
		go func() {
			defer load.Done()
			first := true
			for loadCtx.Err() == nil || first {
				watchOpens.Add(1)
				req := kube.RESTClient().Get().AbsPath(runsPath).Param("watch", "true")
				// The first watch may outlast the load window to finish its initial events: what
				// is checked is that every watcher gets them all, and the figure says when.
				streamCtx, cancelStream := loadCtx, context.CancelFunc(func() {})
				if first {
					req = req.Param("sendInitialEvents", "true").Param("allowWatchBookmarks", "true").Param("resourceVersionMatch", "NotOlderThan")
					streamCtx, cancelStream = context.WithTimeout(ctx, time.Duration(seconds)*time.Second+2*time.Minute)
				}
				stream, err := req.Stream(streamCtx)
				if err != nil {
					if streamCtx.Err() == nil {
						fail(fmt.Errorf("opening a watch: %w", err))
					}
					cancelStream()
					return
				}
				// Once its initial events are in, the first watch ends with the load like the rest.
				var initialDone atomic.Bool
				stopAfterLoad := context.AfterFunc(loadCtx, func() {
					if initialDone.Load() {
						cancelStream()
					}
				})
				dec := json.NewDecoder(stream)
				added := 0
				for first || loadCtx.Err() == nil {
					var ev struct {
						Type   string
						Object struct {
							Metadata struct {
								Annotations map[string]string
							}
						}
					}
					if err := dec.Decode(&ev); err != nil {
						if streamCtx.Err() == nil && !strings.Contains(err.Error(), "EOF") {
							fail(fmt.Errorf("decoding a watch event: %w", err))
						}
						break // closed by the deadline or the server's watch timeout
					}
					switch {
					case ev.Type == "ERROR":
						fail(fmt.Errorf("watch error event: %+v", ev.Object))
					case ev.Type == "ADDED":
						added++
					case first && ev.Type == "BOOKMARK" && ev.Object.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true":
						initial[w] = initialRecord{added: added, took: time.Since(watchStart)}
						first = false
						initialDone.Store(true)
					}
					watchEvents.Add(1)
				}
				stopAfterLoad()
				stream.Close()
				cancelStream()
				if first {
					return // the first watch ended before its initial events did; reported below
				}
			}
		}()
	}
	// Lists as clients issue them: 19 of 20 the runs of one object by label selector (what
	// `kubectl captf runs` and dashboards ask), 1 of 20 every run of the namespace.
	load.Add(1)
	go func() {
		defer load.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		for i := 0; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					selector, want := "", nJobs
					if i%20 != 0 {
						k := i % len(ownerObjs)
						selector, want = jobs.LabelOwnerName+"="+ownerObjs[k].Name, min(100, nJobs-k*100)
					}
					n, err := countRuns(selector)
					if err != nil {
						if loadCtx.Err() == nil {
							fail(fmt.Errorf("listing runs (%q): %w", selector, err))
						}
						return
					}
					if n < want {
						fail(fmt.Errorf("a list (%q) returned %d runs, want at least %d", selector, n, want))
					}
					lists.Add(1)
				}()
			}
		}
	}()
	peakRSS := 0
	changes := 0
	sample := time.NewTicker(500 * time.Millisecond)
	churnTick := time.NewTicker(3 * time.Second)
loop:
	for {
		select {
		case <-loadCtx.Done():
			break loop
		case <-sample.C:
			peakRSS = max(peakRSS, memKB(pid, "VmRSS"))
		case <-churnTick.C:
			changes++
			patch := fmt.Sprintf(`{"spec":{"variables":{"name":"churn","size":"s%d"}}}`, changes)
			if err := c.Patch(ctx, churn, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
				t.Errorf("churn: %v", err)
			}
		}
	}
	sample.Stop()
	churnTick.Stop()
	load.Wait()
	var churnJobs batchv1.JobList
	if err := c.List(ctx, &churnJobs, client.InNamespace(ns), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, "churn"))); err != nil {
		t.Fatal(err)
	}
	hwm := memKB(pid, "VmHWM")
	if n := errs.Load(); n > 0 {
		errMu.Lock()
		t.Errorf("%d errors; first: %v", n, firstErr)
		errMu.Unlock()
	}
	if lists.Load() == 0 {
		t.Errorf("no list completed in %d s", seconds)
	}
	var took []time.Duration
	for w, rec := range initial {
		switch {
		case rec.added < 0:
			t.Errorf("watcher %d never received the end of its initial events", w)
		case rec.added < nJobs:
			t.Errorf("watcher %d received %d runs as initial events, want at least %d", w, rec.added, nJobs)
		default:
			took = append(took, rec.took)
		}
	}
	slices.Sort(took)
	var p50, slowest time.Duration
	if len(took) > 0 {
		p50, slowest = took[len(took)/2], took[len(took)-1]
	}
	t.Logf("FIGURE load: %d Jobs (set up in %s), %d s, 50 watchers (%d opens, %d events; %d of 50 got all initial events, p50 %s, last %s), %d lists (%.1f/s), %d errors, churn %d spec changes / %d Jobs; apiserver RSS growth per retained Job %.0f B before the load, RSS peak sampled %d MB, VmHWM %d MB",
		nJobs, setupTime.Round(time.Second), seconds, watchOpens.Load(), watchEvents.Load(), len(took), p50.Round(time.Millisecond), slowest.Round(time.Millisecond), lists.Load(), float64(lists.Load())/float64(seconds), errs.Load(), changes, len(churnJobs.Items), rssPerJob, peakRSS/1024, hwm/1024)
}
