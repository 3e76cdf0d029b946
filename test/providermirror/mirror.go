// Package providermirror serves OpenTofu providers from an unpacked filesystem mirror as a
// provider network mirror over HTTPS, so that tests install providers the way a run configured
// with a network_mirror does, without the internet.
//
// The input directory has the unpacked layout of a filesystem mirror:
// <dir>/<hostname>/<namespace>/<type>/<version>/<os>_<arch>/<files>. Each package is served as a
// zip of its files, built on first request and kept in memory, and listed with its h1 hash, the
// hash OpenTofu writes into .terraform.lock.hcl for the same unpacked package.
package providermirror

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/dirhash"
)

// Mirror is a running provider network mirror.
type Mirror struct {
	dir   string
	srv   *httptest.Server
	caPEM []byte

	mu       sync.Mutex
	requests []string
	archives map[string]*archive
}

// archive is one package's zip, built at most once.
type archive struct {
	once sync.Once
	zip  []byte
	h1   string
	err  error
}

// Start serves the unpacked mirror dir over HTTPS on 127.0.0.1 with httptest's certificate.
func Start(dir string) (*Mirror, error) {
	if info, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("provider mirror: %w", err)
	} else if !info.IsDir() {
		return nil, fmt.Errorf("provider mirror: %s is not a directory", dir)
	}
	m := &Mirror{dir: dir, archives: map[string]*archive{}}
	// httptest's certificate is its own CA, valid for the loopback addresses: trusting it is
	// trusting the mirror.
	m.srv = httptest.NewTLSServer(http.HandlerFunc(m.serve))
	m.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.srv.Certificate().Raw})
	return m, nil
}

// URL is the mirror's base URL, with the trailing slash the protocol requires.
func (m *Mirror) URL() string { return m.srv.URL + "/" }

// CAPEM is the certificate that makes a client trust the mirror, PEM encoded: a file in the
// directory SSL_CERT_DIR names, for OpenTofu.
func (m *Mirror) CAPEM() []byte { return slices.Clone(m.caPEM) }

// Requests returns the path of every request the mirror answered, found or not, in order.
func (m *Mirror) Requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.requests)
}

// CLIConfig is an OpenTofu CLI configuration that installs every provider from this mirror and
// from nowhere else.
func (m *Mirror) CLIConfig() string {
	return fmt.Sprintf("provider_installation {\n  network_mirror {\n    url = %q\n  }\n}\n", m.URL())
}

// Close stops the server and drops the archives it built.
func (m *Mirror) Close() {
	m.srv.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.archives = nil
}

// serve answers the three documents of the protocol, relative to the base URL:
// <host>/<namespace>/<type>/index.json, <host>/<namespace>/<type>/<version>.json and the archive
// <host>/<namespace>/<type>/<version>/<os>_<arch>.zip that the version document names.
func (m *Mirror) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.requests = append(m.requests, r.URL.Path)
	m.mu.Unlock()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	seg := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !validSegments(seg) {
		http.NotFound(w, r)
		return
	}
	last := seg[len(seg)-1]
	version, isVersion := strings.CutSuffix(last, ".json")
	platform, isArchive := strings.CutSuffix(last, ".zip")
	switch {
	case len(seg) == 4 && last == "index.json":
		m.serveIndex(w, r, filepath.Join(m.dir, seg[0], seg[1], seg[2]))
	case len(seg) == 4 && isVersion && version != "":
		m.serveVersion(w, r, path.Join(seg[0], seg[1], seg[2], version))
	case len(seg) == 5 && isArchive && strings.Contains(platform, "_"):
		m.serveArchive(w, r, path.Join(seg[0], seg[1], seg[2], seg[3], platform))
	default:
		http.NotFound(w, r)
	}
}

// validSegments refuses empty, dot and dot-dot segments, so no request names a file outside the
// mirror directory.
func validSegments(seg []string) bool {
	for _, s := range seg {
		if s == "" || s == "." || s == ".." || strings.Contains(s, `\`) {
			return false
		}
	}
	return true
}

func (m *Mirror) serveIndex(w http.ResponseWriter, r *http.Request, providerDir string) {
	versions := map[string]struct{}{}
	for _, name := range subdirs(providerDir) {
		versions[name] = struct{}{}
	}
	if len(versions) == 0 {
		http.NotFound(w, r)
		return
	}
	writeJSON(w, map[string]any{"versions": versions})
}

type archiveDoc struct {
	URL    string   `json:"url"`
	Hashes []string `json:"hashes"`
}

func (m *Mirror) serveVersion(w http.ResponseWriter, r *http.Request, versionPath string) {
	version := path.Base(versionPath)
	archives := map[string]archiveDoc{}
	for _, platform := range subdirs(filepath.Join(m.dir, filepath.FromSlash(versionPath))) {
		a, err := m.archive(path.Join(versionPath, platform))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// Relative to this document's URL: <version>.json sits beside the <version>/ directory.
		archives[platform] = archiveDoc{URL: version + "/" + platform + ".zip", Hashes: []string{a.h1}}
	}
	if len(archives) == 0 {
		http.NotFound(w, r)
		return
	}
	writeJSON(w, map[string]any{"archives": archives})
}

func (m *Mirror) serveArchive(w http.ResponseWriter, r *http.Request, packagePath string) {
	if info, err := os.Stat(filepath.Join(m.dir, filepath.FromSlash(packagePath))); err != nil || !info.IsDir() {
		http.NotFound(w, r)
		return
	}
	a, err := m.archive(packagePath)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/zip")
	http.ServeContent(w, r, path.Base(packagePath)+".zip", time.Time{}, bytes.NewReader(a.zip))
}

// archive returns the package at packagePath (slash separated, relative to the mirror
// directory), building its zip on first use.
func (m *Mirror) archive(packagePath string) (*archive, error) {
	m.mu.Lock()
	if m.archives == nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("provider mirror is closed")
	}
	a := m.archives[packagePath]
	if a == nil {
		a = &archive{}
		m.archives[packagePath] = a
	}
	m.mu.Unlock()
	a.once.Do(func() {
		a.zip, a.h1, a.err = buildArchive(filepath.Join(m.dir, filepath.FromSlash(packagePath)))
	})
	return a, a.err
}

// buildArchive zips the files of an unpacked package, named relative to it and keeping their
// modes (the provider executable's exec bit), and returns the zip with its h1 hash. The hash is
// taken from the zip itself, so it always describes what is served.
func buildArchive(dir string) ([]byte, string, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(file string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return addFile(zw, dir, file)
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, "", fmt.Errorf("zipping %s: %w", dir, err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		return nil, "", fmt.Errorf("reading back the zip of %s: %w", dir, err)
	}
	names := make([]string, 0, len(zr.File))
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	h1, err := dirhash.Hash1(names, func(name string) (io.ReadCloser, error) { return zr.Open(name) })
	if err != nil {
		return nil, "", fmt.Errorf("hashing the zip of %s: %w", dir, err)
	}
	return buf.Bytes(), h1, nil
}

func addFile(zw *zip.Writer, dir, file string) error {
	info, err := os.Stat(file)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", file)
	}
	rel, err := filepath.Rel(dir, file)
	if err != nil {
		return err
	}
	hdr, err := zip.FileInfoHeader(info)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	// Stored, not deflated: the archive never leaves the machine, and compressing tens of
	// megabytes per provider would only cost test time.
	hdr.Method = zip.Store
	w, err := zw.CreateHeader(hdr)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// subdirs lists the names of the directories in dir; a missing dir has none.
func subdirs(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
