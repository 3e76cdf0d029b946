package main

import (
	"archive/tar"
	"archive/zip"
	"cmp"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"
)

// epoch dates every entry of every archive: the earliest time a zip entry can hold (MS-DOS
// dates start in 1980), used for tar too so that both formats say the same.
var epoch = time.Date(1980, time.January, 1, 0, 0, 0, 0, time.UTC)

// File is one entry of an archive: a regular file at the archive's root.
type File struct {
	// Name is the entry's name, without a directory.
	Name string
	// Mode is the entry's permission bits, 0o755 for an executable.
	Mode fs.FileMode
	// Data is the file's content.
	Data []byte
}

// sortedFiles returns files sorted by name, after checking that each name is a plain file
// name given once: krew refuses entries that climb out of its directory, and a name given
// twice would make what an install holds depend on the extractor.
func sortedFiles(files []File) ([]File, error) {
	if len(files) == 0 {
		return nil, errors.New("an archive needs at least one file")
	}
	sorted := slices.SortedFunc(slices.Values(files), func(a, b File) int { return cmp.Compare(a.Name, b.Name) })
	for i, f := range sorted {
		if f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, `/\`) {
			return nil, fmt.Errorf("archive entry %q is not a plain file name", f.Name)
		}
		if f.Mode&^fs.ModePerm != 0 {
			return nil, fmt.Errorf("archive entry %q has mode %v: only permission bits are allowed", f.Name, f.Mode)
		}
		if i > 0 && sorted[i-1].Name == f.Name {
			return nil, fmt.Errorf("archive entry %q is given twice", f.Name)
		}
	}
	return sorted, nil
}

// WriteTarGz writes files as a gzip-compressed tar archive that depends on nothing but the
// files: entries sorted by name, dated epoch, owned by uid and gid 0 with no user or group
// name, in the ustar format, and a gzip header with neither a name nor a time.
func WriteTarGz(w io.Writer, files []File) error {
	sorted, err := sortedFiles(files)
	if err != nil {
		return err
	}
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	tw := tar.NewWriter(gz)
	for _, f := range sorted {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     f.Name,
			Mode:     int64(f.Mode),
			Size:     int64(len(f.Data)),
			ModTime:  epoch,
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("tar header of %s: %w", f.Name, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return fmt.Errorf("tar entry %s: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	return nil
}

// WriteZip writes files as a deflated zip archive that depends on nothing but the files:
// entries sorted by name, dated epoch, with Unix permission bits (which krew gives the
// extracted files), and no comment.
func WriteZip(w io.Writer, files []File) error {
	sorted, err := sortedFiles(files)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.BestCompression)
	})
	for _, f := range sorted {
		hdr := &zip.FileHeader{Name: f.Name, Method: zip.Deflate, Modified: epoch}
		hdr.SetMode(f.Mode)
		ew, err := zw.CreateHeader(hdr)
		if err != nil {
			return fmt.Errorf("zip header of %s: %w", f.Name, err)
		}
		if _, err := ew.Write(f.Data); err != nil {
			return fmt.Errorf("zip entry %s: %w", f.Name, err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("zip: %w", err)
	}
	return nil
}
