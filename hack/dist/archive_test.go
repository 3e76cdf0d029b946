package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"
)

// entry is what a test reads back from an archive for one file.
type entry struct {
	Name     string
	Mode     fs.FileMode
	Modified time.Time
	Data     string
}

func readTarGz(t *testing.T, data []byte) ([]entry, *gzip.Header, []*tar.Header) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	header := gz.Header
	tr := tar.NewReader(gz)
	var entries []entry
	var headers []*tar.Header
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, hdr)
		entries = append(entries, entry{hdr.Name, fs.FileMode(hdr.Mode), hdr.ModTime.UTC(), string(body)})
	}
	return entries, &header, headers
}

func readZip(t *testing.T, data []byte) ([]entry, *zip.Reader) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var entries []entry
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry{f.Name, f.Mode(), f.Modified.UTC(), string(body)})
	}
	return entries, zr
}

var sample = []File{
	{Name: "kubectl_complete-captf", Mode: 0o755, Data: []byte("#!/bin/sh\n")},
	{Name: "LICENSE", Mode: 0o644, Data: []byte("license text\n")},
	{Name: "kubectl-captf", Mode: 0o755, Data: bytes.Repeat([]byte("binary"), 1000)},
}

// wantSample is sample as both archives must hold it: sorted by name, dated epoch, with the
// modes given.
var wantSample = []entry{
	{"LICENSE", 0o644, epoch, "license text\n"},
	{"kubectl-captf", 0o755, epoch, strings.Repeat("binary", 1000)},
	{"kubectl_complete-captf", 0o755, epoch, "#!/bin/sh\n"},
}

func TestWriteTarGz(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTarGz(&buf, sample); err != nil {
		t.Fatal(err)
	}
	entries, gzHeader, headers := readTarGz(t, buf.Bytes())

	rules := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"entries are sorted by name, dated epoch, with their modes and contents", func(t *testing.T) {
			if !slices.Equal(entries, wantSample) {
				t.Errorf("entries:\n got %v\nwant %v", entries, wantSample)
			}
		}},
		{"entries are regular files owned by uid and gid 0 with no owner names, in ustar", func(t *testing.T) {
			for _, h := range headers {
				if h.Typeflag != tar.TypeReg || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.Format != tar.FormatUSTAR {
					t.Errorf("%s: type %c uid %d gid %d uname %q gname %q format %v", h.Name, h.Typeflag, h.Uid, h.Gid, h.Uname, h.Gname, h.Format)
				}
			}
		}},
		{"the gzip header has no name, comment or time", func(t *testing.T) {
			if gzHeader.Name != "" || gzHeader.Comment != "" || !gzHeader.ModTime.IsZero() || len(gzHeader.Extra) != 0 {
				t.Errorf("gzip header %+v", gzHeader)
			}
		}},
		{"the order files are given in does not change a byte", func(t *testing.T) {
			reversed := slices.Clone(sample)
			slices.Reverse(reversed)
			var again bytes.Buffer
			if err := WriteTarGz(&again, reversed); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Error("the same files in another order give another archive")
			}
		}},
	}
	for _, r := range rules {
		t.Run(r.name, r.check)
	}
}

func TestWriteZip(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteZip(&buf, sample); err != nil {
		t.Fatal(err)
	}
	entries, zr := readZip(t, buf.Bytes())

	rules := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"entries are sorted by name, dated epoch, with their modes and contents", func(t *testing.T) {
			if !slices.Equal(entries, wantSample) {
				t.Errorf("entries:\n got %v\nwant %v", entries, wantSample)
			}
		}},
		{"entries are deflated and the archive has no comment", func(t *testing.T) {
			for _, f := range zr.File {
				if f.Method != zip.Deflate || f.Comment != "" {
					t.Errorf("%s: method %d comment %q", f.Name, f.Method, f.Comment)
				}
			}
			if zr.Comment != "" {
				t.Errorf("archive comment %q", zr.Comment)
			}
		}},
		{"the order files are given in does not change a byte", func(t *testing.T) {
			reversed := slices.Clone(sample)
			slices.Reverse(reversed)
			var again bytes.Buffer
			if err := WriteZip(&again, reversed); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Error("the same files in another order give another archive")
			}
		}},
	}
	for _, r := range rules {
		t.Run(r.name, r.check)
	}
}

func TestArchivesRefuseBadEntries(t *testing.T) {
	cases := []struct {
		name  string
		files []File
		want  string
	}{
		{"no file", nil, "at least one file"},
		{"an empty name", []File{{Name: "", Mode: 0o644}}, "not a plain file name"},
		{"a name with a directory", []File{{Name: "bin/kubectl-captf", Mode: 0o755}}, "not a plain file name"},
		{"a name climbing out", []File{{Name: "..", Mode: 0o755}}, "not a plain file name"},
		{"a Windows path", []File{{Name: `bin\kubectl-captf.exe`, Mode: 0o755}}, "not a plain file name"},
		{"a name given twice", []File{{Name: "a", Mode: 0o644}, {Name: "a", Mode: 0o755}}, "given twice"},
		{"a mode beyond permissions", []File{{Name: "a", Mode: fs.ModeSymlink | 0o777}}, "only permission bits"},
	}
	writers := map[string]func(io.Writer, []File) error{"tar.gz": WriteTarGz, "zip": WriteZip}
	for _, c := range cases {
		for format, write := range writers {
			t.Run(c.name+" ("+format+")", func(t *testing.T) {
				err := write(io.Discard, c.files)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %v, want one saying %q", err, c.want)
				}
			})
		}
	}
}
