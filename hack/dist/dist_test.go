package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewManifest is the krew plugin manifest as krew reads it (its v1alpha2 field names), kept
// apart from the writer's types so that a wrong field name there fails here.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

const (
	testVersion = "v1.2.3-test.1"
	testBaseURL = "https://example.com/captf/releases/" + testVersion
)

// testTargets are the platforms the test builds: the host's, and Windows for the zip and the
// .exe (or Linux when the host is Windows). Every platform goes through the same code.
func testTargets() []Target {
	host := Target{runtime.GOOS, runtime.GOARCH}
	other := Target{"windows", "amd64"}
	if host == other {
		other = Target{"linux", "amd64"}
	}
	return []Target{host, other}
}

// dist runs the whole of `make dist` for testTargets into a new directory.
func dist(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	var log bytes.Buffer
	_, err := Dist(context.Background(), Options{
		RepoRoot: "../..", Out: out, Version: testVersion, BaseURL: testBaseURL, Targets: testTargets(), BuildOutput: &log,
	})
	if err != nil {
		t.Fatalf("dist: %v\n%s", err, log.String())
	}
	return out
}

// archiveEntries reads the entries of the archive at path, by its extension.
func archiveEntries(t *testing.T, path string) []entry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".zip") {
		entries, _ := readZip(t, data)
		return entries
	}
	entries, _, _ := readTarGz(t, data)
	return entries
}

// machineOf is the os and arch the executable data is built for.
func machineOf(data []byte) (Target, error) {
	r := bytes.NewReader(data)
	if f, err := elf.NewFile(r); err == nil {
		arch := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
		return Target{"linux", arch}, nil
	}
	if f, err := macho.NewFile(r); err == nil {
		arch := map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
		return Target{"darwin", arch}, nil
	}
	if f, err := pe.NewFile(r); err == nil {
		arch := map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[f.Machine]
		return Target{"windows", arch}, nil
	}
	return Target{}, fmt.Errorf("neither ELF, Mach-O nor PE")
}

// readDir is every file of dir, by name.
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		files[strings.TrimPrefix(path, dir+string(filepath.Separator))] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDist builds the plugin's release as `make dist` does and checks the krew manifest it
// writes against the archives beside it.
func TestDist(t *testing.T) {
	out := dist(t)
	data, err := os.ReadFile(filepath.Join(out, "captf.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatalf("the manifest is not a krew manifest: %v\n%s", err, data)
	}
	targets := testTargets()
	completion, err := os.ReadFile("../../cmd/kubectl-captf/kubectl_complete-captf")
	if err != nil {
		t.Fatal(err)
	}
	completionCmd, err := os.ReadFile("../../cmd/kubectl-captf/kubectl_complete-captf.cmd")
	if err != nil {
		t.Fatal(err)
	}

	// archiveOf is the file a platform's uri names, under the base URL.
	archiveOf := func(t *testing.T, uri string) string {
		t.Helper()
		name, ok := strings.CutPrefix(uri, testBaseURL+"/")
		if !ok || strings.Contains(name, "/") {
			t.Fatalf("uri %s is not an archive under %s", uri, testBaseURL)
		}
		return filepath.Join(out, name)
	}

	rules := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"the manifest is krew's Plugin captf, described, with its homepage", func(t *testing.T) {
			if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "captf" {
				t.Errorf("apiVersion %q kind %q name %q", m.APIVersion, m.Kind, m.Metadata.Name)
			}
			if m.Spec.ShortDescription == "" || strings.ContainsAny(m.Spec.ShortDescription, "\r\n") {
				t.Errorf("shortDescription %q: krew wants one line", m.Spec.ShortDescription)
			}
			if m.Spec.Description == "" || m.Spec.Homepage != "https://github.com/captf/captf" {
				t.Errorf("description %q homepage %q", m.Spec.Description, m.Spec.Homepage)
			}
		}},
		{"the version is the one built, and every archive's name carries it", func(t *testing.T) {
			if m.Spec.Version != testVersion {
				t.Errorf("version %q, want %q", m.Spec.Version, testVersion)
			}
			for _, p := range m.Spec.Platforms {
				if !strings.Contains(filepath.Base(p.URI), "_"+testVersion+"_") {
					t.Errorf("archive %s does not name version %s", p.URI, testVersion)
				}
			}
			if !strings.Contains(m.Spec.Caveats, "/store/captf/"+testVersion+"/kubectl_complete-captf") {
				t.Errorf("the caveats do not say where this version's completion entry is:\n%s", m.Spec.Caveats)
			}
		}},
		{"one platform per built target, selected by exactly its os and arch", func(t *testing.T) {
			var got []Target
			for _, p := range m.Spec.Platforms {
				labels := p.Selector.MatchLabels
				if len(labels) != 2 {
					t.Errorf("selector %v: want os and arch only", labels)
				}
				got = append(got, Target{labels["os"], labels["arch"]})
			}
			if !slices.Equal(got, targets) {
				t.Errorf("platforms %v, want %v", got, targets)
			}
		}},
		{"each sha256 is the sha256 of the archive its uri names", func(t *testing.T) {
			for _, p := range m.Spec.Platforms {
				data, err := os.ReadFile(archiveOf(t, p.URI))
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(data)
				if want := hex.EncodeToString(sum[:]); p.SHA256 != want {
					t.Errorf("%s: sha256 %s, the archive's is %s", p.URI, p.SHA256, want)
				}
			}
		}},
		{"sha256sums.txt lists each archive with its sha256, as sha256sum -c reads it", func(t *testing.T) {
			sums, err := os.ReadFile(filepath.Join(out, "sha256sums.txt"))
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, p := range m.Spec.Platforms {
				want = append(want, p.SHA256+"  "+filepath.Base(p.URI))
			}
			slices.Sort(want)
			if got := strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n"); !slices.Equal(got, want) {
				t.Errorf("sha256sums.txt:\n%s\nwant lines %q", sums, want)
			}
		}},
		{"a zip on windows, a tar.gz elsewhere", func(t *testing.T) {
			for _, p := range m.Spec.Platforms {
				want := ".tar.gz"
				if p.Selector.MatchLabels["os"] == "windows" {
					want = ".zip"
				}
				if !strings.HasSuffix(p.URI, want) {
					t.Errorf("%s: want a %s", p.URI, want)
				}
			}
		}},
		{"bin names an executable the archive holds, built for the platform selected", func(t *testing.T) {
			for _, p := range m.Spec.Platforms {
				labels := p.Selector.MatchLabels
				want := "kubectl-captf"
				if labels["os"] == "windows" {
					want += ".exe" // krew runs only .exe entrypoints on Windows
				}
				if p.Bin != want {
					t.Errorf("%s: bin %q, want %q", p.URI, p.Bin, want)
				}
				entries := archiveEntries(t, archiveOf(t, p.URI))
				i := slices.IndexFunc(entries, func(e entry) bool { return e.Name == p.Bin })
				if i < 0 {
					t.Errorf("%s: no %s in the archive", p.URI, p.Bin)
					continue
				}
				e := entries[i]
				if e.Mode != 0o755 {
					t.Errorf("%s: %s has mode %v", p.URI, p.Bin, e.Mode)
				}
				got, err := machineOf([]byte(e.Data))
				if err != nil || got != (Target{labels["os"], labels["arch"]}) {
					t.Errorf("%s: %s is built for %v (%v), want %s/%s", p.URI, p.Bin, got, err, labels["os"], labels["arch"])
				}
			}
		}},
		{"files install exactly what the archive holds, into the plugin's directory", func(t *testing.T) {
			for _, p := range m.Spec.Platforms {
				var from []string
				for _, f := range p.Files {
					from = append(from, f.From)
					if f.To != "." {
						t.Errorf("%s: %s goes to %q", p.URI, f.From, f.To)
					}
				}
				var held []string
				for _, e := range archiveEntries(t, archiveOf(t, p.URI)) {
					held = append(held, e.Name)
				}
				slices.Sort(from)
				if !slices.Equal(from, held) {
					t.Errorf("%s: files %v, the archive holds %v", p.URI, from, held)
				}
			}
		}},
		{"each archive holds the completion entry of its os, executable", func(t *testing.T) {
			for _, p := range m.Spec.Platforms {
				name, want := "kubectl_complete-captf", completion
				if p.Selector.MatchLabels["os"] == "windows" {
					name, want = "kubectl_complete-captf.cmd", completionCmd
				}
				entries := archiveEntries(t, archiveOf(t, p.URI))
				i := slices.IndexFunc(entries, func(e entry) bool { return e.Name == name })
				if i < 0 || entries[i].Data != string(want) || entries[i].Mode != 0o755 {
					t.Errorf("%s: no executable %s as the repository has it", p.URI, name)
				}
			}
		}},
		{"every archive is dated epoch throughout", func(t *testing.T) {
			for _, p := range m.Spec.Platforms {
				for _, e := range archiveEntries(t, archiveOf(t, p.URI)) {
					if !e.Modified.Equal(epoch) {
						t.Errorf("%s: %s dated %v", p.URI, e.Name, e.Modified)
					}
				}
			}
		}},
		{"a second build is byte-identical", func(t *testing.T) {
			first, second := readDir(t, out), readDir(t, dist(t))
			if !slices.Equal(slices.Sorted(maps.Keys(first)), slices.Sorted(maps.Keys(second))) {
				t.Fatalf("files %v, then %v", slices.Sorted(maps.Keys(first)), slices.Sorted(maps.Keys(second)))
			}
			for name, data := range first {
				if !bytes.Equal(data, second[name]) {
					t.Errorf("%s differs between two builds", name)
				}
			}
		}},
	}
	for _, r := range rules {
		t.Run(r.name, r.check)
	}
}

// The archive names are plain names, so a uri is the base URL and one more path segment.
func TestArchiveNamesArePlain(t *testing.T) {
	plain := regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)
	for _, target := range DefaultTargets {
		if name := target.ArchiveName("v0.1.0+build.1"); !plain.MatchString(name) {
			t.Errorf("%s: archive name %q", target, name)
		}
	}
	if got := ArchiveURI("https://example.com/r/", "a.zip"); got != "https://example.com/r/a.zip" {
		t.Errorf("uri %q", got)
	}
}
