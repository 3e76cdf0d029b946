package jobs

import (
	"go/token"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestApprovalsOf(t *testing.T) {
	approvedAt := at(3).Format(time.RFC3339)
	tests := []struct {
		name        string
		annotations map[string]string
		want        Approvals
	}{
		{"no annotations, no approvals", nil, Approvals{}},
		{"every approval annotation is read", map[string]string{
			AnnotationApprovePlan: planHash, AnnotationApproveDestructivePlan: inputsHash,
			AnnotationApprovedBy: "alice", AnnotationApprovedAt: approvedAt,
		}, Approvals{Plan: planHash, DestructivePlan: inputsHash, By: "alice", At: &metav1.Time{Time: at(3)}}},
		{"a missing annotation reads as empty", map[string]string{AnnotationApproveDestructivePlan: inputsHash}, Approvals{DestructivePlan: inputsHash}},
		{"an approved-at that is not RFC 3339 is unknown", map[string]string{AnnotationApprovedBy: "bob", AnnotationApprovedAt: "yesterday"}, Approvals{By: "bob"}},
		{"an approved-at with an offset is the same instant", map[string]string{AnnotationApprovedAt: at(3).In(time.FixedZone("", 2*3600)).Format(time.RFC3339)},
			Approvals{At: &metav1.Time{Time: at(3)}}},
		{"other annotations are not approvals", map[string]string{AnnotationApprovedPlan: planHash, AnnotationInputsHash: inputsHash}, Approvals{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ApprovalsOf(tt.annotations)
			if got.Plan != tt.want.Plan || got.DestructivePlan != tt.want.DestructivePlan || got.By != tt.want.By ||
				(got.At == nil) != (tt.want.At == nil) || got.At != nil && !got.At.Equal(tt.want.At) {
				t.Errorf("ApprovalsOf(%v) = %+v, want %+v", tt.annotations, got, tt.want)
			}
		})
	}
}

// TestApprovalAnnotations_AreExactlyWhatApprovalsOfReads checks ApprovalAnnotations against
// the source of ApprovalsOf, as TestViewAnnotations_ListEveryAnnotationTheRunModelReads checks
// ViewAnnotations: the API server keeps only the listed annotations of an object.
func TestApprovalAnnotations_AreExactlyWhatApprovalsOfReads(t *testing.T) {
	src := parseModel(t, nil)
	fn := src.funcs["ApprovalsOf"]
	a := &analysis{src: src, out: reads{keys: map[string][]token.Position{}}, seen: map[string]bool{}}
	a.analyze(fn, binding{maps: map[string]bool{fn.Type.Params.List[0].Names[0].Name: true}})
	for _, p := range a.out.problems {
		t.Errorf("%s", p)
	}
	got, want := slices.Sorted(maps.Keys(a.out.keys)), slices.Sorted(slices.Values(ApprovalAnnotations()))
	if !slices.Equal(got, want) {
		t.Errorf("ApprovalsOf reads %v; ApprovalAnnotations lists %v", got, want)
	}
}

func TestAnnotationLists_AreTheCallersOwn(t *testing.T) {
	ViewAnnotations()[0], ApprovalAnnotations()[0] = "changed", "changed"
	if ViewAnnotations()[0] == "changed" || ApprovalAnnotations()[0] == "changed" {
		t.Errorf("a caller changed the lists of package jobs")
	}
}
