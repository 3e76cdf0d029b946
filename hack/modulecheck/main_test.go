package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/test/testenv"
)

// The check runs the module as captf would and fails where a run would: a table row per rule.
// It also keeps the sample machine module's lock file true to the providers `make tools` builds.
func TestModuleCheck(t *testing.T) {
	testenv.RequireBinaries(t, testenv.TofuBinary)
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	mirror := filepath.Join(bin, "providers")
	if _, err := os.Stat(filepath.Join(mirror, "registry.opentofu.org", "hashicorp", "time")); err != nil {
		t.Fatalf("the provider mirror %s lacks hashicorp/time (make tools builds it): %v", mirror, err)
	}
	sample := filepath.Join("..", "..", "artifacts", "samples", "modules", "machine")
	for _, row := range []struct {
		name      string
		role      contract.Role
		module    func(t *testing.T) string
		providers string
		// fails is a line of the output of a failed check; "" when it passes.
		fails string
	}{
		{name: "the sample machine module passes", role: contract.RoleMachine, module: same(sample), providers: mirror},
		{name: "the sample no-op module needs no provider", role: contract.RoleCluster, module: same(filepath.Join("..", "..", "artifacts", "samples", "modules", "noop")), providers: ""},
		{name: "a module lacking a contract input of its role fails", role: contract.RoleMachinePool, module: same(sample), providers: mirror, fails: "Extraneous JSON object property"},
		{name: "a module lacking an output of its role fails", role: contract.RoleMachine, module: edited(sample, "main.tf", "output \"interruptible\"", "output \"spot\""), providers: mirror, fails: "Unsupported attribute"},
		{name: "a module that needs providers fails without a mirror", role: contract.RoleMachine, module: same(sample), providers: "", fails: "Failed to query available provider packages"},
		{name: "a provider the mirror lacks fails", role: contract.RoleMachine, module: same(sample), providers: t.TempDir(), fails: "Failed to query available provider packages"},
		{name: "a provider that differs from the lock file fails", role: contract.RoleMachine, module: edited(sample, ".terraform.lock.hcl", "h1:vvPubUBPWCbZXJtqdbnNm5a/8OS7OJ0IWwFlMHx0M1c=", "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="), providers: mirror, fails: "doesn't match any of the checksums"},
	} {
		t.Run(row.name, func(t *testing.T) {
			var out strings.Builder
			err := run(row.role, row.module(t), row.providers, `{"name":"check"}`, filepath.Join(bin, testenv.TofuBinary), &out)
			switch {
			case row.fails == "" && err != nil:
				t.Fatalf("the check failed: %v\n%s", err, out.String())
			case row.fails != "" && err == nil:
				t.Fatalf("the check passed; want it to fail with %q\n%s", row.fails, out.String())
			case row.fails != "" && !strings.Contains(strings.Join(strings.Fields(out.String()), " "), row.fails):
				t.Fatalf("the check failed without %q:\n%s", row.fails, out.String())
			}
		})
	}
}

func same(dir string) func(*testing.T) string { return func(*testing.T) string { return dir } }

// edited is a copy of the module whose file has its first from replaced by to.
func edited(module, file, from, to string) func(*testing.T) string {
	return func(t *testing.T) string {
		dir := t.TempDir()
		entries, err := os.ReadDir(module)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(module, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == file {
				if !strings.Contains(string(data), from) {
					t.Fatalf("%s has no %q", file, from)
				}
				data = []byte(strings.Replace(string(data), from, to, 1))
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
}
