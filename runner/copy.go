package runner

import (
	"fmt"
	"os"
	"path/filepath"
)

// Copy installs the runner binary src at dest with mode 0755. It writes a temporary file next
// to dest and renames it, so a reader of dest never sees half a binary.
func Copy(src, dest string) error {
	if info, err := os.Stat(dest); err == nil && info.IsDir() {
		return fmt.Errorf("%s is a directory", dest)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*")
	if err != nil {
		return fmt.Errorf("creating a temporary file next to %s: %w", dest, err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName) // a no-op after the rename
	if err := copyFile(src, tmpName, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmpName, dest); err != nil {
		return fmt.Errorf("installing %s: %w", dest, err)
	}
	return nil
}
