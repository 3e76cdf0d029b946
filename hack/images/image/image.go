// Package image builds captf's container images in Go, without a container runtime or a base
// image to pull: a base layer with a passwd entry for the non-root user and the CA
// certificates, then a layer of static binaries, with labels naming the version and source.
// Every timestamp is fixed and every file list sorted, so the same inputs give the same digest.
package image

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const (
	// User is the non-root user and group every image runs as.
	User = 65532
	// CACertificates is where the base layer keeps the CA bundle, where Go and OpenSSL look.
	CACertificates = "/etc/ssl/certs/ca-certificates.crt"
	// RefNameAnnotation names an image in an OCI layout's index.
	RefNameAnnotation = "org.opencontainers.image.ref.name"
)

// epoch is the time every file and image is dated: a build must not depend on when it ran.
var epoch = time.Unix(0, 0).UTC()

// Spec is one image.
type Spec struct {
	// Files maps a path in the image to the local file copied there (mode 0755).
	Files map[string]string
	// Dirs maps a path in the image to a local directory copied there with its tree: files
	// with mode 0755 when the local file is executable, else 0644, directories 0755. The
	// tree holds only regular files (a symbolic link to one is copied as the file) and
	// directories, so that it reads the same on every machine.
	Dirs map[string]string
	// Entrypoint is the image's entrypoint; a pod's command replaces it.
	Entrypoint []string
	// Version and Source are written as the OCI labels of the same names.
	Version, Source string
}

// BaseLayer holds /etc/passwd and /etc/group with root and the non-root user, a writable /tmp,
// and the CA certificates of the Mozilla trust store as Go's x/crypto ships them.
func BaseLayer() (v1.Layer, error) {
	var certs bytes.Buffer
	for root := range bundle.Roots() {
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", User, User)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", User)
	return layer([]entry{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/group", data: []byte(group), mode: 0o644},
		{name: "etc/passwd", data: []byte(passwd), mode: 0o644},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: strings.TrimPrefix(CACertificates, "/"), data: certs.Bytes(), mode: 0o644},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/nonroot/", dir: true, mode: 0o700, owner: User},
		{name: "tmp/", dir: true, mode: 0o1777},
	})
}

// Build builds the image of spec on the base layer, for linux/amd64: one layer holds every
// file of Files and Dirs, with the directories above them.
func Build(base v1.Layer, spec Spec) (v1.Image, error) {
	var files []entry
	dirs := map[string]bool{}
	// addParents adds the directories above name once, as a layer lists them before their files.
	addParents := func(name string) {
		for dir := path.Dir(name); dir != "." && !dirs[dir]; dir = path.Dir(dir) {
			dirs[dir] = true
			files = append(files, entry{name: dir + "/", dir: true, mode: 0o755})
		}
	}
	for _, dst := range slices.Sorted(maps.Keys(spec.Files)) {
		data, err := os.ReadFile(spec.Files[dst])
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(path.Clean(dst), "/")
		addParents(name)
		files = append(files, entry{name: name, data: data, mode: 0o755})
	}
	for _, dst := range slices.Sorted(maps.Keys(spec.Dirs)) {
		tree, err := dirEntries(strings.TrimPrefix(path.Clean(dst), "/"), spec.Dirs[dst])
		if err != nil {
			return nil, err
		}
		for _, e := range tree {
			name := strings.TrimSuffix(e.name, "/")
			if e.dir && dirs[name] {
				continue
			}
			addParents(name)
			if e.dir {
				dirs[name] = true
			}
			files = append(files, e)
		}
	}
	slices.SortFunc(files, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	binaries, err := layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, base, binaries)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.User = fmt.Sprintf("%d:%d", User, User)
	cfg.Config.Entrypoint = spec.Entrypoint
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/", "HOME=/home/nonroot", "SSL_CERT_FILE=" + CACertificates}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.version": spec.Version,
		"org.opencontainers.image.source":  spec.Source,
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.MediaType(img, types.OCIManifestSchema1), nil
}

// WriteLayout writes the images into an OCI image layout at dir, each named by its reference
// in the index, in reference order.
func WriteLayout(dir string, images map[string]v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, ref := range slices.Sorted(maps.Keys(images)) {
		if err := p.AppendImage(images[ref], layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})); err != nil {
			return fmt.Errorf("writing %s: %w", ref, err)
		}
	}
	return nil
}

// dirEntries lists the local directory src as entries under the image path dst, the directory
// itself included.
func dirEntries(dst, src string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			out = append(out, entry{name: name + "/", dir: true, mode: 0o755})
			return nil
		}
		// A symlink to a file is copied as the file it names: a link out of the tree would
		// dangle in the image. Anything else (a link to a directory, a device) would make the
		// image depend on this machine.
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s: only regular files, links to them and directories go into an image", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		out = append(out, entry{name: name, data: data, mode: mode})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("copying directory %s: %w", src, err)
	}
	return out, nil
}

type entry struct {
	name  string
	data  []byte
	dir   bool
	mode  int64
	owner int
}

// layer makes a gzip-compressed layer of the entries, in the order given.
func layer(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Uid: e.owner, Gid: e.owner, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
