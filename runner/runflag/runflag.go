// Package runflag names the flags of `runner run`. The runner defines its flags with these
// names (runner.Options.AddFlags) and the Job passes them (controller/jobspec), so a name is
// spelled once. It imports nothing, so the controller can use it without linking the runner.
package runflag

// Names of the `runner run` flags, without the leading dashes.
const (
	// Op is the operation to run.
	Op = "op"
	// Bin is the runtime binary; repeated for fixed arguments.
	Bin = "bin"
	// Config is the directory of the rendered root module.
	Config = "config"
	// Module is the module directory of the image.
	Module = "module"
	// Providers is the provider mirror directory of the image, used when it exists.
	Providers = "providers"
	// Workdir is the writable work directory.
	Workdir = "workdir"
	// Image is the module image reference, reported in the result.
	Image = "image"
	// Result is the file that receives the result document.
	Result = "result"
	// BackendConfig is a -backend-config value for init; repeatable.
	BackendConfig = "backend-config"
	// LockTimeout is how long to wait for the state lock.
	LockTimeout = "lock-timeout"
	// StopTimeout is how long a stopped runtime may take before it is killed.
	StopTimeout = "stop-timeout"
	// ForceUnlock is a stale lock ID to release after init.
	ForceUnlock = "force-unlock"
	// GuardDeletes is a boolean: stop before a plan that deletes or replaces unless approved.
	GuardDeletes = "guard-deletes"
	// InputsHash is the hash of the run's rendered inputs.
	InputsHash = "inputs-hash"
	// AllowDeletesHash is the inputs hash whose destructive plans are approved.
	AllowDeletesHash = "allow-deletes-hash"
	// ExpectPlan is the approved plan hash an apply must match.
	ExpectPlan = "expect-plan"
	// PlanKeyFile is the file that holds the key of the plan hash.
	PlanKeyFile = "plan-key-file"
	// StateKeys is the directory of state passphrases, a file per key id; StateKey the key id
	// writes are encrypted with; StateAcceptPlaintext lets a run read a state in the clear.
	StateKeys            = "state-keys"
	StateKey             = "state-key"
	StateAcceptPlaintext = "state-accept-plaintext"
	// RestoreChunks is the number of backup chunks a restore assembles.
	RestoreChunks = "restore-chunks"
	// RestoreResources is how many resource instances the backup held.
	RestoreResources = "restore-resources"
	// SecretEnv names an environment variable whose value comes from a Secret; repeatable.
	SecretEnv = "secret-env"
	// Credentials is the directory of the identity's credentials, one file per key.
	Credentials = "credentials"
	// CLIConfig is the run's own OpenTofu CLI configuration file, which replaces the runner's.
	CLIConfig = "cli-config"
)

// Flag returns the flag as written on a command line: --name. A boolean flag is passed so.
func Flag(name string) string { return "--" + name }

// Arg returns the flag with its value as one argument: --name=value.
func Arg(name, value string) string { return "--" + name + "=" + value }
