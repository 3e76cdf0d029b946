package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidateVersion(t *testing.T) {
	cases := []struct {
		version string
		valid   bool
	}{
		{"v0.1.0", true},
		{"v1.2.3-rc.1", true},
		{"v1.2.3-rc.1+build.5", true},
		{"v10.20.30", true},
		{"0.1.0", false},   // krew requires the leading v
		{"v0.1", false},    // all three numbers
		{"dev", false},     // the images' development tag
		{"v01.2.3", false}, // no leading zero
		{"v1.2.3-", false},
		{"", false},
	}
	for _, c := range cases {
		err := ValidateVersion(c.version)
		if (err == nil) != c.valid {
			t.Errorf("ValidateVersion(%q) = %v, want valid %v", c.version, err, c.valid)
		}
	}
}

func TestValidateBaseURL(t *testing.T) {
	cases := []struct {
		base  string
		valid bool
	}{
		{"https://github.com/captf/captf/releases/download/v0.1.0", true},
		{"http://127.0.0.1:8080/plugins/", true},
		{"", false},
		{"github.com/captf/captf", false}, // no scheme
		{"file:///tmp/dist", false},
		{"https://example.com/x?y=1", false},
		{"https://example.com/x#top", false},
		{"https:///path", false},
	}
	for _, c := range cases {
		err := ValidateBaseURL(c.base)
		if (err == nil) != c.valid {
			t.Errorf("ValidateBaseURL(%q) = %v, want valid %v", c.base, err, c.valid)
		}
	}
}

func TestParseTarget(t *testing.T) {
	if got, err := ParseTarget("darwin/arm64"); err != nil || got != (Target{"darwin", "arm64"}) {
		t.Errorf("ParseTarget(darwin/arm64) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "linux", "linux/", "/amd64", "linux/arm/v7"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) succeeded", bad)
		}
	}
}

func TestTargetNames(t *testing.T) {
	cases := []struct {
		target          Target
		binary, archive string
	}{
		{Target{"linux", "amd64"}, "kubectl-captf", "kubectl-captf_v0.1.0_linux_amd64.tar.gz"},
		{Target{"darwin", "arm64"}, "kubectl-captf", "kubectl-captf_v0.1.0_darwin_arm64.tar.gz"},
		{Target{"windows", "amd64"}, "kubectl-captf.exe", "kubectl-captf_v0.1.0_windows_amd64.zip"},
	}
	for _, c := range cases {
		if got := c.target.Binary(); got != c.binary {
			t.Errorf("%s: binary %q, want %q", c.target, got, c.binary)
		}
		if got := c.target.ArchiveName("v0.1.0"); got != c.archive {
			t.Errorf("%s: archive %q, want %q", c.target, got, c.archive)
		}
	}
}

// fakeRepo is a repository root holding both completion entries and, with license, a LICENSE.
func fakeRepo(t *testing.T, license bool) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "cmd", "kubectl-captf"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{CompletionSource: "sh entry\n", CompletionCmdSource: "cmd entry\r\n"}
	if license {
		files[License] = "license\n"
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestContents(t *testing.T) {
	cases := []struct {
		name    string
		target  Target
		license bool
		want    []File
	}{
		{"unix: the binary and the shell completion entry, both executable", Target{"linux", "arm64"}, false, []File{
			{"kubectl-captf", 0o755, []byte("bin")},
			{"kubectl_complete-captf", 0o755, []byte("sh entry\n")},
		}},
		{"windows: the .exe and the batch completion entry", Target{"windows", "amd64"}, false, []File{
			{"kubectl-captf.exe", 0o755, []byte("bin")},
			{"kubectl_complete-captf.cmd", 0o755, []byte("cmd entry\r\n")},
		}},
		{"a repository with a LICENSE ships it", Target{"darwin", "amd64"}, true, []File{
			{"kubectl-captf", 0o755, []byte("bin")},
			{"kubectl_complete-captf", 0o755, []byte("sh entry\n")},
			{"LICENSE", 0o644, []byte("license\n")},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Contents(fakeRepo(t, c.license), c.target, []byte("bin"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, c.want, func(a, b File) bool {
				return a.Name == b.Name && a.Mode == b.Mode && string(a.Data) == string(b.Data)
			}) {
				t.Errorf("contents %v, want %v", got, c.want)
			}
		})
	}
	t.Run("a missing completion entry is an error", func(t *testing.T) {
		if _, err := Contents(t.TempDir(), Target{"linux", "amd64"}, nil); err == nil || !strings.Contains(err.Error(), "completion entry") {
			t.Errorf("error %v", err)
		}
	})
}

func TestSums(t *testing.T) {
	got := string(Sums([]Built{{Name: "b.zip", SHA256: "22"}, {Name: "a.tar.gz", SHA256: "11"}}))
	if want := "11  a.tar.gz\n22  b.zip\n"; got != want {
		t.Errorf("sums %q, want %q", got, want)
	}
}

func TestNewManifestRefusesBadInput(t *testing.T) {
	good := Built{Target: Target{"linux", "amd64"}, Name: "a.tar.gz", SHA256: strings.Repeat("a", 64), Files: []string{"kubectl-captf"}}
	cases := []struct {
		name, version, base string
		built               []Built
		want                string
	}{
		{"a version without v", "0.1.0", "https://example.com", []Built{good}, "semantic version"},
		{"a relative base URL", "v0.1.0", "dist", []Built{good}, "absolute"},
		{"no platform", "v0.1.0", "https://example.com", nil, "at least one platform"},
		{"a platform twice", "v0.1.0", "https://example.com", []Built{good, good}, "given twice"},
		{"an archive without the binary", "v0.1.0", "https://example.com",
			[]Built{{Target: Target{"windows", "amd64"}, Name: "a.zip", Files: []string{"kubectl-captf"}}}, "kubectl-captf.exe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewManifest(c.version, c.base, c.built)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}
