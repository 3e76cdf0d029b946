package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// shared is the control plane of the running test binary, set by Main.
var shared *Env

// skipReason is why tests of this binary skip, when the binaries are missing outside CI.
var skipReason string

// InCI reports whether the tests run in CI, where a missing binary is a failure, not a skip.
func InCI() bool {
	return os.Getenv("CI") == "true"
}

// Main starts one control plane for a test binary, runs its tests and stops it; call it from
// TestMain as os.Exit(testenv.Main(m, opts)). When binaries are missing, tests that call Get skip
// with the reason, unless CI=true, where Main fails at once.
func Main(m *testing.M, opts Options) int {
	if missing := MissingBinaries(opts.Binaries()...); len(missing) > 0 {
		if InCI() {
			fmt.Fprintf(os.Stderr, "testenv: binaries missing from bin/: %v; CI must build them with `make tools`\n", missing)
			return 1
		}
		skipReason = fmt.Sprintf("binaries missing from bin/: %v (run `make tools`)", missing)
		return m.Run()
	}
	env, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		if env != nil {
			_ = env.Stop()
		}
		return 1
	}
	shared = env
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Get returns the control plane started by Main, or skips the test when its binaries are missing
// outside CI.
func Get(t testing.TB) *Env {
	t.Helper()
	if shared == nil {
		if skipReason != "" {
			t.Skip(skipReason)
		}
		t.Fatal("testenv.Get called without testenv.Main in TestMain")
	}
	return shared
}

// RequireBinaries skips the test when a binary is missing outside CI and fails it in CI.
func RequireBinaries(t testing.TB, names ...string) {
	t.Helper()
	if missing := MissingBinaries(names...); len(missing) > 0 {
		if InCI() {
			t.Fatalf("binaries missing from bin/: %v; CI must build them with `make tools`", missing)
		}
		t.Skipf("binaries missing from bin/: %v (run `make tools`)", missing)
	}
}
