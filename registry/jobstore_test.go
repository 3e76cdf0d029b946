package registry

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/captf/captf/jobs"
)

// TestJobFeedStoresAndPublishesWhatTheReflectorSends drives the feed as the Reflector does: an
// initial list, watch events, a relist after the watch broke.
func TestJobFeedStoresAndPublishesWhatTheReflectorSends(t *testing.T) {
	src := newTestSource(t, cluster("team-a", "web", nil, nil, nil))
	src.synced.Store(false) // as before Run marks it synced
	feed := &jobFeed{src: src}
	kept := newJob("team-a", "web", jobs.OpApply, 1, succeeded(t0.Add(-time.Hour)))
	gone := newJob("team-a", "web", jobs.OpDrift, 1, succeeded(t0.Add(-time.Hour)))

	// The initial list is stored, not published; after it the feed has synced.
	if feed.hasSynced() {
		t.Fatal("synced before the initial list")
	}
	if err := feed.Replace([]any{recordOfJob(kept), recordOfJob(gone)}, "1"); err != nil {
		t.Fatal(err)
	}
	if !feed.hasSynced() || src.jobs.len() != 2 || len(src.jobs.ofOwner(ownerKeyOf("team-a", jobs.KindCluster, "web"))) != 2 {
		t.Fatalf("after the initial list: synced %v, %d Jobs", feed.hasSynced(), src.jobs.len())
	}
	src.markSynced()
	w := watchRuns(t, src, &metainternalversion.ListOptions{ResourceVersion: src.listRV()})

	// A watch event of a new Job is ADDED; the same version again is nothing.
	added := newJob("team-a", "web", jobs.OpApply, 2)
	if err := feed.Add(added); err != nil { // a Job, as a Reflector without Transformer sends
		t.Fatal(err)
	}
	expect(t, w, seen{watch.Added, added.Name, "Pending"})
	if err := feed.Update(recordOfJob(added)); err != nil {
		t.Fatal(err)
	}
	quiet(t, w)

	// A relist that lacks a Job deletes it and brings the changes the broken watch missed.
	started(t0.Add(-time.Minute))(added)
	added.ResourceVersion = nextRV()
	if err := feed.Replace([]any{recordOfJob(kept), recordOfJob(added)}, "9"); err != nil {
		t.Fatal(err)
	}
	expect(t, w, seen{watch.Deleted, gone.Name, "Succeeded"}, seen{watch.Modified, added.Name, "Running"})
	if _, ok := src.jobs.get("team-a", gone.Name); ok || src.jobs.len() != 2 {
		t.Errorf("the relist left %d Jobs, the gone one still there: %v", src.jobs.len(), ok)
	}

	// A delete event, also as a tombstone, removes the Job and its owner entry with its last Job.
	if err := feed.Delete(cache.DeletedFinalStateUnknown{Key: "team-a/" + added.Name, Obj: recordOfJob(added)}); err != nil {
		t.Fatal(err)
	}
	expect(t, w, seen{watch.Deleted, added.Name, "Running"})
	if err := feed.Delete(kept); err != nil {
		t.Fatal(err)
	}
	expect(t, w, seen{watch.Deleted, kept.Name, "Succeeded"})
	if keys := src.jobs.ownerKeys(); src.jobs.len() != 0 || len(keys) != 0 {
		t.Errorf("the store keeps %d Jobs and owners %v", src.jobs.len(), keys)
	}
	// Deleting what is not there publishes nothing; an object of another type is an error.
	if err := feed.Delete(kept); err != nil {
		t.Fatal(err)
	}
	quiet(t, w)
	if err := feed.Add(&batchv1.CronJob{}); err == nil {
		t.Error("the feed took a CronJob")
	}
}
