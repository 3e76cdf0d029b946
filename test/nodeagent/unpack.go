package nodeagent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// OCI whiteouts: a file .wh.<name> deletes <name> of the lower layers, and .wh..wh..opq hides
// everything the lower layers have in its directory.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = whiteoutPrefix + whiteoutPrefix + ".opq"
)

// keptModeBits are the mode bits an unpacked file keeps; owners are not kept, since the agent
// is not root.
const keptModeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// unpackImage writes img's file system into the directory dir, which it creates: its layers in
// order, lowest first, with their whiteouts applied. Every write goes through an os.Root, so no
// entry reaches outside dir: a name with .. that leaves the root, a hard link to outside, and a
// write below a symlink that points outside (or is absolute, as os.Root never follows those)
// fail the unpacking. Symlinks are created as they are, whatever their target.
func unpackImage(img v1.Image, dir string) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		err = applyLayer(root, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

// applyLayer unpacks one layer's tar stream onto root.
func applyLayer(root *os.Root, r io.Reader) error {
	tr := tar.NewReader(r)
	// written holds the paths this layer created and their parents: whiteouts spare them, as
	// a whiteout only hides what lower layers have.
	written := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if err := applyEntry(root, tr, h, name, written); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}

// entryName cleans a tar entry's name into a path relative to the root ("." for the root
// itself), refusing one that leaves it. A leading / is dropped, as tar does.
func entryName(n string) (string, error) {
	clean := path.Clean(strings.TrimLeft(n, "/"))
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("entry %q leaves the image's root", n)
	}
	return clean, nil
}

// markWritten records name and its parents as written by the current layer.
func markWritten(written map[string]bool, name string) {
	for p := name; p != "." && p != "/" && !written[p]; p = path.Dir(p) {
		written[p] = true
	}
}

func applyEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string, written map[string]bool) error {
	dir, base := path.Split(name)
	dir = path.Clean("./" + dir)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return applyWhiteout(root, dir, base, written)
	}
	mode := h.FileInfo().Mode() & keptModeBits
	if name == "." {
		if h.Typeflag == tar.TypeDir {
			return root.Chmod(".", mode|0o700)
		}
		return nil
	}
	if dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	markWritten(written, name)
	// An entry replaces what is at its path, except that a directory over a directory merges.
	// Removing first also means a symlink at the path is replaced, never written through.
	if fi, err := root.Lstat(name); err == nil && (!fi.IsDir() || h.Typeflag != tar.TypeDir) {
		if err := root.RemoveAll(name); err != nil {
			return err
		}
	}
	return writeEntry(root, tr, h, name, mode)
}

// applyWhiteout applies the whiteout file base in dir.
func applyWhiteout(root *os.Root, dir, base string, written map[string]bool) error {
	switch {
	case base == whiteoutOpaque:
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		markWritten(written, dir)
		return removeLower(root, dir, written)
	case strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix):
		// Other .wh..wh. entries are aufs bookkeeping, not files.
		return nil
	}
	target := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
	if written[target] {
		return nil
	}
	if err := root.RemoveAll(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeEntry creates the entry at name, where nothing is (or a directory, for a directory).
func writeEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string, mode fs.FileMode) error {
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		// The owner keeps write access, so that later layers and the agent can change or
		// remove what is inside.
		return root.Chmod(name, mode|0o700)
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return root.Chmod(name, mode)
	case tar.TypeSymlink:
		return root.Symlink(h.Linkname, name)
	case tar.TypeLink:
		target, err := entryName(h.Linkname)
		if err != nil {
			return err
		}
		return root.Link(target, name)
	default:
		// Devices and FIFOs need root; a process of the agent has the host's /dev anyway.
		return nil
	}
}

// removeLower removes what lower layers left below dir: every path this layer has not written.
func removeLower(root *os.Root, dir string, written map[string]bool) error {
	f, err := root.Open(dir)
	if err != nil {
		return err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		switch {
		case !written[p]:
			if err := root.RemoveAll(p); err != nil {
				return err
			}
		case e.IsDir():
			if err := removeLower(root, p, written); err != nil {
				return err
			}
		}
	}
	return nil
}
