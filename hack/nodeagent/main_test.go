package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/captf/captf/test/nodeagent"
)

func TestParseImage(t *testing.T) {
	ref, img, err := parseImage("captf/runner:dev,/runner=/repo/bin/runner")
	if err != nil || ref != "captf/runner:dev" || img.Paths["/runner"] != "/repo/bin/runner" {
		t.Errorf("parseImage = %q, %+v, %v", ref, img, err)
	}
	ref, img, err = parseImage("reg.example/m@sha256:abc,/captf/module=mod,/captf/runtime=/bin/tofu")
	if err != nil || ref != "reg.example/m@sha256:abc" || len(img.Paths) != 2 || !filepath.IsAbs(img.Paths["/captf/module"]) {
		t.Errorf("parseImage = %q, %+v, %v", ref, img, err)
	}
	for _, bad := range []string{"", "ref", ",/a=/b", "ref,relative=/b", "ref,/a", "ref,/a="} {
		if _, _, err := parseImage(bad); err == nil {
			t.Errorf("parseImage(%q) accepted", bad)
		}
	}
}

func TestLoadImages(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "images.yaml")
	data := `
captf/runner:dev:
  paths:
    /runner: bin/runner
captf-modules/noop:v1:
  paths:
    /captf/module: /abs/module
  command: ["/captf/runtime", "version"]
`
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got := map[string]nodeagent.Image{}
	if err := loadImages(file, got); err != nil {
		t.Fatal(err)
	}
	want := map[string]nodeagent.Image{
		"captf/runner:dev":      {Paths: map[string]string{"/runner": filepath.Join(dir, "bin/runner")}},
		"captf-modules/noop:v1": {Paths: map[string]string{"/captf/module": "/abs/module"}, Command: []string{"/captf/runtime", "version"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loadImages = %+v, want %+v", got, want)
	}
	if err := os.WriteFile(file, []byte("ref:\n  pathz: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := loadImages(file, map[string]nodeagent.Image{}); err == nil {
		t.Error("an unknown field was accepted")
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	if err := run([]string{"--image=nope"}); err == nil {
		t.Error("a bad --image was accepted")
	}
	if err := run([]string{"extra"}); err == nil {
		t.Error("a positional argument was accepted")
	}
	if err := run(nil); err == nil {
		t.Error("no images was accepted")
	}
}
