package app

import (
	"sort"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// SortNewestFirst orders runs by creation time, newest first; runs created in the same second
// are ordered by attempt, then name, both descending.
func SortNewestFirst(runs []runsv1alpha1.Run) {
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return b.CreationTimestamp.Before(&a.CreationTimestamp)
		}
		if a.Spec.Attempt != b.Spec.Attempt {
			return a.Spec.Attempt > b.Spec.Attempt
		}
		return a.Name > b.Name
	})
}

func orNone(s string) string {
	if s == "" {
		return None
	}
	return s
}
