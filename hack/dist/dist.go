package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Names of what an archive holds, and where the sources are in the repository.
const (
	// BinaryName is the plugin's executable, with ".exe" on Windows (Target.Binary).
	BinaryName = "kubectl-" + PluginName
	// CompletionEntry is the executable kubectl runs to complete the plugin's arguments. On
	// Windows it is a batch file (CompletionEntry + ".cmd", from CompletionCmdSource), since
	// Windows runs no file by its first line.
	CompletionEntry = "kubectl_complete-" + PluginName
	// PluginPackage is the plugin's main package.
	PluginPackage = "./cmd/kubectl-captf"
	// CompletionSource and CompletionCmdSource are the completion entries, relative to the
	// repository root.
	CompletionSource    = "cmd/kubectl-captf/" + CompletionEntry
	CompletionCmdSource = CompletionSource + ".cmd"
	// License is shipped in every archive when the repository has one at its root.
	License = "LICENSE"
	// SumsFile lists the sha256 of every archive, as sha256sum writes it.
	SumsFile = "sha256sums.txt"
)

// ldflags strip the symbol table and DWARF, which a user never needs, and the build ID, as the
// images' binaries do, so that the binary holds only what the source and toolchain make.
const ldflags = "-s -w -buildid="

// Target is an os and arch to build the plugin for, as Go and krew name them.
type Target struct {
	OS, Arch string
}

// DefaultTargets are the platforms `make dist` builds.
var DefaultTargets = []Target{
	{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"},
}

// ParseTarget reads "os/arch".
func ParseTarget(s string) (Target, error) {
	goos, goarch, ok := strings.Cut(s, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return Target{}, fmt.Errorf("platform %q is not os/arch, such as linux/amd64", s)
	}
	return Target{OS: goos, Arch: goarch}, nil
}

func (t Target) String() string { return t.OS + "/" + t.Arch }

func (t Target) windows() bool { return t.OS == "windows" }

// Binary is the plugin's executable on t.
func (t Target) Binary() string {
	if t.windows() {
		return BinaryName + ".exe"
	}
	return BinaryName
}

// ArchiveName is the name of t's archive for version: a zip on Windows, where it is the
// native format, a tar.gz elsewhere.
func (t Target) ArchiveName(version string) string {
	ext := ".tar.gz"
	if t.windows() {
		ext = ".zip"
	}
	return fmt.Sprintf("%s_%s_%s_%s%s", BinaryName, version, t.OS, t.Arch, ext)
}

// Contents are the files of t's archive: the binary, the completion entry for t and, when
// repoRoot has one, the license.
func Contents(repoRoot string, t Target, binary []byte) ([]File, error) {
	completion, completionSource := CompletionEntry, CompletionSource
	if t.windows() {
		completion, completionSource = CompletionEntry+".cmd", CompletionCmdSource
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, completionSource))
	if err != nil {
		return nil, fmt.Errorf("completion entry: %w", err)
	}
	files := []File{
		{Name: t.Binary(), Mode: 0o755, Data: binary},
		{Name: completion, Mode: 0o755, Data: script},
	}
	license, err := os.ReadFile(filepath.Join(repoRoot, License))
	switch {
	case err == nil:
		files = append(files, File{Name: License, Mode: 0o644, Data: license})
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("license: %w", err)
	}
	return files, nil
}

// WriteArchive writes files as t's archive format.
func WriteArchive(w io.Writer, t Target, files []File) error {
	if t.windows() {
		return WriteZip(w, files)
	}
	return WriteTarGz(w, files)
}

// Sums is the content of SumsFile for built, one "<sha256>  <name>" line per archive, sorted
// by name, so that `sha256sum -c` checks them.
func Sums(built []Built) []byte {
	lines := make([]string, 0, len(built))
	for _, b := range built {
		lines = append(lines, b.SHA256+"  "+b.Name+"\n")
	}
	slices.Sort(lines)
	return []byte(strings.Join(lines, ""))
}

// Options say what Dist builds and where it writes.
type Options struct {
	// RepoRoot is the root of the captf source tree.
	RepoRoot string
	// Out is the directory the archives, SumsFile and ManifestFile are written to.
	Out string
	// Version is the plugin's version in the manifest and the archives' names.
	Version string
	// BaseURL is where the archives are published; an archive's uri is BaseURL/<name>.
	BaseURL string
	// Targets are the platforms to build.
	Targets []Target
	// BuildOutput receives go build's output. Defaults to discarding it.
	BuildOutput io.Writer
}

// Dist cross-builds the plugin for every target, writes one archive per target, SumsFile and
// the krew manifest into opts.Out, and returns the archives in target order. The same source
// tree and Go toolchain give byte-identical files.
func Dist(ctx context.Context, opts Options) ([]Built, error) {
	if err := ValidateVersion(opts.Version); err != nil {
		return nil, err
	}
	if err := ValidateBaseURL(opts.BaseURL); err != nil {
		return nil, err
	}
	if len(opts.Targets) == 0 {
		return nil, errors.New("no platform to build")
	}
	for i, t := range opts.Targets {
		if slices.Contains(opts.Targets[:i], t) {
			return nil, fmt.Errorf("platform %s is given twice", t)
		}
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "captf-dist-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	var built []Built
	for _, t := range opts.Targets {
		b, err := buildTarget(ctx, opts, t, tmp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		built = append(built, b)
	}
	m, err := NewManifest(opts.Version, opts.BaseURL, built)
	if err != nil {
		return nil, err
	}
	manifest, err := MarshalManifest(m)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Out, SumsFile), Sums(built), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Out, ManifestFile), manifest, 0o644); err != nil {
		return nil, err
	}
	return built, nil
}

// buildTarget builds the plugin for t in tmp and writes its archive into opts.Out.
func buildTarget(ctx context.Context, opts Options, t Target, tmp string) (Built, error) {
	bin := filepath.Join(tmp, t.OS+"_"+t.Arch, t.Binary())
	if err := goBuild(ctx, opts.RepoRoot, t, bin, opts.BuildOutput); err != nil {
		return Built{}, err
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return Built{}, err
	}
	files, err := Contents(opts.RepoRoot, t, binary)
	if err != nil {
		return Built{}, err
	}
	var archive bytes.Buffer
	if err := WriteArchive(&archive, t, files); err != nil {
		return Built{}, err
	}
	name := t.ArchiveName(opts.Version)
	if err := os.WriteFile(filepath.Join(opts.Out, name), archive.Bytes(), 0o644); err != nil {
		return Built{}, err
	}
	sum := sha256.Sum256(archive.Bytes())
	b := Built{Target: t, Name: name, SHA256: hex.EncodeToString(sum[:])}
	for _, f := range files {
		b.Files = append(b.Files, f.Name)
	}
	slices.Sort(b.Files)
	return b, nil
}

// goBuild builds the plugin for t into out: static (no cgo, so one binary runs on any libc),
// with paths trimmed and no build ID, so that it depends only on the source and toolchain.
func goBuild(ctx context.Context, repoRoot string, t Target, out string, output io.Writer) error {
	if output == nil {
		output = io.Discard
	}
	var stderr strings.Builder
	args := []string{"build", "-trimpath", "-ldflags=" + ldflags, "-o", out, PluginPackage}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.OS, "GOARCH="+t.Arch)
	cmd.Stdout = output
	cmd.Stderr = io.MultiWriter(output, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
