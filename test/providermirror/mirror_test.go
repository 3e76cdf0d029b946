package providermirror

import (
	"archive/zip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/dirhash"

	"github.com/captf/captf/test/testenv"
)

// writeFile creates dir/rel with content and mode, and its parents.
func writeFile(t *testing.T, dir, rel, content string, mode os.FileMode) {
	t.Helper()
	file := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode passes through the umask; the exec bit is what the tests are about.
	if err := os.Chmod(file, mode); err != nil {
		t.Fatal(err)
	}
}

// fakeMirror is an unpacked filesystem mirror of example.com/acme/thing 1.0.0 and 1.1.0 for
// linux_amd64: an executable and a plain file per package.
func fakeMirror(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mirror")
	for _, v := range []string{"1.0.0", "1.1.0"} {
		pkg := "example.com/acme/thing/" + v + "/linux_amd64/"
		writeFile(t, dir, pkg+"terraform-provider-thing_v"+v, "#!/bin/sh\necho "+v+"\n", 0o755)
		writeFile(t, dir, pkg+"LICENSE", "license of "+v+"\n", 0o644)
	}
	return dir
}

func start(t *testing.T, dir string) *Mirror {
	t.Helper()
	m, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// client trusts only the mirror's certificate, as OpenTofu does with SSL_CERT_FILE naming it.
func client(t *testing.T, m *Mirror) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(m.CAPEM()) {
		t.Fatal("CAPEM holds no certificate")
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// get fetches u and returns the status and body.
func get(t *testing.T, c *http.Client, method, u string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return resp.StatusCode, body
}

// getJSON fetches u, which must answer 200, into v.
func getJSON(t *testing.T, c *http.Client, u string, v any) {
	t.Helper()
	status, body := get(t, c, http.MethodGet, u)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", u, err, body)
	}
}

type versionDoc struct {
	Archives map[string]struct {
		URL    string   `json:"url"`
		Hashes []string `json:"hashes"`
	} `json:"archives"`
}

// download fetches the linux_amd64 archive of version of example.com/acme/thing as the version
// document lists it, resolving its URL against the document's, and returns the zip's file and
// the h1 hash listed.
func download(t *testing.T, m *Mirror, version string) (zipFile, listedH1 string) {
	t.Helper()
	c := client(t, m)
	docURL := m.URL() + "example.com/acme/thing/" + version + ".json"
	var doc versionDoc
	getJSON(t, c, docURL, &doc)
	a, ok := doc.Archives["linux_amd64"]
	if !ok || a.URL == "" {
		t.Fatalf("%s lists no linux_amd64 archive: %+v", docURL, doc)
	}
	var h1s []string
	for _, h := range a.Hashes {
		if strings.HasPrefix(h, "h1:") {
			h1s = append(h1s, h)
		}
	}
	if len(h1s) != 1 {
		t.Fatalf("%s lists hashes %v, want one h1", docURL, a.Hashes)
	}
	base, _ := url.Parse(docURL)
	ref, err := url.Parse(a.URL)
	if err != nil {
		t.Fatalf("archive url %q: %v", a.URL, err)
	}
	status, body := get(t, c, http.MethodGet, base.ResolveReference(ref).String())
	if status != http.StatusOK {
		t.Fatalf("GET archive %s: %d %s", a.URL, status, body)
	}
	zipFile = filepath.Join(t.TempDir(), "package.zip")
	if err := os.WriteFile(zipFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return zipFile, h1s[0]
}

func TestIndexListsEveryVersionOfTheDirectory(t *testing.T) {
	m := start(t, fakeMirror(t))
	var index struct {
		Versions map[string]struct{} `json:"versions"`
	}
	getJSON(t, client(t, m), m.URL()+"example.com/acme/thing/index.json", &index)
	if got, want := slices.Sorted(maps.Keys(index.Versions)), []string{"1.0.0", "1.1.0"}; !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
}

func TestArchiveHoldsThePackageFilesWithTheirModes(t *testing.T) {
	m := start(t, fakeMirror(t))
	zipFile, _ := download(t, m, "1.1.0")
	zr, err := zip.OpenReader(zipFile)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	modes := map[string]os.FileMode{}
	for _, f := range zr.File {
		modes[f.Name] = f.Mode().Perm()
	}
	want := map[string]os.FileMode{"terraform-provider-thing_v1.1.0": 0o755, "LICENSE": 0o644}
	if !maps.Equal(modes, want) {
		t.Fatalf("zip entries and modes %v, want %v", modes, want)
	}
	rc, err := zr.Open("terraform-provider-thing_v1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if content, err := io.ReadAll(rc); err != nil || string(content) != "#!/bin/sh\necho 1.1.0\n" {
		t.Fatalf("executable content %q, %v", content, err)
	}
}

func TestListedH1IsTheArchivesAndTheUnpackedPackagesHash(t *testing.T) {
	dir := fakeMirror(t)
	m := start(t, dir)
	zipFile, listed := download(t, m, "1.0.0")
	ofZip, err := dirhash.HashZip(zipFile, dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	// The hash OpenTofu locks for a package installed from a filesystem mirror.
	ofDir, err := dirhash.HashDir(filepath.Join(dir, "example.com/acme/thing/1.0.0/linux_amd64"), "", dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	if listed != ofZip || listed != ofDir {
		t.Fatalf("listed %s, archive's %s, unpacked package's %s: want one hash", listed, ofZip, ofDir)
	}
}

func TestUnknownPathsAreNotFoundAndRecorded(t *testing.T) {
	dir := fakeMirror(t)
	// A package beside the mirror directory, which no request may reach.
	writeFile(t, filepath.Dir(dir), "acme/thing/9.9.9/linux_amd64/terraform-provider-thing_v9.9.9", "outside", 0o755)
	m := start(t, dir)
	c := client(t, m)
	tests := []struct {
		name   string
		method string
		path   string
		want   int
	}{
		{"an unknown provider has no index", http.MethodGet, "/example.com/acme/other/index.json", http.StatusNotFound},
		{"an unknown version has no document", http.MethodGet, "/example.com/acme/thing/2.0.0.json", http.StatusNotFound},
		{"an unknown platform has no archive", http.MethodGet, "/example.com/acme/thing/1.0.0/darwin_arm64.zip", http.StatusNotFound},
		{"an unknown version has no archive", http.MethodGet, "/example.com/acme/thing/2.0.0/linux_amd64.zip", http.StatusNotFound},
		{"a version directory is no archive", http.MethodGet, "/example.com/acme/thing/1.0.0/.zip", http.StatusNotFound},
		{"an empty version has no document", http.MethodGet, "/example.com/acme/thing/.json", http.StatusNotFound},
		{"a path outside the directory is not found", http.MethodGet, "/../acme/thing/index.json", http.StatusNotFound},
		{"a path of another shape is not found", http.MethodGet, "/example.com/acme/thing", http.StatusNotFound},
		{"only reads are served", http.MethodPost, "/example.com/acme/thing/index.json", http.StatusMethodNotAllowed},
	}
	var paths []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, body := get(t, c, tt.method, strings.TrimSuffix(m.URL(), "/")+tt.path); status != tt.want {
				t.Errorf("%s %s: %d %s, want %d", tt.method, tt.path, status, body, tt.want)
			}
		})
		paths = append(paths, tt.path)
	}
	if got := m.Requests(); !slices.Equal(got, paths) {
		t.Fatalf("requests %q, want %q", got, paths)
	}
}

// The mirror `make tools` builds; every provider in it is an OpenTofu registry provider.
const providersDir = "providers"

var lockedProvider = regexp.MustCompile(`(?s)provider "registry\.opentofu\.org/hashicorp/time" \{\s*version\s*=\s*"([^"]+)".*?hashes\s*=\s*\[([^\]]*)\]`)

func TestTofuInitInstallsFromTheMirrorAndLocksItsHash(t *testing.T) {
	testenv.RequireBinaries(t, testenv.TofuBinary)
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(bin, providersDir)
	if info, err := os.Stat(filepath.Join(dir, "registry.opentofu.org/hashicorp/time")); err != nil || !info.IsDir() {
		t.Fatalf("no hashicorp/time provider in the provider mirror %s (`make tools` builds it): %v", dir, err)
	}
	m := start(t, dir)

	work := t.TempDir()
	writeFile(t, work, "module/main.tf", `terraform {
  required_providers {
    time = { source = "hashicorp/time" }
  }
}
`, 0o644)
	writeFile(t, work, "tofurc", m.CLIConfig(), 0o644)
	writeFile(t, work, "ca.pem", string(m.CAPEM()), 0o644)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, testenv.TofuBinary), "init", "-input=false", "-no-color")
	cmd.Dir = filepath.Join(work, "module")
	// Nothing inherited: no other CLI configuration, plugin cache or credentials reach the run.
	cmd.Env = []string{
		"HOME=" + filepath.Join(work, "home"),
		"TF_DATA_DIR=" + filepath.Join(work, "data"),
		"TF_CLI_CONFIG_FILE=" + filepath.Join(work, "tofurc"),
		"SSL_CERT_FILE=" + filepath.Join(work, "ca.pem"),
		"TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1",
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tofu init: %v\n%s\nmirror requests: %q", err, out, m.Requests())
	}

	lock, err := os.ReadFile(filepath.Join(work, "module", ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	match := lockedProvider.FindSubmatch(lock)
	if match == nil {
		t.Fatalf("the lock file names no hashicorp/time version and hashes:\n%s", lock)
	}
	version := string(match[1])
	platform := runtime.GOOS + "_" + runtime.GOARCH
	want, err := dirhash.HashDir(filepath.Join(dir, "registry.opentofu.org/hashicorp/time", version, platform), "", dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(match[2]), `"`+want+`"`) {
		t.Errorf("locked hashes %s, want the mirror's and the unpacked package's %s", match[2], want)
	}
	prefix := "/registry.opentofu.org/hashicorp/time/"
	for _, p := range []string{prefix + "index.json", prefix + version + ".json", prefix + version + "/" + platform + ".zip"} {
		if !slices.Contains(m.Requests(), p) {
			t.Errorf("the mirror never served %s; requests %q", p, m.Requests())
		}
	}
}
