package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
)

// Kind is the kind of an object that runs Jobs.
type Kind string

// The three kinds that run Jobs.
const (
	KindCluster     Kind = "TerraformCluster"
	KindMachine     Kind = "TerraformMachine"
	KindMachinePool Kind = "TerraformMachinePool"
)

// Short returns the kind's short form used in names (c, m, mp, from infrav1.Kinds), or "" for
// any other kind.
func (k Kind) Short() string {
	info, _ := infrav1.KindInfoOf(string(k))
	return info.Short
}

// Valid reports whether k is one of the three kinds that run Jobs.
func (k Kind) Valid() bool { return k.Short() != "" }

// Op is an operation a Job runs.
type Op string

// The six operations.
const (
	OpApply   Op = "apply"
	OpPlan    Op = "plan"
	OpDestroy Op = "destroy"
	OpRefresh Op = "refresh"
	OpDrift   Op = "drift"
	OpRestore Op = "restore"
)

// Ops returns every Op in a fixed order, the order Prune reports in.
func Ops() []Op {
	return []Op{OpApply, OpPlan, OpDestroy, OpRefresh, OpDrift, OpRestore}
}

// Valid reports whether o is one of the six operations.
func (o Op) Valid() bool {
	switch o {
	case OpApply, OpPlan, OpDestroy, OpRefresh, OpDrift, OpRestore:
		return true
	}
	return false
}

// MaxJobNameLength caps a Job name so that its pod name, <job>-<5 characters>, fits the 63
// characters of a hostname: the pod name is then the hostname Terraform records as the lock
// holder, and stale-lock detection can find the pod by it.
const MaxJobNameLength = 57

// MaxSecretNameLength is the Kubernetes limit on a Secret's name.
const MaxSecretNameLength = 253

// podSuffixLength is the length of the random suffix the Job controller gives a pod.
const podSuffixLength = 5

// hash6Length is the length of the hash at the end of a Job name.
const hash6Length = 6

// PlanHashPrefix is the version of the plan hash the runner reports and the controller
// approves (p3:). A plan hash of any other version is planned again, never applied.
const PlanHashPrefix = "p3:"

// EmptyPlanHash is the plan hash of a plan without changes: p3: and the hex SHA-256 of the empty
// string. An apply of it needs no approval.
const EmptyPlanHash = PlanHashPrefix + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// NameInputs are what a Job name is a function of.
type NameInputs struct {
	// Kind is the kind of the owning object.
	Kind Kind
	// Name is the owning object's name.
	Name string
	// Op is the operation the Job runs.
	Op Op
	// Attempt is the Job's attempt number, at least 1; see NextAttempt.
	Attempt int32
	// InputsHash and Tick are chosen per op; see HashAndTick.
	InputsHash string
	// Tick separates repeated runs of the same op and inputs; see HashAndTick.
	Tick string
}

// JobName returns captf-<kindshort>-<name>-<op>-a<attempt>-<hash6>. The name part becomes the
// first 16 hex characters of the name's SHA-256 when the whole would pass MaxJobNameLength;
// hash6 is the first 6 hex characters of SHA-256 over the inputs hash, op, attempt (decimal) and
// tick, separated by NUL bytes. The same inputs always give the same name, which is what lets a
// repeated create find the Job it already made.
func JobName(in NameInputs) (string, error) {
	switch {
	case !in.Kind.Valid():
		return "", fmt.Errorf("job name: unknown kind %q", in.Kind)
	case in.Name == "":
		return "", errors.New("job name: empty object name")
	case !in.Op.Valid():
		return "", fmt.Errorf("job name: unknown op %q", in.Op)
	case in.Attempt < 1:
		return "", fmt.Errorf("job name: attempt %d is below 1", in.Attempt)
	}
	attempt := strconv.FormatInt(int64(in.Attempt), 10)
	sum := sha256.Sum256([]byte(in.InputsHash + "\x00" + string(in.Op) + "\x00" + attempt + "\x00" + in.Tick))
	return assembleJobName(in.Kind.Short(), in.Name, in.Op, attempt, hex.EncodeToString(sum[:])[:hash6Length]), nil
}

// assembleJobName applies the length rule. OwnsPod calls it too, so the rule exists once.
func assembleJobName(short, name string, op Op, attempt, hash6 string) string {
	tail := "-" + string(op) + "-a" + attempt + "-" + hash6
	head := "captf-" + short + "-"
	if len(head)+len(name)+len(tail) > MaxJobNameLength {
		name = hash16(name)
	}
	return head + name + tail
}

// OwnsPod reports whether podName is the pod of a Job that the object kind/name would have
// created: <job>-<5 characters>, where <job> re-derives, for the op and attempt it names, to the
// same prefix this object produces. The trailing hash6 cannot be re-derived without the run's
// inputs, so any six hex characters are accepted. Stale-lock detection uses this to attribute a
// lock holder's hostname to the object.
func OwnsPod(kind Kind, name, podName string) bool {
	if !kind.Valid() || name == "" {
		return false
	}
	job, ok := cutSuffix(podName, podSuffixLength, isLowerAlnum)
	if !ok {
		return false
	}
	rest, ok := cutSuffix(job, hash6Length, isLowerHex)
	if !ok {
		return false
	}
	hash6 := job[len(rest)+1:]
	i := len(rest)
	for i > 0 && rest[i-1] >= '0' && rest[i-1] <= '9' {
		i--
	}
	digits := rest[i:]
	attempt, err := strconv.ParseInt(digits, 10, 32)
	if err != nil || attempt < 1 || strconv.FormatInt(attempt, 10) != digits {
		return false
	}
	beforeAttempt, ok := strings.CutSuffix(rest[:i], "-a")
	if !ok {
		return false
	}
	for _, op := range Ops() {
		if strings.HasSuffix(beforeAttempt, "-"+string(op)) &&
			assembleJobName(kind.Short(), name, op, digits, hash6) == job {
			return true
		}
	}
	return false
}

// cutSuffix splits s at a "-" followed by exactly n characters that all satisfy ok, returning
// what comes before the "-".
func cutSuffix(s string, n int, ok func(byte) bool) (string, bool) {
	if len(s) < n+2 || s[len(s)-n-1] != '-' {
		return "", false
	}
	for i := len(s) - n; i < len(s); i++ {
		if !ok(s[i]) {
			return "", false
		}
	}
	return s[:len(s)-n-1], true
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func isLowerHex(c byte) bool { return c >= 'a' && c <= 'f' || c >= '0' && c <= '9' }

// NameSources are the facts from which HashAndTick picks an op's inputs hash and tick.
type NameSources struct {
	// CurrentInputsHash is the hash of the inputs rendered in this pass (apply, plan).
	CurrentInputsHash string
	// StateInputsHash is the inputs hash recorded in state (refresh, drift, destroy).
	StateInputsHash string
	// BackupInputsHash is the inputs hash of the backup a restore pushes.
	BackupInputsHash string
	// BackupName names the backup a restore pushes.
	BackupName string
	// DriftRemediation is set when an apply remediates drift.
	DriftRemediation bool
	// LastDriftCheck is when the last successful drift check finished; zero when none did.
	LastDriftCheck time.Time
	// LastRefresh is when the last successful refresh finished; zero when none did.
	LastRefresh time.Time
}

// HashAndTick returns the inputs hash and tick that go into op's Job name, so that a repeated
// op gets a new name only when it should:
//   - apply, plan: the current inputs, no tick;
//   - a drift-remediation apply: the current inputs, tick remediate/<last drift check>, so that
//     it cannot collide with the retained apply of the same inputs;
//   - refresh: the state's inputs hash, tick = the last successful refresh;
//   - drift: the state's inputs hash, tick = the last successful drift check;
//   - restore: the backup's inputs hash, tick restore/<backup name>;
//   - destroy: the state's inputs hash, no tick.
//
// Times are written by TimeTick. An unknown op gets neither.
func HashAndTick(op Op, src NameSources) (inputsHash, tick string) {
	switch op {
	case OpApply:
		if src.DriftRemediation {
			return src.CurrentInputsHash, "remediate/" + TimeTick(src.LastDriftCheck)
		}
		return src.CurrentInputsHash, ""
	case OpPlan:
		return src.CurrentInputsHash, ""
	case OpRefresh:
		return src.StateInputsHash, TimeTick(src.LastRefresh)
	case OpDrift:
		return src.StateInputsHash, TimeTick(src.LastDriftCheck)
	case OpRestore:
		return src.BackupInputsHash, "restore/" + src.BackupName
	case OpDestroy:
		return src.StateInputsHash, ""
	}
	return "", ""
}

// TimeTick writes a time for a tick: RFC 3339 in UTC at whole seconds, the precision a status
// timestamp keeps, so that a time read back from status gives the same name as the time it was
// written from. The zero time, "never", is "".
func TimeTick(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// ShortenName returns name when it fits limit characters, and otherwise its first characters, a
// "-" and the first 16 hex characters of its SHA-256, limit characters in all. Trailing "-" and
// "." are trimmed from the kept part so that a valid DNS subdomain stays valid. A limit below 18
// leaves room for the hash alone.
func ShortenName(name string, limit int) string {
	if len(name) <= limit {
		return name
	}
	h := hash16(name)
	keep := limit - len(h) - 1
	if keep <= 0 {
		return h[:min(len(h), limit)]
	}
	prefix := strings.TrimRight(name[:keep], "-.")
	if prefix == "" {
		return h
	}
	return prefix + "-" + h
}

// InputsSecretName returns captf-inputs-<kindshort>-<name>, the object's durable inputs Secret,
// shortened by ShortenName when it would pass MaxSecretNameLength.
func InputsSecretName(kind Kind, name string) string {
	return ShortenName("captf-inputs-"+kind.Short()+"-"+name, MaxSecretNameLength)
}

// RunSecretName returns captf-run-<job>, the per-run inputs Secret handed to one Job.
func RunSecretName(jobName string) string {
	return "captf-run-" + jobName
}

// PlanKeySecretName returns captf-plankey-<kindshort>-<name>, the Secret holding the object's
// plan-hash key, shortened like InputsSecretName.
func PlanKeySecretName(kind Kind, name string) string {
	return ShortenName("captf-plankey-"+kind.Short()+"-"+name, MaxSecretNameLength)
}

// StateSecretSuffix returns the object's state Secret suffix: the first 16 hex characters of the
// SHA-256 of <namespace>/<kind>/<name>, "-" and the kindshort. It never ends in -<digits>, and it
// does not use the UID, so it survives clusterctl move.
func StateSecretSuffix(namespace string, kind Kind, name string) string {
	return hash16(namespace+"/"+string(kind)+"/"+name) + "-" + kind.Short()
}

// RunLeaseName returns captf-run-<state suffix>, the Lease that admits one run of the object
// at a time.
func RunLeaseName(stateSecretSuffix string) string {
	return "captf-run-" + stateSecretSuffix
}

// StatePartsRoleName returns captf-runner-<state suffix>-parts, the Role and RoleBinding that
// let the object's runner identity use its state parts once its state needs them.
func StatePartsRoleName(stateSecretSuffix string) string {
	return RunnerIdentityName(stateSecretSuffix) + "-parts"
}

// RunnerIdentityName returns captf-runner-<state suffix>, the name of the ServiceAccount, Role
// and RoleBinding a run of the object uses by default. One identity per object lets RBAC name the
// only state Secret and lock Lease it may touch.
func RunnerIdentityName(stateSecretSuffix string) string {
	return "captf-runner-" + stateSecretSuffix
}

// hash16 returns the first 16 hex characters of the SHA-256 of s.
func hash16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
