package runner

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/runner/plan"
)

// Defaults of the run flags; the paths are the pod layout the Job mounts.
const (
	DefaultBin         = "/captf/runtime"
	DefaultConfig      = "/captf/config"
	DefaultModule      = "/captf/module"
	DefaultProviders   = "/captf/providers"
	DefaultWorkdir     = "/captf/work"
	DefaultResult      = "/dev/termination-log"
	DefaultPlanKeyFile = "/captf/plan-key/key"
	DefaultLockTimeout = 5 * time.Minute
	DefaultStopTimeout = time.Minute
)

// Options configure one run. The zero value is not usable; start from NewOptions.
type Options struct {
	// Op is the operation to run.
	Op jobs.Op
	// Bin is the runtime command: the OpenTofu/Terraform binary and any fixed arguments.
	Bin []string
	// Config is the directory of the rendered root module (main.tf.json, terraform.tfvars.json).
	Config string
	// Module is the module directory the image ships. The runner only checks that it holds a
	// module; the rendered root references it by its own source path.
	Module string
	// Providers is an optional provider mirror; when it exists, OpenTofu installs providers
	// from it only.
	Providers string
	// Workdir is the writable work directory (root module copy, plan files, data dir, HOME).
	Workdir string
	// Image is the module image reference, reported in the result.
	Image string
	// ResultFile receives the result document.
	ResultFile string
	// BackendConfig are -backend-config values passed to init as given (key=value or a file).
	BackendConfig []string
	// LockTimeout is how long OpenTofu waits for the state lock.
	LockTimeout time.Duration
	// StopTimeout is how long a stopped runtime may take before it is killed.
	StopTimeout time.Duration
	// ForceUnlock is a stale lock ID to release right after init.
	ForceUnlock string
	// GuardDeletes stops an apply before a plan that deletes or replaces, unless
	// AllowDeletesHash equals InputsHash.
	GuardDeletes bool
	// InputsHash is the hash of the rendered inputs of this run.
	InputsHash string
	// AllowDeletesHash is the inputs hash whose destructive plans were approved.
	AllowDeletesHash string
	// ExpectPlan is the approved p2: plan hash; the apply goes ahead only when the new plan has
	// this hash.
	ExpectPlan string
	// PlanKeyFile holds the key of the plan hash.
	PlanKeyFile string
	// RestoreChunks is the number of backup chunks a restore assembles from Config/restore/<i>.
	RestoreChunks int
	// RestoreResources is how many resources the backup held; a restore that lists none while
	// this is positive fails.
	RestoreResources int

	// Environ is the environment the runtime's environment is derived from (os.Environ()).
	Environ []string
	// Stdout and Stderr receive the runtime's output and the runner's log (the pod log).
	Stdout, Stderr io.Writer
}

// NewOptions returns Options with the documented defaults.
func NewOptions() Options {
	return Options{
		Bin:         []string{DefaultBin},
		Config:      DefaultConfig,
		Module:      DefaultModule,
		Providers:   DefaultProviders,
		Workdir:     DefaultWorkdir,
		ResultFile:  DefaultResult,
		LockTimeout: DefaultLockTimeout,
		StopTimeout: DefaultStopTimeout,
		PlanKeyFile: DefaultPlanKeyFile,
	}
}

// UsageError is a bad op, flag or argument. The command exits 2 for it.
type UsageError struct{ Err error }

// Error returns the underlying message.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// Validate checks the options that flag parsing cannot. Every error is a *UsageError.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !o.Op.Valid() {
		bad("--op must be one of apply, plan, destroy, refresh, drift, restore; got %q", o.Op)
	}
	if len(o.Bin) == 0 || o.Bin[0] == "" {
		bad("--bin must name the runtime binary")
	}
	for _, f := range []struct{ name, value string }{
		{"--config", o.Config}, {"--module", o.Module}, {"--workdir", o.Workdir}, {"--result", o.ResultFile},
	} {
		if f.value == "" {
			bad("%s must not be empty", f.name)
		}
	}
	if o.LockTimeout < 0 {
		bad("--lock-timeout must not be negative")
	}
	if o.StopTimeout <= 0 {
		bad("--stop-timeout must be positive")
	}
	if o.GuardDeletes && o.Op != jobs.OpApply {
		bad("--guard-deletes applies to --op=apply only")
	}
	if o.GuardDeletes && o.InputsHash == "" {
		bad("--guard-deletes needs --inputs-hash")
	}
	if o.ExpectPlan != "" {
		if o.Op != jobs.OpApply {
			bad("--expect-plan applies to --op=apply only")
		}
		if !strings.HasPrefix(o.ExpectPlan, plan.HashPrefix) {
			bad("--expect-plan must be a %s plan hash", plan.HashPrefix)
		}
	}
	if o.Op == jobs.OpRestore && o.RestoreChunks < 1 {
		bad("--op=restore needs --restore-chunks of at least 1")
	}
	if o.RestoreChunks < 0 || o.RestoreResources < 0 {
		bad("--restore-chunks and --restore-resources must not be negative")
	}
	if len(errs) == 0 {
		return nil
	}
	return &UsageError{Err: errors.Join(errs...)}
}

// needsPlanKey reports whether the run must fingerprint a plan, so that a missing key fails it.
func (o Options) needsPlanKey() bool {
	return o.Op == jobs.OpPlan || (o.Op == jobs.OpApply && o.ExpectPlan != "")
}

// plansBeforeApply reports whether an apply plans to a file first (guarded or approved).
func (o Options) plansBeforeApply() bool {
	return o.Op == jobs.OpApply && (o.GuardDeletes || o.ExpectPlan != "")
}
