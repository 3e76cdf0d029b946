package nodeagent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// tarEntry is one entry of a test layer: a file (data), a directory (name ending in /), a
// symlink or a hard link.
type tarEntry struct {
	name, data, symlink, hardlink string
	mode                          int64
}

func file(name, data string) tarEntry { return tarEntry{name: name, data: data, mode: 0o644} }
func dir(name string) tarEntry        { return tarEntry{name: name, mode: 0o755} }
func symlink(name, target string) tarEntry {
	return tarEntry{name: name, symlink: target, mode: 0o777}
}

// testLayer makes a layer of the entries, in the order given.
func testLayer(t *testing.T, entries ...tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode}
		switch {
		case e.symlink != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.symlink
		case e.hardlink != "":
			h.Typeflag, h.Linkname = tar.TypeLink, e.hardlink
		case e.name[len(e.name)-1] == '/':
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testImage(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func readFile(p string) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(data)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestUnpackAppliesWhiteouts(t *testing.T) {
	lower := func(t *testing.T) v1.Layer {
		return testLayer(t, dir("d/"), file("d/x", "x1"), file("d/y", "y1"), dir("d/sub/"), file("d/sub/old", "old"), file("top", "top"))
	}
	for _, rule := range []struct {
		name  string
		upper []tarEntry
		check func(root string) bool
	}{
		{"a whiteout deletes the lower file", []tarEntry{file("d/.wh.x", "")},
			func(root string) bool {
				return !exists(filepath.Join(root, "d/x")) && readFile(filepath.Join(root, "d/y")) == "y1"
			}},
		{"a whiteout deletes a lower directory with its tree", []tarEntry{file(".wh.d", "")},
			func(root string) bool { return !exists(filepath.Join(root, "d")) && exists(filepath.Join(root, "top")) }},
		{"a whiteout spares its own layer's file", []tarEntry{file("d/x", "x2"), file("d/.wh.x", "")},
			func(root string) bool { return readFile(filepath.Join(root, "d/x")) == "x2" }},
		{"the whiteout file itself is not written", []tarEntry{file("d/.wh.x", "")},
			func(root string) bool { return !exists(filepath.Join(root, "d/.wh.x")) }},
		{"an opaque directory hides all lower content", []tarEntry{dir("d/"), file("d/.wh..wh..opq", ""), file("d/new", "new")},
			func(root string) bool {
				return !exists(filepath.Join(root, "d/x")) && !exists(filepath.Join(root, "d/sub")) &&
					readFile(filepath.Join(root, "d/new")) == "new" && exists(filepath.Join(root, "top"))
			}},
		{"an opaque marker after its layer's entries keeps them", []tarEntry{file("d/sub/new", "new"), file("d/.wh..wh..opq", "")},
			func(root string) bool {
				return readFile(filepath.Join(root, "d/sub/new")) == "new" && !exists(filepath.Join(root, "d/sub/old")) && !exists(filepath.Join(root, "d/x"))
			}},
		{"an upper file replaces the lower one", []tarEntry{file("d/x", "x2")},
			func(root string) bool {
				return readFile(filepath.Join(root, "d/x")) == "x2" && readFile(filepath.Join(root, "d/y")) == "y1"
			}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "rootfs")
			if err := unpackImage(testImage(t, lower(t), testLayer(t, rule.upper...)), root); err != nil {
				t.Fatal(err)
			}
			if !rule.check(root) {
				t.Error("does not hold")
			}
		})
	}
}

func TestUnpackKeepsModesSymlinksAndHardlinks(t *testing.T) {
	root := filepath.Join(t.TempDir(), "rootfs")
	img := testImage(t,
		testLayer(t,
			tarEntry{name: "bin/", mode: 0o750},
			tarEntry{name: "bin/run", data: "#!/bin/sh\n", mode: 0o751},
			tarEntry{name: "ro", data: "ro", mode: 0o444},
			symlink("etc-passwd", "/etc/passwd"),
			symlink("usr-bin", "bin"),
			tarEntry{name: "bin/run-again", hardlink: "bin/run"},
		),
		// A later layer writes through a relative symlink that stays inside the root.
		testLayer(t, file("usr-bin/added", "added"), tarEntry{name: "ro", data: "rw", mode: 0o644}),
	)
	if err := unpackImage(img, root); err != nil {
		t.Fatal(err)
	}
	mode := func(p string) fs.FileMode {
		info, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			return 0
		}
		return info.Mode()
	}
	inode := func(p string) uint64 {
		info, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			return 0
		}
		return info.Sys().(*syscall.Stat_t).Ino
	}
	link, _ := os.Readlink(filepath.Join(root, "etc-passwd"))
	for _, rule := range []struct {
		name string
		ok   bool
	}{
		{"a file keeps its mode", mode("bin/run").Perm() == 0o751},
		{"a directory keeps its mode", mode("bin").Perm() == 0o750 && mode("bin").IsDir()},
		{"an absolute symlink is kept as a symlink", mode("etc-passwd")&fs.ModeSymlink != 0 && link == "/etc/passwd"},
		{"a hard link shares its target's inode", inode("bin/run") != 0 && inode("bin/run") == inode("bin/run-again")},
		{"a write through a symlink inside the root lands inside", readFile(filepath.Join(root, "bin/added")) == "added"},
		{"a read-only file is replaced by a later layer", readFile(filepath.Join(root, "ro")) == "rw" && mode("ro").Perm() == 0o644},
	} {
		if !rule.ok {
			t.Errorf("%s: does not hold", rule.name)
		}
	}
}

func TestUnpackRefusesEntriesOutsideTheRoot(t *testing.T) {
	for _, rule := range []struct {
		name   string
		layers func(outside string) [][]tarEntry
	}{
		{"a name with .. leaving the root", func(string) [][]tarEntry {
			return [][]tarEntry{{file("../outside/file", "x")}}
		}},
		{"a name that leaves the root after descending", func(string) [][]tarEntry {
			return [][]tarEntry{{file("a/../../outside/file", "x")}}
		}},
		{"a write below an absolute symlink", func(outside string) [][]tarEntry {
			return [][]tarEntry{{symlink("link", outside)}, {file("link/file", "x")}}
		}},
		{"a write below a relative symlink leaving the root", func(string) [][]tarEntry {
			return [][]tarEntry{{symlink("up", "../../outside")}, {file("up/file", "x")}}
		}},
		{"a hard link to a file outside the root", func(string) [][]tarEntry {
			return [][]tarEntry{{tarEntry{name: "stolen", hardlink: "../outside/secret"}}}
		}},
		{"a hard link through a symlink leaving the root", func(outside string) [][]tarEntry {
			return [][]tarEntry{{symlink("link", outside)}, {tarEntry{name: "stolen", hardlink: "link/secret"}}}
		}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			if err := os.MkdirAll(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			var layers []v1.Layer
			for _, entries := range rule.layers(outside) {
				layers = append(layers, testLayer(t, entries...))
			}
			root := filepath.Join(base, "images", "rootfs")
			err := unpackImage(testImage(t, layers...), root)
			if err == nil {
				t.Error("unpacking succeeded")
			}
			t.Log(err)
			if exists(filepath.Join(outside, "file")) {
				t.Error("a file was written outside the root")
			}
			if exists(filepath.Join(root, "stolen")) {
				t.Error("a hard link to outside the root was made")
			}
		})
	}
}

// An entry at the path of a symlink replaces the symlink: it never writes through it.
func TestUnpackReplacesASymlinkRatherThanWritingThroughIt(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "target")
	if err := os.WriteFile(target, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "rootfs")
	img := testImage(t, testLayer(t, symlink("s", target)), testLayer(t, file("s", "image")))
	if err := unpackImage(img, root); err != nil {
		t.Fatal(err)
	}
	if got := readFile(target); got != "host" {
		t.Errorf("the host file now holds %q", got)
	}
	info, err := os.Lstat(filepath.Join(root, "s"))
	if err != nil || !info.Mode().IsRegular() || readFile(filepath.Join(root, "s")) != "image" {
		t.Errorf("s is %v, %v", info, err)
	}
}

func TestEntryNames(t *testing.T) {
	for _, rule := range []struct {
		name, in, want string
		fails          bool
	}{
		{"a relative name stays", "a/b", "a/b", false},
		{"a leading ./ goes", "./a/b/", "a/b", false},
		{"a leading / goes, as tar does", "/etc/passwd", "etc/passwd", false},
		{"the root is .", "./", ".", false},
		{".. inside the root is resolved", "a/../b", "b", false},
		{".. leaving the root fails", "../b", "", true},
		{".. leaving the root later fails", "a/../../b", "", true},
	} {
		got, err := entryName(rule.in)
		if (err != nil) != rule.fails || got != rule.want {
			t.Errorf("%s: entryName(%q) = %q, %v", rule.name, rule.in, got, err)
		}
	}
	if _, err := entryName("../x"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the error does not say the entry leaves the root: %v", err)
	}
}
