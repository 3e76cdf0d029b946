package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/statecrypt"
	"github.com/captf/captf/runner/plan"
)

// Exit codes of the runner. A step's own exit code is never passed through.
const (
	// ExitOK: every step succeeded, or an apply found nothing to change.
	ExitOK = 0
	// ExitFailure: a step failed, the run was interrupted, blocked or its plan changed, the
	// image layout or preparation was wrong, or the result could not be written.
	ExitFailure = 1
	// ExitUsage: a bad command, op, flag or argument.
	ExitUsage = 2
)

// Names of the steps in the result. Besides the runtime's steps, preflight, plan-key, prepare
// and flags name the runner's own checks when they fail.
const (
	StepFlags       = "flags"
	StepPreflight   = "preflight"
	StepPlanKey     = "plan-key"
	StepPrepare     = "prepare"
	StepInit        = "init"
	StepForceUnlock = "force-unlock"
	StepValidate    = "validate"
	StepPlan        = "plan"
	StepShow        = "show"
	StepApply       = "apply"
	StepDestroy     = "destroy"
	StepRefresh     = "refresh"
	StepStatePush   = "state-push"
	StepStateList   = "state-list"
)

// runner is one run in progress.
type runner struct {
	o              Options
	stdout, stderr io.Writer
	env            []string
	rootDir        string
	planFile       string
	// lockPinned: the module image ships a dependency lock file, which init must not change.
	lockPinned bool
	// key is the plan key; nil when the run has none.
	key []byte
	// secrets are scrubbed from everything the runner writes: the log and the error tail.
	secrets secretSet
	res     jobs.RunnerResult
}

// Run runs one operation and writes its result to o.ResultFile. It returns the result and the
// exit code (ExitOK or ExitFailure). Cancelling ctx is a stop request (SIGTERM to the Job): the
// running step's runtime gets SIGTERM, is killed after o.StopTimeout, no further step starts
// and the result says interrupted. Options that fail Validate end the run with ExitUsage and a
// step error in "flags".
func Run(ctx context.Context, o Options) (jobs.RunnerResult, int) {
	r := &runner{o: o, stdout: o.Stdout, stderr: o.Stderr}
	if r.stdout == nil {
		r.stdout = io.Discard
	}
	if r.stderr == nil {
		r.stderr = io.Discard
	}
	if err := o.Validate(); err != nil {
		r.logf("%v", err)
		WriteUsageResult(o.Op, o.ResultFile, err)
		return jobs.RunnerResult{Op: o.Op, Error: &jobs.RunnerError{Kind: jobs.ErrorKindStep, Step: StepFlags, Tail: jobs.TruncateUTF8(err.Error(), jobs.MaxErrorSummaryBytes)}}, ExitUsage
	}
	r.res = jobs.RunnerResult{Op: o.Op, Runtime: &jobs.RunnerRuntime{Command: o.Bin}}
	if o.Image != "" {
		r.res.Image = &jobs.RunnerImage{Ref: o.Image}
	}
	r.logf("runner %s: op %s", Version(), o.Op)
	r.run(ctx)

	code := ExitOK
	if r.res.Error != nil {
		code = ExitFailure
		r.logf("run failed (%s%s): %s", r.res.Error.Kind, stepSuffix(r.res.Error.Step), r.res.Error.Tail)
	}
	doc, err := EncodeResult(r.res)
	if err == nil {
		err = os.WriteFile(o.ResultFile, doc, 0o644)
	}
	if err != nil {
		r.logf("writing the result to %s: %v", o.ResultFile, err)
		return r.res, ExitFailure
	}
	r.logf("result: %s", doc)
	return r.res, code
}

// WriteUsageResult writes the result of a run whose flags were rejected, so the controller
// learns why the Job failed. It writes only into a result file that exists (the kubelet creates
// /dev/termination-log), so a mistyped flag on a workstation creates no file, and it ignores
// errors because the result path may itself be the bad flag.
func WriteUsageResult(op jobs.Op, path string, usage error) {
	doc, err := EncodeResult(jobs.RunnerResult{
		Op:    op,
		Error: &jobs.RunnerError{Kind: jobs.ErrorKindStep, Step: StepFlags, Tail: usage.Error()},
	})
	if err != nil || path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	_, _ = f.Write(doc)
	_ = f.Close()
}

func stepSuffix(step string) string {
	if step == "" {
		return ""
	}
	return ", step " + step
}

// logf writes one line of the runner's own to the log, scrubbed like the runtime's output.
func (r *runner) logf(format string, args ...any) {
	_, _ = io.WriteString(r.stderr, r.secrets.redact(fmt.Sprintf("runner: "+format+"\n", args...)))
}

func (r *runner) fail(kind jobs.ErrorKind, step, tail string) {
	r.res.Error = &jobs.RunnerError{Kind: kind, Step: step, Tail: jobs.TruncateUTF8(r.secrets.redact(tail), jobs.MaxErrorSummaryBytes)}
}

// learnSecrets collects what the run must never write, before any step runs: the values of the
// rendered root's sensitive variables, the identity's credentials and the environment variables
// the Job took from Secrets. The plan adds its sensitive values later (show).
func (r *runner) learnSecrets() error {
	r.secrets.add(configSecrets(r.o.Config)...)
	if r.o.Credentials != "" {
		credentials, err := credentialSecrets(r.o.Credentials)
		if err != nil {
			return err
		}
		r.secrets.add(credentials...)
	}
	if r.o.StateKeys != "" {
		keys, err := readStateKeys(r.o.StateKeys)
		if err != nil {
			return err
		}
		for _, passphrase := range keys {
			r.secrets.add(string(passphrase))
		}
	}
	r.secrets.add(envSecrets(r.o.Environ, r.o.SecretEnv)...)
	if n := len(r.secrets.list()); n > 0 {
		r.logf("redacting %d sensitive text(s) from the log and the result", n)
	}
	return nil
}

// run fills r.res.
func (r *runner) run(ctx context.Context) {
	r.o.Bin = append([]string(nil), r.o.Bin...)
	runtimePath, err := preflight(r.o.Module, r.o.Bin[0])
	if err != nil {
		r.fail(jobs.ErrorKindImageLayout, StepPreflight, err.Error())
		return
	}
	r.o.Bin[0] = runtimePath
	// The key is checked before any step, so a plan that cannot be fingerprinted never runs.
	switch {
	case r.o.needsPlanKey():
		if r.key, err = readPlanKey(r.o.PlanKeyFile); err != nil {
			r.fail(jobs.ErrorKindStep, StepPlanKey, err.Error())
			return
		}
	case r.o.plansBeforeApply() && r.o.PlanKeyFile != "":
		// A guarded apply reports its plan hash when the Job mounted a key, and none otherwise.
		r.key, _ = readPlanKey(r.o.PlanKeyFile)
	}
	if err := r.prepare(); err != nil {
		r.fail(jobs.ErrorKindStep, StepPrepare, err.Error())
		return
	}
	backendConfig, api, err := startStateAPI(r.o.BackendConfig, filepath.Dir(r.rootDir), r.o.Op == jobs.OpRestore)
	if err != nil {
		r.fail(jobs.ErrorKindStep, StepPrepare, err.Error())
		return
	}
	defer api.stop()
	r.o.BackendConfig = backendConfig
	r.runtimeVersion(ctx)

	if !r.init(ctx) {
		return
	}
	switch r.o.Op {
	case jobs.OpApply:
		if r.o.plansBeforeApply() {
			r.plannedApply(ctx)
		} else {
			r.directApply(ctx)
		}
	case jobs.OpPlan:
		r.plan(ctx)
	case jobs.OpDestroy:
		if out, ok := r.step(ctx, stepSpec{name: StepDestroy, args: r.mutating("destroy", "-auto-approve", "-var-file="+varsFile), withhold: true}); ok {
			r.res.Changes = parseChanges(out.stdout)
		}
	case jobs.OpRefresh:
		if out, ok := r.step(ctx, r.refreshSpec()); ok {
			r.res.Changes = parseChanges(out.stdout)
		}
	case jobs.OpDrift:
		r.drift(ctx)
	case jobs.OpRestore:
		r.restore(ctx)
	}
}

// prepare learns the secrets, sets up the work directory and the runtime's environment.
func (r *runner) prepare() error {
	if err := r.learnSecrets(); err != nil {
		return err
	}
	workdir, err := filepath.Abs(r.o.Workdir)
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	if err := os.MkdirAll(workdir, 0o700); err != nil {
		return fmt.Errorf("creating the work directory: %w", err)
	}
	r.rootDir = filepath.Join(workdir, rootDirName)
	if err := copyConfig(r.o.Config, r.rootDir); err != nil {
		return err
	}
	if r.lockPinned, err = CopyModuleLock(r.o.Module, r.rootDir); err != nil {
		return err
	}
	if r.lockPinned {
		r.logf("providers: pinned by the module's %s", lockFileName)
	}
	r.planFile = filepath.Join(workdir, planFileName)
	if err := os.Remove(r.planFile); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing an old plan file: %w", err)
	}
	extra := map[string]string{}
	cli := filepath.Join(workdir, cliConfigName)
	if r.o.CLIConfig != "" {
		// A private copy: the runtime reads one file for the whole run, whatever happens to the
		// mounted Secret meanwhile.
		if err := copyFile(r.o.CLIConfig, cli, 0o600); err != nil {
			return fmt.Errorf("copying the CLI configuration: %w", err)
		}
		extra["TF_CLI_CONFIG_FILE"] = cli
		r.logf("providers: installing as the run's CLI configuration %s says", r.o.CLIConfig)
	} else if info, err := os.Stat(r.o.Providers); err == nil && info.IsDir() {
		if err := writeCLIConfig(cli, r.o.Providers); err != nil {
			return err
		}
		extra["TF_CLI_CONFIG_FILE"] = cli
		r.logf("providers: installing from the mirror %s only", r.o.Providers)
	}
	var stateKeys statecrypt.Keyring
	if r.o.StateKeys != "" {
		// The passphrases stay in their files: TF_ENCRYPTION names them, so no provider or
		// provisioner inherits them in its environment.
		config, keys, err := r.o.stateEncryptionEnv()
		if err != nil {
			return fmt.Errorf("state encryption: %w", err)
		}
		extra["TF_ENCRYPTION"], stateKeys = config, keys
		r.logf("state: encrypted with key %s (%d key(s))", r.o.StateKey, len(keys))
	}
	env, dropped, tmpdir := runtimeEnv(r.o.Environ, workdir, extra)
	if len(dropped) > 0 {
		r.logf("environment: dropped %s", strings.Join(dropped, ", "))
	}
	if err := os.MkdirAll(tmpdir, 0o700); err != nil {
		return fmt.Errorf("creating TMPDIR: %w", err)
	}
	r.env = env
	if r.o.Op == jobs.OpRestore {
		n, err := assembleRestore(r.o.Config, r.o.RestoreChunks, filepath.Join(workdir, restoreStateName), stateKeys)
		if err != nil {
			return fmt.Errorf("assembling the backup: %w", err)
		}
		r.logf("restore: assembled %d chunk(s), %d resource instance(s)", r.o.RestoreChunks, n)
	}
	return nil
}

// runtimeVersion records the runtime's version; it is informational, so a failure only logs.
func (r *runner) runtimeVersion(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	out := r.execStep(ctx, stepSpec{name: "version", args: []string{"version", "-json"}, capture: true})
	var v struct {
		Version string `json:"terraform_version"`
	}
	if out.exit != 0 || json.Unmarshal(out.stdout, &v) != nil || v.Version == "" {
		r.logf("the runtime's version is unknown (exit %d)", out.exit)
		return
	}
	r.res.Runtime.Version = v.Version
	r.logf("runtime version %s", v.Version)
}

// step runs a step, records it and, when it fails or is stopped, sets the error. ok reports
// whether the run may go on.
func (r *runner) step(ctx context.Context, spec stepSpec) (stepOutcome, bool) {
	if ctx.Err() != nil {
		r.fail(jobs.ErrorKindInterrupted, spec.name, "stopped by a signal before step "+spec.name)
		return stepOutcome{}, false
	}
	out := r.execStep(ctx, spec)
	r.res.Steps = append(r.res.Steps, jobs.RunnerStep{Name: spec.name, Exit: out.exit, Seconds: out.seconds})
	switch {
	case out.stopped && !spec.succeeded(out.exit):
		r.fail(jobs.ErrorKindInterrupted, spec.name, fmt.Sprintf("stopped by a signal during step %s (exit %d)", spec.name, out.exit))
		return out, false
	case out.startErr != nil:
		r.fail(jobs.ErrorKindStep, spec.name, fmt.Sprintf("step %s: %v", spec.name, out.startErr))
		return out, false
	case !spec.succeeded(out.exit):
		var validateJSON []byte
		if spec.name == StepValidate {
			validateJSON = out.stdout
		}
		r.res.Error = &jobs.RunnerError{
			Kind: jobs.ErrorKindStep,
			Step: spec.name,
			Tail: errorTail(spec.name, out.exit, validateJSON, out.stderr, r.secrets.list()),
		}
		return out, false
	}
	return out, true
}

// lockTimeout is the -lock-timeout flag in whole seconds.
func (r *runner) lockTimeout() string {
	return "-lock-timeout=" + strconv.FormatInt(int64(r.o.LockTimeout/time.Second), 10) + "s"
}

// mutating returns the arguments of a command that takes the state lock: init, plan, apply,
// destroy.
func (r *runner) mutating(command string, args ...string) []string {
	return append([]string{command, "-input=false", "-no-color", r.lockTimeout()}, args...)
}

func (r *runner) refreshSpec() stepSpec {
	return stepSpec{name: StepRefresh, args: r.mutating("apply", "-refresh-only", "-auto-approve", "-var-file="+varsFile), withhold: true}
}

// init runs init with the backend configuration and, when asked, releases a stale lock.
func (r *runner) init(ctx context.Context) bool {
	args := r.mutating("init")
	for _, bc := range r.o.BackendConfig {
		args = append(args, "-backend-config="+bc)
	}
	if r.lockPinned {
		// The image's lock file pins every provider's version and hashes: a provider the mirror
		// serves with another hash, or one the lock file lacks, fails init.
		args = append(args, "-lockfile=readonly")
	}
	if _, ok := r.step(ctx, stepSpec{name: StepInit, args: args}); !ok {
		return false
	}
	if r.o.ForceUnlock == "" {
		return true
	}
	out, ok := r.step(ctx, stepSpec{name: StepForceUnlock, args: []string{"force-unlock", "-force", r.o.ForceUnlock}})
	if ok {
		return true
	}
	if r.res.Error.Kind == jobs.ErrorKindStep && lockAlreadyGone(out.stderr) {
		// Someone else released it, or the lease is gone: the lock is not ours to worry about.
		r.logf("force-unlock: the lock %s is no longer held; going on", r.o.ForceUnlock)
		r.res.Error = nil
		return true
	}
	return false
}

// lockAlreadyGone reports whether force-unlock failed only because the lock is not (or no
// longer) the one we were told to release.
func lockAlreadyGone(stderr string) bool {
	s := strings.ToLower(stderr)
	for _, phrase := range []string{"already unlocked", "does not match", "not found"} {
		if strings.Contains(s, phrase) {
			return true
		}
	}
	return false
}

func (r *runner) validate(ctx context.Context) bool {
	_, ok := r.step(ctx, stepSpec{name: StepValidate, args: []string{"validate", "-json", "-no-color"}})
	return ok
}

// directApply applies without a saved plan: machines, pools and unguarded applies.
func (r *runner) directApply(ctx context.Context) {
	if !r.validate(ctx) {
		return
	}
	if out, ok := r.step(ctx, stepSpec{name: StepApply, args: r.mutating("apply", "-auto-approve", "-var-file="+varsFile), withhold: true}); ok {
		r.res.Changes = parseChanges(out.stdout)
	}
}

// planToFile runs plan -detailed-exitcode -out and, when it has changes, show -json. It returns
// the parsed plan (nil for no changes) and whether the run may go on.
func (r *runner) planToFile(ctx context.Context, extra ...string) (*planView, bool) {
	args := r.mutating("plan", append([]string{"-detailed-exitcode", "-out=" + r.planFile}, extra...)...)
	out, ok := r.step(ctx, stepSpec{name: StepPlan, args: append(args, "-var-file="+varsFile), okExits: []int{2}, withhold: true})
	if !ok {
		return nil, false
	}
	if out.exit == 0 {
		return nil, true
	}
	return r.show(ctx)
}

// planView is a parsed plan and what the result reports about it.
type planView struct {
	summary plan.Summary
	// hash is the p3: hash; empty without a key.
	hash string
}

// show reads the saved plan with show -json, held in memory and never logged.
func (r *runner) show(ctx context.Context) (*planView, bool) {
	out, ok := r.step(ctx, stepSpec{name: StepShow, args: []string{"show", "-json", "-no-color", r.planFile}, capture: true})
	if !ok {
		return nil, false
	}
	p, err := plan.Parse(out.stdout)
	if err != nil {
		r.fail(jobs.ErrorKindStep, StepShow, err.Error())
		return nil, false
	}
	r.secrets.add(plan.SensitiveStrings(p, minRedactLen)...)
	v := &planView{summary: plan.Summarize(p)}
	if r.key != nil {
		if v.hash, err = plan.Hash(p, r.key); err != nil {
			r.fail(jobs.ErrorKindStep, StepShow, err.Error())
			return nil, false
		}
	}
	return v, true
}

// resultPlan is the plan as the result carries it; v nil is a plan without changes.
func (r *runner) resultPlan(v *planView) *jobs.RunnerPlan {
	if v == nil {
		p := &jobs.RunnerPlan{}
		if r.key != nil {
			p.Hash = jobs.EmptyPlanHash
		}
		return p
	}
	return &jobs.RunnerPlan{
		Hash:        v.hash,
		Counts:      v.summary.Counts,
		Resources:   v.summary.Resources,
		Destructive: v.summary.IsDestructive(),
	}
}

// plannedApply is the guarded or approved apply: plan to a file, check it, apply that file.
func (r *runner) plannedApply(ctx context.Context) {
	if !r.validate(ctx) {
		return
	}
	v, ok := r.planToFile(ctx)
	if !ok {
		return
	}
	r.res.Plan = r.resultPlan(v)
	if r.o.ExpectPlan != "" && r.res.Plan.Hash != r.o.ExpectPlan {
		r.fail(jobs.ErrorKindPlanChanged, "", fmt.Sprintf("the plan changed: approved %s, planned %s; nothing was applied", r.o.ExpectPlan, r.res.Plan.Hash))
		return
	}
	if v == nil {
		r.logf("the plan has no changes; nothing to apply")
		r.res.Changes = &jobs.Changes{}
		return
	}
	// An approved plan hash covers the deletes it lists, so the guard only judges applies
	// that were not approved plan by plan.
	if r.o.GuardDeletes && r.o.ExpectPlan == "" && v.summary.IsDestructive() && r.o.AllowDeletesHash != r.o.InputsHash {
		names := make([]string, len(v.summary.Destructive))
		for i, c := range v.summary.Destructive {
			names[i] = c.Address + " (" + plan.DestructiveKind(c.Actions) + ")"
		}
		r.fail(jobs.ErrorKindBlocked, "", "destructive plan blocked: "+strings.Join(names, ", "))
		return
	}
	if out, ok := r.step(ctx, stepSpec{name: StepApply, args: r.mutating("apply", "-auto-approve", r.planFile), withhold: true}); ok {
		r.res.Changes = parseChanges(out.stdout)
	}
}

// plan is the plan op of applyPolicy Manual.
func (r *runner) plan(ctx context.Context) {
	if !r.validate(ctx) {
		return
	}
	args := r.mutating("plan", "-out="+r.planFile, "-var-file="+varsFile)
	if _, ok := r.step(ctx, stepSpec{name: StepPlan, args: args, withhold: true}); !ok {
		return
	}
	v, ok := r.show(ctx)
	if !ok {
		return
	}
	r.res.Plan = r.resultPlan(v)
}

// drift refreshes the state, then plans without refreshing again; any change is drift.
func (r *runner) drift(ctx context.Context) {
	if _, ok := r.step(ctx, r.refreshSpec()); !ok {
		return
	}
	v, ok := r.planToFile(ctx, "-refresh=false")
	if !ok {
		return
	}
	d := &jobs.RunnerDrift{}
	if v != nil {
		d.Detected = true
		d.Counts = v.summary.Counts
		d.Resources = v.summary.Resources
	}
	r.res.Drift = d
}

// restore pushes the assembled backup and checks that the state lists what the backup held.
func (r *runner) restore(ctx context.Context) {
	state := filepath.Join(filepath.Dir(r.rootDir), restoreStateName)
	if _, ok := r.step(ctx, stepSpec{name: StepStatePush, args: []string{"state", "push", "-force", r.lockTimeout(), state}}); !ok {
		return
	}
	out, ok := r.step(ctx, stepSpec{name: StepStateList, args: []string{"state", "list"}})
	if !ok {
		return
	}
	if strings.TrimSpace(string(out.stdout)) == "" && r.o.RestoreResources > 0 {
		r.fail(jobs.ErrorKindStep, StepStateList, fmt.Sprintf("the restored state lists no resources, but the backup held %d", r.o.RestoreResources))
	}
}
