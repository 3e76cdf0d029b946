package jobs

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestKindShort(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		want string
	}{
		{"kindshort is c for a TerraformCluster", KindCluster, "c"},
		{"kindshort is m for a TerraformMachine", KindMachine, "m"},
		{"kindshort is mp for a TerraformMachinePool", KindMachinePool, "mp"},
		{"any other kind has no kindshort", Kind("TerraformClusterTemplate"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.kind.Short(); got != tt.want {
				t.Errorf("Short() = %q, want %q", got, tt.want)
			}
			if got := tt.kind.Valid(); got != (tt.want != "") {
				t.Errorf("Valid() = %v", got)
			}
		})
	}
}

func TestOpValid(t *testing.T) {
	for _, op := range Ops() {
		if !op.Valid() {
			t.Errorf("op %q is one of apply, plan, destroy, refresh, drift, restore but not valid", op)
		}
	}
	if len(Ops()) != 6 {
		t.Errorf("there are six ops, got %d", len(Ops()))
	}
	for _, op := range []Op{"", "Apply", "import"} {
		if op.Valid() {
			t.Errorf("op %q is valid", op)
		}
	}
}

func TestJobName(t *testing.T) {
	name33 := strings.Repeat("a", 33)
	name34 := strings.Repeat("a", 34)
	tests := []struct {
		name    string
		in      NameInputs
		want    string
		wantErr string
	}{
		{
			name: "the name is captf-<kindshort>-<name>-<op>-a<attempt>-<hash6>",
			in:   NameInputs{Kind: KindCluster, Name: "web", Op: OpApply, Attempt: 1, InputsHash: "h1:abc"},
			want: "captf-c-web-apply-a1-dbb569",
		},
		{
			name: "hash6 covers the attempt, so each attempt has its own hash",
			in:   NameInputs{Kind: KindCluster, Name: "web", Op: OpApply, Attempt: 2, InputsHash: "h1:abc"},
			want: "captf-c-web-apply-a2-3489af",
		},
		{
			name: "hash6 covers inputs hash, op, decimal attempt and tick, NUL-separated",
			in:   NameInputs{Kind: KindMachine, Name: "m0", Op: OpRefresh, Attempt: 12, InputsHash: "h1:abc", Tick: "2026-10-01T12:00:00Z"},
			want: "captf-m-m0-refresh-a12-795490",
		},
		{
			name: "a whole name of exactly 57 characters keeps the object's name",
			in:   NameInputs{Kind: KindCluster, Name: name33, Op: OpApply, Attempt: 1, InputsHash: "h"},
			want: "captf-c-" + name33 + "-apply-a1-94fcbf",
		},
		{
			name: "a whole name of 58 characters replaces the object's name by the first 16 hex of its SHA-256",
			in:   NameInputs{Kind: KindCluster, Name: name34, Op: OpApply, Attempt: 1, InputsHash: "h"},
			want: "captf-c-a27c896c48592048-apply-a1-94fcbf",
		},
		{
			name: "kindshort mp names a TerraformMachinePool's Jobs",
			in:   NameInputs{Kind: KindMachinePool, Name: "pool", Op: OpDestroy, Attempt: 3},
			want: "captf-mp-pool-destroy-a3-",
		},
		{
			name:    "an unknown kind has no name",
			in:      NameInputs{Kind: "Deployment", Name: "web", Op: OpApply, Attempt: 1},
			wantErr: "unknown kind",
		},
		{
			name:    "an empty object name has no name",
			in:      NameInputs{Kind: KindCluster, Op: OpApply, Attempt: 1},
			wantErr: "empty object name",
		},
		{
			name:    "an unknown op has no name",
			in:      NameInputs{Kind: KindCluster, Name: "web", Op: "import", Attempt: 1},
			wantErr: "unknown op",
		},
		{
			name:    "attempts start at 1",
			in:      NameInputs{Kind: KindCluster, Name: "web", Op: OpApply, Attempt: 0},
			wantErr: "below 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := JobName(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("JobName() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("JobName() error = %v", err)
			}
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("JobName() = %q, want %q", got, tt.want)
			}
			if len(got) > MaxJobNameLength {
				t.Errorf("JobName() = %q has %d characters, more than %d", got, len(got), MaxJobNameLength)
			}
			if !OwnsPod(tt.in.Kind, tt.in.Name, got+"-x7k2p") {
				t.Errorf("OwnsPod does not recognize the pod of %q", got)
			}
		})
	}
}

func TestJobNameIsAFunctionOfItsInputs(t *testing.T) {
	base := NameInputs{Kind: KindCluster, Name: "web", Op: OpRefresh, Attempt: 4, InputsHash: "h1:abc", Tick: "t"}
	first, _ := JobName(base)
	again, _ := JobName(base)
	if first != again {
		t.Fatalf("the same inputs gave %q and %q; a repeated create must find the Job it made", first, again)
	}
	variants := map[string]NameInputs{
		"another inputs hash": {Kind: KindCluster, Name: "web", Op: OpRefresh, Attempt: 4, InputsHash: "h1:abd", Tick: "t"},
		"another tick":        {Kind: KindCluster, Name: "web", Op: OpRefresh, Attempt: 4, InputsHash: "h1:abc", Tick: "u"},
		"another attempt":     {Kind: KindCluster, Name: "web", Op: OpRefresh, Attempt: 5, InputsHash: "h1:abc", Tick: "t"},
		"another op":          {Kind: KindCluster, Name: "web", Op: OpDrift, Attempt: 4, InputsHash: "h1:abc", Tick: "t"},
		// Without the separator these two would hash the same bytes.
		"a character moved from the inputs hash to the tick": {Kind: KindCluster, Name: "web", Op: OpRefresh, Attempt: 4, InputsHash: "h1:ab", Tick: "ct"},
	}
	for what, in := range variants {
		got, _ := JobName(in)
		if got == first {
			t.Errorf("%s gave the same name %q", what, got)
		}
	}
}

func TestHashAndTick(t *testing.T) {
	drift := time.Date(2026, 10, 1, 9, 30, 15, 999, time.FixedZone("CEST", 2*3600))
	refresh := time.Date(2026, 10, 1, 8, 0, 0, 0, time.UTC)
	src := NameSources{
		CurrentInputsHash: "current",
		StateInputsHash:   "state",
		BackupInputsHash:  "backup",
		BackupName:        "captf-state-backup-x-7",
		LastDriftCheck:    drift,
		LastRefresh:       refresh,
	}
	remediation := src
	remediation.DriftRemediation = true
	never := NameSources{StateInputsHash: "state"}
	tests := []struct {
		name     string
		op       Op
		src      NameSources
		wantHash string
		wantTick string
	}{
		{"apply runs the current inputs with no tick", OpApply, src, "current", ""},
		{"plan runs the current inputs with no tick", OpPlan, src, "current", ""},
		{"a drift-remediation apply ticks remediate/<last drift check>", OpApply, remediation, "current", "remediate/2026-10-01T07:30:15Z"},
		{"refresh runs the state's hash and ticks the last successful refresh", OpRefresh, src, "state", "2026-10-01T08:00:00Z"},
		{"drift runs the state's hash and ticks the last successful drift check", OpDrift, src, "state", "2026-10-01T07:30:15Z"},
		{"restore runs the backup's hash and ticks restore/<backup name>", OpRestore, src, "backup", "restore/captf-state-backup-x-7"},
		{"destroy runs the state's hash with no tick", OpDestroy, src, "state", ""},
		{"a refresh that never succeeded has an empty tick", OpRefresh, never, "state", ""},
		{"an unknown op has neither", Op("import"), src, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hash, tick := HashAndTick(tt.op, tt.src)
			if hash != tt.wantHash || tick != tt.wantTick {
				t.Errorf("HashAndTick() = %q, %q, want %q, %q", hash, tick, tt.wantHash, tt.wantTick)
			}
		})
	}
}

func TestTimeTick(t *testing.T) {
	tests := []struct {
		name string
		in   time.Time
		want string
	}{
		{"never is empty", time.Time{}, ""},
		{"a tick is RFC 3339 in UTC", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", -3600)), "2026-01-02T04:04:05Z"},
		{"a tick keeps whole seconds, as status does", time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.UTC), "2026-01-02T03:04:05Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TimeTick(tt.in); got != tt.want {
				t.Errorf("TimeTick() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOwnsPod(t *testing.T) {
	long := strings.Repeat("w", 40) // passes 57 with every op
	// 57 characters at attempt 9 but 58 at attempt 10: the name part changes with the attempt.
	edge := strings.Repeat("e", 34) // captf-c-<edge>-plan-a9-xxxxxx has 57 characters
	mustName := func(kind Kind, name string, op Op, attempt int32) string {
		n, err := JobName(NameInputs{Kind: kind, Name: name, Op: op, Attempt: attempt, InputsHash: "h"})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tests := []struct {
		name string
		kind Kind
		obj  string
		pod  string
		want bool
	}{
		{"the pod of the object's Job is the object's", KindCluster, "web", mustName(KindCluster, "web", OpApply, 1) + "-abcde", true},
		{"every op's pods are the object's", KindMachine, "m-0", mustName(KindMachine, "m-0", OpRestore, 7) + "-9zz9z", true},
		{"a pod of a Job with a hashed name is the object's", KindMachinePool, long, mustName(KindMachinePool, long, OpRefresh, 40) + "-qwert", true},
		{"a name of 57 characters at attempt 9 is kept", KindCluster, edge, mustName(KindCluster, edge, OpPlan, 9) + "-abcde", true},
		{"the same name at attempt 10 is hashed", KindCluster, edge, mustName(KindCluster, edge, OpPlan, 10) + "-abcde", true},
		{"an unhashed long name is not what the object produces", KindMachinePool, long, "captf-mp-" + long + "-refresh-a40-abcdef-qwert", false},
		{"a hashed short name is not what the object produces", KindCluster, "web", "captf-c-" + hash16("web") + "-apply-a1-abcdef-abcde", false},
		{"another object's pod is not the object's", KindCluster, "web", mustName(KindCluster, "web2", OpApply, 1) + "-abcde", false},
		{"an object whose name is a prefix of another's does not own its pods", KindCluster, "web", mustName(KindCluster, "web-apply-a1", OpApply, 1) + "-abcde", false},
		{"another kind's pod is not the object's", KindMachine, "web", mustName(KindCluster, "web", OpApply, 1) + "-abcde", false},
		{"a pod suffix has five characters", KindCluster, "web", mustName(KindCluster, "web", OpApply, 1) + "-abcd", false},
		{"a pod suffix is lowercase alphanumeric", KindCluster, "web", mustName(KindCluster, "web", OpApply, 1) + "-ABCDE", false},
		{"the Job name itself is not a pod", KindCluster, "web", mustName(KindCluster, "web", OpApply, 1), false},
		{"hash6 is six hex characters", KindCluster, "web", "captf-c-web-apply-a1-abcdeg-abcde", false},
		{"hash6 is preceded by a dash", KindCluster, "web", "captf-c-web-apply-a1xabcdef-abcde", false},
		{"an attempt has no leading zero", KindCluster, "web", "captf-c-web-apply-a01-abcdef-abcde", false},
		{"attempts start at 1", KindCluster, "web", "captf-c-web-apply-a0-abcdef-abcde", false},
		{"an attempt is decimal digits", KindCluster, "web", "captf-c-web-apply-a-abcdef-abcde", false},
		{"an attempt fits 32 bits", KindCluster, "web", "captf-c-web-apply-a99999999999-abcdef-abcde", false},
		{"an attempt follows -a", KindCluster, "web", "captf-c-web-apply-1-abcdef-abcde", false},
		{"an op is one of the six", KindCluster, "web", "captf-c-web-import-a1-abcdef-abcde", false},
		{"a Job name starts with captf-", KindCluster, "web", "capt-c-web-apply-a1-abcdef-abcde", false},
		{"an empty pod name is nobody's", KindCluster, "web", "", false},
		{"an unknown kind owns nothing", Kind("X"), "web", "captf--web-apply-a1-abcdef-abcde", false},
		{"an empty object name owns nothing", KindCluster, "", "captf-c--apply-a1-abcdef-abcde", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OwnsPod(tt.kind, tt.obj, tt.pod); got != tt.want {
				t.Errorf("OwnsPod(%s, %q, %q) = %v, want %v", tt.kind, tt.obj, tt.pod, got, tt.want)
			}
		})
	}
	if n := mustName(KindCluster, edge, OpPlan, 9); len(n) != 57 || !strings.Contains(n, edge) {
		t.Errorf("edge case misbuilt: %q (%d)", n, len(n))
	}
	if n := mustName(KindCluster, edge, OpPlan, 10); strings.Contains(n, edge) {
		t.Errorf("edge case misbuilt: %q (%d)", n, len(n))
	}
}

func TestSecretAndLeaseNames(t *testing.T) {
	long := strings.Repeat("n", 250)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"the durable inputs Secret is captf-inputs-<kindshort>-<name>", InputsSecretName(KindCluster, "web"), "captf-inputs-c-web"},
		{"the per-run Secret is captf-run-<job>", RunSecretName("captf-c-web-apply-a1-dbb569"), "captf-run-captf-c-web-apply-a1-dbb569"},
		{"the plan key Secret is captf-plankey-<kindshort>-<name>", PlanKeySecretName(KindMachinePool, "pool"), "captf-plankey-mp-pool"},
		{"the state suffix is 16 hex of SHA-256(<ns>/<kind>/<name>), - and the kindshort", StateSecretSuffix("ns", KindCluster, "web"), "a20ede73daff5e63-c"},
		{"the run lease is captf-run-<state suffix>", RunLeaseName("a20ede73daff5e63-c"), "captf-run-a20ede73daff5e63-c"},
		{"the runner identity is captf-runner-<state suffix>", RunnerIdentityName("a20ede73daff5e63-c"), "captf-runner-a20ede73daff5e63-c"},
		{"a durable inputs Secret name past 253 is a prefix and 16 hex of a hash", InputsSecretName(KindMachine, long),
			("captf-inputs-m-" + long)[:253-17] + "-" + hash16("captf-inputs-m-"+long)},
		{"a plan key Secret name past 253 is shortened too", PlanKeySecretName(KindMachine, long),
			("captf-plankey-m-" + long)[:253-17] + "-" + hash16("captf-plankey-m-"+long)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
			if len(tt.got) > MaxSecretNameLength {
				t.Errorf("%q is longer than %d", tt.got, MaxSecretNameLength)
			}
			if errs := validation.IsDNS1123Subdomain(tt.got); len(errs) > 0 {
				t.Errorf("%q is not a valid name: %v", tt.got, errs)
			}
		})
	}
	if got := RunLeaseName(StateSecretSuffix("ns", KindMachinePool, "p")); len(got) != 29 {
		t.Errorf("a pool's run lease name has 29 characters, got %q", got)
	}
}

func TestShortenName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"a name that fits is kept", "abc", 3, "abc"},
		{"a longer name is a prefix, - and 16 hex", "abcdefghijklmnopqrstuvwxyz", 20, "abc-" + hash16("abcdefghijklmnopqrstuvwxyz")},
		{"a kept prefix loses trailing dashes and dots so the name stays valid", "ab.-defghijklmnopqrstuvwxyz", 21, "ab-" + hash16("ab.-defghijklmnopqrstuvwxyz")},
		{"a prefix of only dashes leaves the hash alone", "---defghijklmnopqrstuvwxyz", 20, hash16("---defghijklmnopqrstuvwxyz")},
		{"a limit with no room for a prefix leaves the hash", "abcdefghijklmnopqrstuvwxyz", 17, hash16("abcdefghijklmnopqrstuvwxyz")},
		{"a limit below 16 cuts the hash", "abcdefghijklmnopqrstuvwxyz", 8, hash16("abcdefghijklmnopqrstuvwxyz")[:8]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ShortenName(tt.in, tt.max)
			if got != tt.want {
				t.Errorf("ShortenName() = %q, want %q", got, tt.want)
			}
			if len(got) > tt.max {
				t.Errorf("ShortenName() = %q is longer than %d", got, tt.max)
			}
		})
	}
}

func TestEmptyPlanHash(t *testing.T) {
	// p3: and the hex SHA-256 of the empty string.
	if got := "p3:" + sha256Hex(""); got != EmptyPlanHash {
		t.Errorf("EmptyPlanHash = %q, want %q", EmptyPlanHash, got)
	}
}
