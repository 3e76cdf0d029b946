package runner

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/runner/plan"
	"github.com/captf/captf/runner/runflag"
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
	// CLIConfig is the run's own OpenTofu CLI configuration file. When set, it is the whole
	// CLI configuration: the runner writes none for Providers.
	CLIConfig string
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
	// ExpectPlan is the approved p3: plan hash; the apply goes ahead only when the new plan has
	// this hash.
	ExpectPlan string
	// PlanKeyFile holds the key of the plan hash.
	PlanKeyFile string
	// RestoreChunks is the number of backup chunks a restore assembles from Config/restore/<i>.
	RestoreChunks int
	// RestoreResources is how many resources the backup held; a restore that lists none while
	// this is positive fails.
	RestoreResources int
	// SecretEnv names the environment variables whose values come from Secrets; the runner
	// redacts their values.
	SecretEnv []string
	// Credentials is the directory of the identity's credentials, one file per key, whose
	// contents the runner redacts (the same values reach the runtime as environment
	// variables); empty when the run has none.
	Credentials string
	// StateKeys is the directory of the state passphrases, one file per key id; empty when
	// the state is not encrypted. StateKey is the key id every write is encrypted with, and
	// StateAcceptPlaintext lets the run read a state in the clear, which its next write
	// encrypts.
	StateKeys            string
	StateKey             string
	StateAcceptPlaintext bool

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

// AddFlags defines the flags of `runner run` on fs, bound to o, with o's values as the
// defaults. The runner's command and the contract test against the Job's arguments both use it.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar((*string)(&o.Op), runflag.Op, string(o.Op), "operation: apply, plan, destroy, refresh, drift or restore (required)")
	fs.StringArrayVar(&o.Bin, runflag.Bin, o.Bin, "runtime binary and fixed arguments (repeat for each)")
	fs.StringVar(&o.Config, runflag.Config, o.Config, "directory of the rendered root module")
	fs.StringVar(&o.Module, runflag.Module, o.Module, "module directory of the image (checked by preflight)")
	fs.StringVar(&o.Providers, runflag.Providers, o.Providers, "provider mirror of the image; when it exists, providers are installed from it only")
	fs.StringVar(&o.Workdir, runflag.Workdir, o.Workdir, "writable work directory")
	fs.StringVar(&o.Image, runflag.Image, o.Image, "module image reference, reported in the result")
	fs.StringVar(&o.ResultFile, runflag.Result, o.ResultFile, "file that receives the result document")
	fs.StringArrayVar(&o.BackendConfig, runflag.BackendConfig, o.BackendConfig, "-backend-config value for init (repeatable)")
	fs.DurationVar(&o.LockTimeout, runflag.LockTimeout, o.LockTimeout, "how long to wait for the state lock")
	fs.DurationVar(&o.StopTimeout, runflag.StopTimeout, o.StopTimeout, "how long a stopped runtime may take before it is killed")
	fs.StringVar(&o.ForceUnlock, runflag.ForceUnlock, o.ForceUnlock, "stale lock ID to release after init")
	fs.BoolVar(&o.GuardDeletes, runflag.GuardDeletes, o.GuardDeletes, "stop before a plan that deletes or replaces unless approved")
	fs.StringVar(&o.InputsHash, runflag.InputsHash, o.InputsHash, "hash of this run's rendered inputs")
	fs.StringVar(&o.AllowDeletesHash, runflag.AllowDeletesHash, o.AllowDeletesHash, "inputs hash whose destructive plans are approved")
	fs.StringVar(&o.ExpectPlan, runflag.ExpectPlan, o.ExpectPlan, "approved p3: plan hash; apply only a plan with this hash")
	fs.StringVar(&o.PlanKeyFile, runflag.PlanKeyFile, o.PlanKeyFile, "key of the plan hash")
	fs.IntVar(&o.RestoreChunks, runflag.RestoreChunks, o.RestoreChunks, "number of backup chunks in <config>/restore/ (restore)")
	fs.IntVar(&o.RestoreResources, runflag.RestoreResources, o.RestoreResources, "resources the backup held (restore)")
	fs.StringArrayVar(&o.SecretEnv, runflag.SecretEnv, o.SecretEnv, "environment variable whose value comes from a Secret and is redacted (repeatable)")
	fs.StringVar(&o.Credentials, runflag.Credentials, o.Credentials, "directory of the identity's credentials, one file per key, redacted")
	fs.StringVar(&o.StateKeys, runflag.StateKeys, o.StateKeys, "directory of the state passphrases, one file per key id; encrypts the state")
	fs.StringVar(&o.StateKey, runflag.StateKey, o.StateKey, "key id the state is encrypted with")
	fs.BoolVar(&o.StateAcceptPlaintext, runflag.StateAcceptPlaintext, o.StateAcceptPlaintext, "read a state in the clear, which the next write encrypts")
	fs.StringVar(&o.CLIConfig, runflag.CLIConfig, o.CLIConfig, "CLI configuration file of the run; replaces the one the runner writes for the provider mirror")
}

// secretSources checks the flags that say where the run's secrets are, to redact them, and
// the state keys'.
func (o Options) secretSources() []error {
	var errs []error
	for _, name := range o.SecretEnv {
		if name == "" || strings.Contains(name, "=") {
			errs = append(errs, fmt.Errorf("%s must name an environment variable; got %q", runflag.Flag(runflag.SecretEnv), name))
		}
	}
	for _, f := range []struct{ name, value string }{{runflag.Credentials, o.Credentials}, {runflag.CLIConfig, o.CLIConfig}, {runflag.StateKeys, o.StateKeys}} {
		if f.value != "" && !filepath.IsAbs(f.value) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path; got %q", runflag.Flag(f.name), f.value))
		}
	}
	if (o.StateKeys == "") != (o.StateKey == "") || (o.StateAcceptPlaintext && o.StateKeys == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together, and %s needs them", runflag.Flag(runflag.StateKeys), runflag.Flag(runflag.StateKey), runflag.Flag(runflag.StateAcceptPlaintext)))
	}
	return errs
}

// Validate checks the options that flag parsing cannot. Every error is a *UsageError.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	flag := runflag.Flag
	if !o.Op.Valid() {
		bad("%s must be one of apply, plan, destroy, refresh, drift, restore; got %q", flag(runflag.Op), o.Op)
	}
	if len(o.Bin) == 0 || o.Bin[0] == "" {
		bad("%s must name the runtime binary", flag(runflag.Bin))
	}
	for _, f := range []struct{ name, value string }{
		{runflag.Config, o.Config}, {runflag.Module, o.Module}, {runflag.Workdir, o.Workdir}, {runflag.Result, o.ResultFile},
	} {
		if f.value == "" {
			bad("%s must not be empty", flag(f.name))
		}
	}
	errs = append(errs, o.secretSources()...)
	if o.LockTimeout < 0 {
		bad("%s must not be negative", flag(runflag.LockTimeout))
	}
	if o.StopTimeout <= 0 {
		bad("%s must be positive", flag(runflag.StopTimeout))
	}
	if o.GuardDeletes && o.Op != jobs.OpApply {
		bad("%s applies to %s only", flag(runflag.GuardDeletes), runflag.Arg(runflag.Op, string(jobs.OpApply)))
	}
	if o.GuardDeletes && o.InputsHash == "" {
		bad("%s needs %s", flag(runflag.GuardDeletes), flag(runflag.InputsHash))
	}
	if o.ExpectPlan != "" {
		if o.Op != jobs.OpApply {
			bad("%s applies to %s only", flag(runflag.ExpectPlan), runflag.Arg(runflag.Op, string(jobs.OpApply)))
		}
		if !strings.HasPrefix(o.ExpectPlan, plan.HashPrefix) {
			bad("%s must be a %s plan hash", flag(runflag.ExpectPlan), plan.HashPrefix)
		}
	}
	if o.Op == jobs.OpRestore && o.RestoreChunks < 1 {
		bad("%s needs %s of at least 1", runflag.Arg(runflag.Op, string(jobs.OpRestore)), flag(runflag.RestoreChunks))
	}
	if o.RestoreChunks < 0 || o.RestoreResources < 0 {
		bad("%s and %s must not be negative", flag(runflag.RestoreChunks), flag(runflag.RestoreResources))
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
