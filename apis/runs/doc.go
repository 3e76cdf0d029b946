// Package runs is the internal (hub) version of the runs.captf.io API: Run, Plan and
// PlanApproval. The aggregated API server converts every versioned request to these types and
// back; nothing is stored.
//
// +k8s:deepcopy-gen=package
// +groupName=runs.captf.io
package runs
