package image

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushedImagesCanBePulledBackByDigest(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := build(t, t.TempDir())
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	images := Retag(map[string]v1.Image{"ghcr.io/captf/captf-manager:v0.1.0": img}, host+"/prefix/")
	if err := Push(context.Background(), images); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{host + "/prefix/captf-manager:v0.1.0", host + "/prefix/captf-manager@" + want.String()} {
		r, err := ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Get(r)
		if err != nil {
			t.Fatalf("pulling %s: %v", ref, err)
		}
		if desc.Digest != want {
			t.Errorf("%s has digest %s, want %s", ref, desc.Digest, want)
		}
	}
}

func TestRetagKeepsNameAndTag(t *testing.T) {
	images := map[string]v1.Image{"ghcr.io/captf/captf-manager:v1": nil, "captf-apiserver:v1": nil}
	got := Retag(images, "127.0.0.1:5000/")
	for _, want := range []string{"127.0.0.1:5000/captf-manager:v1", "127.0.0.1:5000/captf-apiserver:v1"} {
		if _, ok := got[want]; !ok {
			t.Errorf("no %s in %v", want, got)
		}
	}
}

func TestLoopbackRegistriesArePlainHTTP(t *testing.T) {
	for _, rule := range []struct {
		registry string
		loopback bool
	}{
		{"127.0.0.1:5000", true},
		{"127.0.0.2", true},
		{"localhost:5000", true},
		{"[::1]:5000", true},
		{"ghcr.io", false},
		{"203.0.113.5:5000", false},
		{"localhost.example:5000", false},
		{"index.docker.io", false},
	} {
		if got := LoopbackRegistry(rule.registry); got != rule.loopback {
			t.Errorf("LoopbackRegistry(%q) = %v", rule.registry, got)
		}
		r, err := ParseReference(rule.registry + "/x:v1")
		if err != nil {
			t.Fatal(err)
		}
		if scheme := r.Context().Scheme(); (scheme == "http") != rule.loopback {
			t.Errorf("%s: scheme %s", rule.registry, scheme)
		}
	}
}
