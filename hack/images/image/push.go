package image

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push pushes each image to the registry its reference names, in reference order. A registry on
// a loopback address (localhost, 127.0.0.0/8, ::1) is spoken to over plain HTTP, as a local
// test registry serves; any other over HTTPS. opts are added to the remote.Write options
// (authentication, a transport).
func Push(ctx context.Context, images map[string]v1.Image, opts ...remote.Option) error {
	for _, ref := range slices.Sorted(maps.Keys(images)) {
		r, err := ParseReference(ref)
		if err != nil {
			return err
		}
		if err := remote.Write(r, images[ref], append([]remote.Option{remote.WithContext(ctx)}, opts...)...); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
	}
	return nil
}

// Retag returns the images under the repository prefix repository instead of theirs: each
// reference keeps its last path element (name and tag), so ghcr.io/captf/captf-manager:v1
// becomes 127.0.0.1:5000/captf-manager:v1 for the prefix "127.0.0.1:5000/".
func Retag(images map[string]v1.Image, repository string) map[string]v1.Image {
	out := make(map[string]v1.Image, len(images))
	for ref, img := range images {
		out[repository+ref[strings.LastIndex(ref, "/")+1:]] = img
	}
	return out
}

// ParseReference parses an image reference, marking a loopback registry insecure (plain HTTP).
func ParseReference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	if LoopbackRegistry(r.Context().RegistryStr()) {
		r, err = name.ParseReference(ref, name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("image reference %q: %w", ref, err)
		}
	}
	return r, nil
}

// LoopbackRegistry reports whether a registry host (with an optional port) is on a loopback
// address: localhost, 127.0.0.0/8 or ::1.
func LoopbackRegistry(registry string) bool {
	host := registry
	if h, _, err := net.SplitHostPort(registry); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
