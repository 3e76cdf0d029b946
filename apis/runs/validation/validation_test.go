package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/jobs"
)

func TestValidatePlanApproval(t *testing.T) {
	hash := "p3:" + strings.Repeat("ab", 32)
	tests := []struct {
		name      string
		body      runs.PlanApproval
		wantPaths []string
	}{
		{name: "the URL name and a plan hash are valid", body: approval("plan-1", hash)},
		{name: "an empty name stands for the URL name", body: approval("", hash)},
		{name: "an inputs hash is valid for a blocked apply", body: approval("plan-1", "h1:"+strings.Repeat("0f", 32))},
		{name: "another name than the URL's is refused", body: approval("plan-2", hash), wantPaths: []string{"metadata.name"}},
		{name: "the hash is required", body: approval("plan-1", ""), wantPaths: []string{"spec.planHash"}},
		{name: "a hash without a prefix is refused", body: approval("plan-1", strings.Repeat("ab", 32)), wantPaths: []string{"spec.planHash"}},
		{name: "a hash under another prefix is refused", body: approval("plan-1", "a:0"), wantPaths: []string{"spec.planHash"}},
		{name: "a plan hash of the older p2 format is refused", body: approval("plan-1", "p2:"+strings.Repeat("ab", 32)), wantPaths: []string{"spec.planHash"}},
		{name: "an exports hash is not approvable", body: approval("plan-1", "e1:"+strings.Repeat("ab", 32)), wantPaths: []string{"spec.planHash"}},
		{name: "a hash with upper case hex is refused", body: approval("plan-1", "p3:ABCDEF"), wantPaths: []string{"spec.planHash"}},
		{name: "an overlong hash is refused", body: approval("plan-1", "p3:"+strings.Repeat("a", MaxHashLength)), wantPaths: []string{"spec.planHash"}},
		{name: "every problem is reported", body: approval("other", ""), wantPaths: []string{"metadata.name", "spec.planHash"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidatePlanApproval(&tt.body, "plan-1")
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
			}
			if strings.Join(got, ",") != strings.Join(tt.wantPaths, ",") {
				t.Fatalf("error paths = %v, want %v (%v)", got, tt.wantPaths, errs)
			}
		})
	}
}

func approval(name, hash string) runs.PlanApproval {
	return runs.PlanApproval{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: runs.PlanApprovalSpec{PlanHash: hash}}
}

// TestApprovableHashesAreTheOnesCaptfComputes keeps the hand-written pattern in step with the
// prefixes the runner and the controller version their hashes by.
func TestApprovableHashesAreTheOnesCaptfComputes(t *testing.T) {
	hex64 := strings.Repeat("a", 64)
	for _, tt := range []struct {
		hash string
		ok   bool
	}{
		{jobs.PlanHashPrefix + hex64, true},
		{inputs.HashPrefix + hex64, true},
		{jobs.EmptyPlanHash, true},
	} {
		if got := hashPattern.MatchString(tt.hash); got != tt.ok {
			t.Errorf("hashPattern matches %s: %v, want %v", tt.hash, got, tt.ok)
		}
	}
}
