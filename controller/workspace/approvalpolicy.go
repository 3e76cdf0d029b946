package workspace

// ApprovalPolicyName names the ValidatingAdmissionPolicy of artifacts/policy, and its binding,
// that keep approval annotations to the runs API server.
const ApprovalPolicyName = "captf-approval-annotations"
