// Package registry holds the storage of the aggregated runs.captf.io API server: read-only
// runs and plans computed from retained Jobs, and the plans/approval subresource.
package registry
