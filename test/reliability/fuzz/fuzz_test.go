// Package fuzz holds fuzz targets for the input parsers reachable from outside: the PlanApproval
// body the aggregated API server validates, and the approval check over arbitrary captf.io
// annotations. `go test` runs their seed corpora; `make fuzz` fuzzes them.
package fuzz

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/apis/runs/install"
	"github.com/captf/captf/apis/runs/validation"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/registry"
)

var codecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return serializer.NewCodecFactory(scheme)
}()

// FuzzPlanApprovalBody decodes a request body as the API server does (versioned JSON into the
// internal PlanApproval) and validates it against a plan name. It never panics, and a body it
// accepts quotes a well-formed hash of bounded length under the plan's name or none.
func FuzzPlanApprovalBody(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","metadata":{"name":"p"},"spec":{"planHash":"p3:abcdef"}}`,
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","spec":{"planHash":"h1:00"}}`,
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","metadata":{"name":"other"},"spec":{"planHash":"p3:ab"}}`,
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","spec":{}}`,
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","spec":{"planHash":"a:0"}}`,
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"Plan","spec":{"planHash":"p3:ab"}}`,
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","spec":{"planHash":12}}`,
		`{"apiVersion":"runs.captf.io/v1alpha1","kind":"PlanApproval","spec":{"planHash":"p3:` + strings.Repeat("f", 200) + `"}}`,
		`{"kind":"PlanApproval"}`, `null`, `[]`, `{`, ``,
	} {
		f.Add([]byte(seed), "p")
	}
	decoder := codecs.UniversalDecoder()
	f.Fuzz(func(t *testing.T, body []byte, plan string) {
		into := &runs.PlanApproval{}
		obj, _, err := decoder.Decode(body, nil, into)
		if err != nil {
			return // a clear decoding error
		}
		approval, ok := obj.(*runs.PlanApproval)
		if !ok {
			return // another kind: the REST handler refuses it
		}
		if errs := validation.ValidatePlanApproval(approval, plan); len(errs) == 0 {
			hash := approval.Spec.PlanHash
			if hash == "" || len(hash) > validation.MaxHashLength || !(strings.HasPrefix(hash, "p3:") || strings.HasPrefix(hash, "h1:")) {
				t.Fatalf("accepted hash %q", hash)
			}
			if approval.Name != "" && approval.Name != plan {
				t.Fatalf("accepted name %q for plan %q", approval.Name, plan)
			}
		} else {
			for _, e := range errs {
				if e.Field == "" || e.Error() == "" {
					t.Fatalf("an error without a field path: %v", e)
				}
			}
		}
	})
}

// FuzzApprovalCheck decides approvals of a succeeded plan Job, signed as the controller signs
// it and then given one arbitrary annotation (tamperKey=tamperValue, none when the key is
// empty), under arbitrary captf.io annotations on the owner and an arbitrary quoted hash, with
// the runs API server's check of the Job. It never panics; it allows only an approval that
// quotes the plan's own hash, writing exactly that hash; and never one of a Job whose captf.io/
// annotations someone else changed.
func FuzzApprovalCheck(f *testing.F) {
	hidden, err := jobs.EncodeSummary(jobs.Summary{Outcome: jobs.OutcomeSucceeded, Plan: &jobs.PlanSummary{Hash: "p3:abc", Change: 1}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("p3:abc", "", "", "", "2026-11-30T15:00:00Z", "p3:abc", "alice", "", "")
	f.Add("p3:abc", "garbage", "h1:zz", "bob", "yesterday", "p3:abd", "alice", "", "")
	f.Add("", "p3:abc", "", "", "", "p3:abc", "", "", "")
	f.Add("p3:abc", "p3:abc", "", "mallory", "0000", "h1:abc", "x", "", "")
	// Someone who may patch Jobs rewrites the plan's result to hide a delete, its digest, or its
	// signature; or adds a note of another domain, which the signature does not cover.
	f.Add("p3:abc", "", "", "", "", "p3:abc", "alice", jobs.AnnotationResult, hidden)
	f.Add("p3:abc", "", "", "", "", "p3:abc", "alice", runkey.AnnotationResultDigest, runkey.ResultDigest(hidden))
	f.Add("p3:abc", "", "", "", "", "p3:abc", "alice", runkey.AnnotationSignature, "s1:forged")
	f.Add("p3:abc", "", "", "", "", "p3:abc", "alice", "example.com/note", "reviewed")
	key, err := runkey.Of([]byte(strings.Repeat("k", runkey.Size)))
	if err != nil {
		f.Fatal(err)
	}
	verify := registry.PlanVerifier(key)
	f.Fuzz(func(t *testing.T, planHash, approvePlan, approveDestructive, approvedBy, approvedAt, quoted, user, tamperKey, tamperValue string) {
		now := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
		summary := jobs.Summary{Outcome: jobs.OutcomeSucceeded, FinishedAt: &metav1.Time{Time: now}}
		if planHash != "" {
			summary.Plan = &jobs.PlanSummary{Hash: planHash}
		}
		encoded, err := jobs.EncodeSummary(summary)
		if err != nil {
			return
		}
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
			Name: "captf-c-x-plan-a1-abcdef", Namespace: "ns", UID: "uid-1", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute)),
			Labels:      map[string]string{jobs.LabelOp: string(jobs.OpPlan), jobs.LabelAttempt: "1"},
			Annotations: map[string]string{jobs.AnnotationBookkept: "true", jobs.AnnotationResult: encoded, runkey.AnnotationResultDigest: runkey.ResultDigest(encoded)},
		}}
		// Finished, so that the plan awaits approval unless something else says otherwise.
		finished := metav1.NewTime(now.Add(-30 * time.Second))
		job.Status = batchv1.JobStatus{StartTime: &job.CreationTimestamp, CompletionTime: &finished, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: finished},
		}}
		job.Annotations[runkey.AnnotationSignature] = key.SignJob(job)
		tampered := false
		if tamperKey != "" {
			old, had := job.Annotations[tamperKey]
			tampered = strings.HasPrefix(tamperKey, "captf.io/") && (!had || old != tamperValue)
			job.Annotations[tamperKey] = tamperValue
		}
		annotations := map[string]string{
			jobs.AnnotationApprovePlan: approvePlan, jobs.AnnotationApproveDestructivePlan: approveDestructive,
			jobs.AnnotationApprovedBy: approvedBy, jobs.AnnotationApprovedAt: approvedAt,
		}
		var current *jobs.CurrentPlan
		if planHash != "" {
			current = &jobs.CurrentPlan{PlanHash: planHash, Job: job.Name}
		}
		owner := registry.PlanOwnerOf(annotations, current)
		owner.Verify = verify
		d := jobs.PlanApprovalCheck(job, []batchv1.Job{*job}, owner, quoted, user, now)
		if d.Verdict == jobs.ApprovalAllowed && tampered {
			t.Fatalf("allowed the approval of a plan whose %s was rewritten to %q", tamperKey, tamperValue)
		}
		if d.Verdict == jobs.ApprovalAllowed {
			for k, v := range d.Annotations {
				if k == jobs.AnnotationApprovePlan && v != quoted {
					t.Fatalf("allowed quoting %q but writes %s=%q", quoted, k, v)
				}
			}
		}
		_, _ = json.Marshal(d)
	})
}
