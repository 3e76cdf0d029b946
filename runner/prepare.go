package runner

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/captf/captf/jobs/statecrypt"
	"github.com/captf/captf/runner/plan"
)

// Files the runner writes in the work directory.
const (
	rootDirName      = "root"
	planFileName     = "plan.tfplan"
	cliConfigName    = "cli.tfrc"
	restoreStateName = "restore.tfstate"
	// restoreDirName is the config subdirectory that holds backup chunks 0..n-1.
	restoreDirName = "restore"
)

// lockFileName is OpenTofu's dependency lock file. A module image may ship one beside its
// module; OpenTofu reads it only in the root module's directory, where the runner copies it.
const lockFileName = ".terraform.lock.hcl"

// CopyModuleLock copies the module's dependency lock file into the root directory and reports
// whether there was one; init must then leave it as it is (-lockfile=readonly). The lock file
// itself must be a regular file, not a link.
func CopyModuleLock(module, root string) (bool, error) {
	src := filepath.Join(module, lockFileName)
	info, err := os.Lstat(src)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the module's lock file: %w", err)
	case !info.Mode().IsRegular():
		return false, fmt.Errorf("the module's lock file %s is not a regular file", src)
	}
	if err := copyFile(src, filepath.Join(root, lockFileName), 0o600); err != nil {
		return false, err
	}
	return true, nil
}

// Files of the rendered root that the runner reads itself.
const (
	mainFile = "main.tf.json"
	// varsFile is relative to the root module, as the runtime's -var-file names it.
	varsFile = "terraform.tfvars.json"
)

// maxRestoreStateBytes bounds a decompressed backup, as the controller bounds a state it reads.
const maxRestoreStateBytes = 64 << 20

// moduleSuffixes are the file names that make a directory an OpenTofu/Terraform module.
var moduleSuffixes = []string{".tf", ".tf.json", ".tofu", ".tofu.json"}

// preflight checks the module image's layout: a module with at least one top-level
// configuration file, and an executable runtime. It returns the runtime's resolved path.
func preflight(module, bin string) (string, error) {
	if !hasModuleFile(module) {
		return "", fmt.Errorf("module directory %s holds no top-level %s file", module, strings.Join(moduleSuffixes, ", "))
	}
	path := bin
	if !strings.Contains(bin, "/") {
		found, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("runtime %s: %w", bin, err)
		}
		path = found
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("runtime %s: %w", bin, err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("runtime %s is not an executable file", path)
	}
	return path, nil
}

// hasModuleFile reports whether dir holds a regular file (or a link to one) with a module
// suffix at its top level.
func hasModuleFile(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !hasModuleSuffix(e.Name()) {
			continue
		}
		if info, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && info.Mode().IsRegular() {
			return true
		}
	}
	return false
}

func hasModuleSuffix(name string) bool {
	for _, s := range moduleSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// readPlanKey reads the plan key; it must hold at least plan.MinKeyBytes bytes, used as they
// are (no trimming: the key is random bytes, not text).
func readPlanKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the plan key: %w", err)
	}
	if len(key) < plan.MinKeyBytes {
		return nil, fmt.Errorf("plan key %s: %w (%d bytes)", path, plan.ErrShortKey, len(key))
	}
	return key, nil
}

// copyConfig copies the top-level regular files of config (following links, as a Secret volume
// has them) into root with mode 0600, so the runtime works on a private, writable copy. The
// volume's own entries (..data and the timestamped directory) and subdirectories are skipped.
// It fails when no root module file was copied.
func copyConfig(config, root string) error {
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("clearing %s: %w", root, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", root, err)
	}
	entries, err := os.ReadDir(config)
	if err != nil {
		return fmt.Errorf("reading the config directory: %w", err)
	}
	module := false
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		src := filepath.Join(config, e.Name())
		info, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("reading %s: %w", src, err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if err := copyFile(src, filepath.Join(root, e.Name()), 0o600); err != nil {
			return err
		}
		module = module || hasModuleSuffix(e.Name())
	}
	if !module {
		return fmt.Errorf("config directory %s holds no root module file", config)
	}
	return nil
}

// copyFile copies src to dst and gives dst exactly mode, whatever the umask.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return fmt.Errorf("setting the mode of %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}

// MirrorOnlyCLIConfig is the CLI configuration that installs providers from the filesystem
// mirror at mirror only: with a provider_installation block that names only that mirror, direct
// installation is off, so a run never downloads a provider the image did not ship. It is what
// the runner writes for an image's mirror, and what hack/modulecheck checks a module with.
func MirrorOnlyCLIConfig(mirror string) string {
	quoted, _ := json.Marshal(mirror) // an HCL string literal is a JSON string here; a string always marshals
	return fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %s\n  }\n}\n", quoted)
}

// writeCLIConfig writes MirrorOnlyCLIConfig(mirror) to path.
func writeCLIConfig(path, mirror string) error {
	if err := os.WriteFile(path, []byte(MirrorOnlyCLIConfig(mirror)), 0o600); err != nil {
		return fmt.Errorf("writing the CLI configuration: %w", err)
	}
	return nil
}

// assembleRestore joins backup chunks config/restore/0..n-1 into the state file a restore pushes.
// The chunks are the state Secret's payload verbatim, so the joined bytes are gzip when they
// start with the gzip magic and plain state JSON otherwise; an encrypted state is decrypted with
// keys. The state must be format version 4.
// It returns the number of resources the state holds.
func assembleRestore(config string, chunks int, dst string, keys statecrypt.Keyring) (int, error) {
	var joined bytes.Buffer
	for i := range chunks {
		path := filepath.Join(config, restoreDirName, strconv.Itoa(i))
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("reading backup chunk %d: %w", i, err)
		}
		joined.Write(data)
	}
	state := joined.Bytes()
	if bytes.HasPrefix(state, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(state))
		if err != nil {
			return 0, fmt.Errorf("decompressing the backup: %w", err)
		}
		plain, err := io.ReadAll(io.LimitReader(zr, maxRestoreStateBytes+1))
		if err != nil {
			return 0, fmt.Errorf("decompressing the backup: %w", err)
		}
		if len(plain) > maxRestoreStateBytes {
			return 0, fmt.Errorf("the backup decompresses to more than %d bytes", maxRestoreStateBytes)
		}
		state = plain
	}
	var doc struct {
		Version       *int            `json:"version"`
		EncryptedData json.RawMessage `json:"encrypted_data"`
		Resources     []struct {
			Instances []json.RawMessage `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(state, &doc); err != nil {
		return 0, fmt.Errorf("the backup is not a state document: %w", err)
	}
	if len(doc.EncryptedData) > 0 {
		// OpenTofu's state push takes a state only in the clear; the run's keys open an
		// encrypted backup, and the push writes it under the current key.
		plain, _, err := statecrypt.Decrypt(state, keys)
		if err != nil {
			return 0, fmt.Errorf("decrypting the backup: %w", err)
		}
		doc.Version, doc.Resources, state = nil, nil, plain
		if err := json.Unmarshal(state, &doc); err != nil {
			return 0, fmt.Errorf("the decrypted backup is not a state document: %w", err)
		}
	}
	if doc.Version == nil || *doc.Version != 4 {
		return 0, errors.New("the backup is not a version 4 state")
	}
	resources := 0
	for _, r := range doc.Resources {
		resources += len(r.Instances)
	}
	if err := os.WriteFile(dst, state, 0o600); err != nil {
		return 0, fmt.Errorf("writing the assembled state: %w", err)
	}
	return resources, nil
}
