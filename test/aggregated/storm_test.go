package aggregated

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// stormWatchers is how many watchers start together in the watch storm.
const stormWatchers = 50

// stormResult is what one storm of watchers cost a server.
type stormResult struct {
	// last is the time until the last watcher had its initial events; p50 their median.
	last, p50 time.Duration
	// steadyRSS is the server's resident memory before the storm, peakGrowth its peak during
	// the storm above that, in bytes.
	steadyRSS, peakGrowth int
}

// BenchmarkAggregatedWatchStorm starts 50 watchers together, each asking for the initial events
// of every object with their end bookmark (sendInitialEvents=true, as client-go's streaming
// lists do), side by side over the same Jobs: on jobs against kube-apiserver and its watch
// cache, then on runs against captf through the aggregator. It reports the time until the last
// watcher has its initial events and the servers' peak memory growth during the storm, and
// captf's over kube-apiserver's.
func BenchmarkAggregatedWatchStorm(b *testing.B) {
	setUpBench(b)
	kubePID, err := childProcess("kube-apiserver")
	if err != nil {
		b.Fatal(err)
	}
	cfg := rest.CopyConfig(getEnv(b).Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.AcceptContentTypes = "application/json"
	rc := kubernetes.NewForConfigOrDie(cfg).BatchV1().RESTClient()
	// Each figure is the worst of the storms: a server keeps the memory of its first storm,
	// so later storms grow it less.
	var jobsStorm, runsStorm stormResult
	for b.Loop() {
		jobs, err := watchStorm(rc, "/apis/batch/v1/jobs", kubePID, benchJobs())
		if err != nil {
			b.Fatalf("jobs against kube-apiserver: %v", err)
		}
		runs, err := watchStorm(rc, "/apis/runs.captf.io/v1alpha1/runs", serverPID, benchJobs())
		if err != nil {
			b.Fatalf("runs against captf: %v", err)
		}
		jobsStorm, runsStorm = jobsStorm.worst(jobs), runsStorm.worst(runs)
	}
	b.ReportMetric(jobsStorm.last.Seconds(), "jobs-last-s")
	b.ReportMetric(runsStorm.last.Seconds(), "runs-last-s")
	b.ReportMetric(runsStorm.last.Seconds()/jobsStorm.last.Seconds(), "runs/jobs-last")
	b.ReportMetric(runsStorm.p50.Seconds(), "runs-p50-s")
	b.ReportMetric(float64(jobsStorm.peakGrowth)/(1<<20), "kube-peak-growth-MB")
	b.ReportMetric(float64(runsStorm.peakGrowth)/(1<<20), "captf-peak-growth-MB")
	b.ReportMetric(float64(runsStorm.peakGrowth)/float64(max(jobsStorm.peakGrowth, 1)), "captf/kube-peak-growth")
	b.ReportMetric(float64(runsStorm.peakGrowth)/float64(runsStorm.steadyRSS), "captf-peak-growth/steady")
}

// worst keeps the larger of each figure of r and o; the steady memory is the one the larger
// peak growth was measured from.
func (r stormResult) worst(o stormResult) stormResult {
	out := stormResult{last: max(r.last, o.last), p50: max(r.p50, o.p50), steadyRSS: r.steadyRSS, peakGrowth: r.peakGrowth}
	if o.peakGrowth >= r.peakGrowth {
		out.steadyRSS, out.peakGrowth = o.steadyRSS, o.peakGrowth
	}
	return out
}

// watchStorm starts stormWatchers watches of path with their initial events, waits until each
// has received want ADDED events and the initial-events-end bookmark, and measures the server
// process pid meanwhile.
func watchStorm(rc rest.Interface, path string, pid, want int) (stormResult, error) {
	var res stormResult
	if res.steadyRSS = procMemory(pid, "VmRSS"); res.steadyRSS == 0 {
		return res, fmt.Errorf("cannot read the memory of process %d", pid)
	}
	peakRSS := measurePeakRSS(pid, res.steadyRSS)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	took := make([]time.Duration, stormWatchers)
	errs := make([]error, stormWatchers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range stormWatchers {
		wg.Go(func() {
			took[i], errs[i] = initialEvents(ctx, rc, path, want, start)
		})
	}
	wg.Wait()
	peak := peakRSS()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.peakGrowth = max(peak-res.steadyRSS, 0)
	slices.Sort(took)
	res.last, res.p50 = took[len(took)-1], took[len(took)/2]
	return res, nil
}

// measurePeakRSS starts measuring the peak resident memory of process pid, whose resident
// memory is steady now, in bytes; the function it returns stops measuring and returns the
// peak. The peak is the kernel's high-water mark, reset now, and samples taken every 50 ms
// meanwhile, which is all there is where the kernel does not allow the reset.
func measurePeakRSS(pid, steady int) (stop func() int) {
	resetHWM := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	sampled := steady
	stopSampling := make(chan struct{})
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				sampled = max(sampled, procMemory(pid, "VmRSS"))
			}
		}
	}()
	return func() int {
		close(stopSampling)
		<-sampling
		peak := sampled
		if resetHWM {
			peak = max(peak, procMemory(pid, "VmHWM"))
		}
		return peak
	}
}

// initialEvents opens one watch of path with its initial events and reads it until the
// initial-events-end bookmark, returning the time since start. It reads the events as lines
// (the JSON watch stream has one per line) without decoding them, so that the watchers'
// decoding does not take the servers' share of the machine.
func initialEvents(ctx context.Context, rc rest.Interface, path string, want int, start time.Time) (time.Duration, error) {
	stream, err := rc.Get().AbsPath(path).
		Param("watch", "true").Param("sendInitialEvents", "true").Param("allowWatchBookmarks", "true").
		Param("resourceVersionMatch", "NotOlderThan").Stream(ctx)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	r := bufio.NewReaderSize(stream, 1<<20)
	added, line := 0, []byte(nil)
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("after %d initial events: %w", added, err)
		}
		switch {
		case bytes.HasPrefix(line, []byte(`{"type":"ADDED"`)):
			added++
		case bytes.HasPrefix(line, []byte(`{"type":"BOOKMARK"`)) && bytes.Contains(line, []byte(`"k8s.io/initial-events-end":"true"`)):
			if added < want {
				return 0, fmt.Errorf("the initial events ended after %d objects, want %d", added, want)
			}
			return time.Since(start), nil
		}
		line = line[:0]
	}
}

// childProcess is the process id of this process's child running the binary named name.
func childProcess(name string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || filepath.Base(exe) != name {
			continue
		}
		if procStatus(pid, "PPid") == os.Getpid() {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no child process runs %s", name)
}

// procMemory is a memory field (VmRSS, VmHWM) of process pid in bytes, 0 when unknown.
func procMemory(pid int, field string) int {
	return procStatus(pid, field) * 1024
}

// procStatus is the first number of a field of /proc/<pid>/status, 0 when unknown.
func procStatus(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}
