package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// The krew manifest's fixed parts.
const (
	// KrewAPIVersion and KrewKind are the only ones krew reads.
	KrewAPIVersion = "krew.googlecontainertools.github.com/v1alpha2"
	KrewKind       = "Plugin"
	// PluginName is the plugin's name in krew, which makes it `kubectl captf`; krew requires the
	// manifest's file to be named after it (ManifestFile).
	PluginName   = "captf"
	ManifestFile = PluginName + ".yaml"

	Homepage         = "https://github.com/captf/captf"
	ShortDescription = "Inspect and approve captf's OpenTofu runs and plans"
	Description      = `Reads and operates captf, the Cluster API infrastructure provider that runs
OpenTofu as Kubernetes Jobs: lists the runs and plans its aggregated runs.captf.io
API serves, explains why an object is or is not running, shows a run's logs and
approves a plan by its hash. It acts with the caller's own rights only.
`
)

// Manifest is a krew plugin manifest, with the fields captf's uses.
type Manifest struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   ManifestMeta `json:"metadata"`
	Spec       ManifestSpec `json:"spec"`
}

// ManifestMeta names the plugin.
type ManifestMeta struct {
	Name string `json:"name"`
}

// ManifestSpec describes the plugin and where each platform's archive is.
type ManifestSpec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Caveats          string     `json:"caveats,omitempty"`
	Platforms        []Platform `json:"platforms"`
}

// Platform is one archive and what krew installs from it on the os and arch it selects.
type Platform struct {
	Selector Selector        `json:"selector"`
	URI      string          `json:"uri"`
	SHA256   string          `json:"sha256"`
	Bin      string          `json:"bin"`
	Files    []FileOperation `json:"files"`
}

// Selector is a label selector on krew's two keys, os and arch.
type Selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// FileOperation copies the archive's files matching From into To, relative to the plugin's
// directory.
type FileOperation struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// semverPattern is semver.org's grammar with the "v" krew requires in front.
var semverPattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
	`(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?` +
	`(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// ValidateVersion fails unless version is a semantic version with a leading "v", the only
// form krew installs.
func ValidateVersion(version string) error {
	if !semverPattern.MatchString(version) {
		return fmt.Errorf("version %q is not a semantic version with a leading v, such as v0.1.0: krew installs no other", version)
	}
	return nil
}

// ValidateBaseURL fails unless base is an absolute http or https URL without a query or
// fragment, under which an archive's name makes its uri.
func ValidateBaseURL(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("base URL %q: %w", base, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("base URL %q is not an absolute http or https URL", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("base URL %q has a query or fragment, so an archive's name cannot follow it", base)
	}
	return nil
}

// ArchiveURI is where the archive named name is downloaded from.
func ArchiveURI(base, name string) string {
	return strings.TrimSuffix(base, "/") + "/" + name
}

// Built is one archive written for a target.
type Built struct {
	Target Target
	// Name is the archive's file name.
	Name string
	// SHA256 is its sha256, in lower-case hex as krew requires.
	SHA256 string
	// Files are the names of the files it holds.
	Files []string
}

// NewManifest is captf's krew manifest for the archives built, downloaded from under
// baseURL: one platform per archive, selected by its target's os and arch, installing every
// file the archive holds, with the plugin's binary as bin.
func NewManifest(version, baseURL string, built []Built) (Manifest, error) {
	if err := ValidateVersion(version); err != nil {
		return Manifest{}, err
	}
	if err := ValidateBaseURL(baseURL); err != nil {
		return Manifest{}, err
	}
	if len(built) == 0 {
		return Manifest{}, errors.New("a krew manifest needs at least one platform")
	}
	m := Manifest{
		APIVersion: KrewAPIVersion,
		Kind:       KrewKind,
		Metadata:   ManifestMeta{Name: PluginName},
		Spec: ManifestSpec{
			Version:          version,
			Homepage:         Homepage,
			ShortDescription: ShortDescription,
			Description:      Description,
			Caveats:          caveats(version),
		},
	}
	seen := map[Target]bool{}
	for _, b := range built {
		if seen[b.Target] {
			return Manifest{}, fmt.Errorf("platform %s is given twice", b.Target)
		}
		seen[b.Target] = true
		bin := b.Target.Binary()
		files := make([]FileOperation, 0, len(b.Files))
		hasBin := false
		for _, f := range b.Files {
			files = append(files, FileOperation{From: f, To: "."})
			hasBin = hasBin || f == bin
		}
		if !hasBin {
			return Manifest{}, fmt.Errorf("archive %s does not hold the plugin's binary %s", b.Name, bin)
		}
		m.Spec.Platforms = append(m.Spec.Platforms, Platform{
			Selector: Selector{MatchLabels: map[string]string{"os": b.Target.OS, "arch": b.Target.Arch}},
			URI:      ArchiveURI(baseURL, b.Name),
			SHA256:   b.SHA256,
			Bin:      bin,
			Files:    files,
		})
	}
	return m, nil
}

// caveats is what krew shows after installing: the completion entry is installed with the
// plugin, but only kubectl's PATH lookup finds it, and krew links nothing but bin.
func caveats(version string) string {
	return fmt.Sprintf(`Shell completion of kubectl captf (kubectl 1.26 and later) needs the completion
entry on PATH. Krew installs it beside the plugin without linking it; copy it
into krew's bin directory once (it only runs "kubectl captf __complete", so it
outlives upgrades):

  cp "${KREW_ROOT:-$HOME/.krew}/store/%[1]s/%[2]s/%[3]s" "${KREW_ROOT:-$HOME/.krew}/bin/"

On Windows, copy %[3]s.cmd from %%USERPROFILE%%\.krew\store\%[1]s\%[2]s
into %%USERPROFILE%%\.krew\bin.
`, PluginName, version, CompletionEntry)
}

// MarshalManifest is m as YAML, under a line saying where it comes from.
func MarshalManifest(m Manifest) ([]byte, error) {
	data, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("krew manifest: %w", err)
	}
	var out bytes.Buffer
	out.WriteString("# The krew manifest of kubectl captf, written by `make dist` (hack/dist).\n")
	out.Write(data)
	return out.Bytes(), nil
}
