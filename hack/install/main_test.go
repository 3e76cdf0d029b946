package main

import (
	"strings"
	"testing"

	"github.com/captf/captf/hack/manifest"
)

// Both installs render with every captf image, and the runner image the controller gives its
// Jobs, renamed to the registry and version given; nothing keeps the development name.
func TestRenderNamesTheImagesAsPushed(t *testing.T) {
	for _, overlay := range []string{"self-managed", "cert-manager"} {
		data, err := render("../../artifacts", overlay, "registry.example.com/team/", "v0.1.0")
		if err != nil {
			t.Fatal(err)
		}
		objs, err := manifest.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) < 30 {
			t.Errorf("%s: %d objects", overlay, len(objs))
		}
		text := string(data)
		for _, want := range []string{
			"image: registry.example.com/team/captf-manager:v0.1.0",
			"image: registry.example.com/team/captf-apiserver:v0.1.0",
			"value: registry.example.com/team/captf-manager:v0.1.0",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: no %q", overlay, want)
			}
		}
		if strings.Contains(text, manifest.DevRepository) {
			t.Errorf("%s: an image keeps the name %s", overlay, manifest.DevRepository)
		}
	}
}
