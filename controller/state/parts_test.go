package state

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/captf/captf/jobs"
)

// chunkedState is a state whose gzip'd form needs two parts, split as the runner splits it:
// the head with the manifest and the parts in slot b.
func chunkedState(t *testing.T) (head *corev1.Secret, parts []client.Object) {
	t.Helper()
	// Random characters in an output compress to 6 bits each, so the gzip'd state passes one part.
	noise := make([]byte, jobs.MaxStatePartBytes*3/2)
	_, _ = rand.Read(noise)
	doc := []byte(`{"version":4,"serial":3,"lineage":"l","outputs":{"noise":{"value":"` + base64url(noise) + `"}},"resources":[]}`)
	payload, err := Compress(doc)
	if err != nil {
		t.Fatal(err)
	}
	chunks, manifest, err := jobs.SplitState(payload, "b")
	if err != nil || len(chunks) != 2 {
		t.Fatalf("split into %d parts: %v", len(chunks), err)
	}
	const suffix = "0123456789abcdef-c"
	head = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: SecretName(suffix)}, Data: map[string][]byte{dataKey: manifest}}
	for i, c := range chunks {
		parts = append(parts, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: jobs.StatePartName(suffix, "b", i)}, Data: map[string][]byte{dataKey: c}})
	}
	return head, parts
}

func base64url(b []byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = alphabet[c&63]
	}
	return string(out)
}

func TestReadJoinsAStateKeptInParts(t *testing.T) {
	tests := []struct {
		name  string
		parts func([]client.Object) []client.Object
		fail  bool
		want  error
	}{
		{"the parts the manifest names are joined into the state", func(p []client.Object) []client.Object { return p }, false, nil},
		{"a missing part is a corrupt state", func(p []client.Object) []client.Object { return p[:1] }, false, ErrCorrupt},
		{"a part that differs from the manifest's digest is a corrupt state", func(p []client.Object) []client.Object {
			p[1].(*corev1.Secret).Data[dataKey][0] ^= 0xff
			return p
		}, false, ErrCorrupt},
		{"a part that cannot be read is a failed read, not a state error", func(p []client.Object) []client.Object { return p }, true, ErrPartsUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			head, parts := chunkedState(t)
			b := fake.NewClientBuilder().WithObjects(tt.parts(parts)...)
			if tt.fail {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return errors.New("connection refused")
				}})
			}
			s, err := Read(context.Background(), b.Build(), head, nil)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if tt.want == nil && (s.Serial != 3 || len(s.Outputs["noise"]) < jobs.MaxStatePartBytes) {
				t.Fatalf("state = serial %d, noise output of %d bytes", s.Serial, len(s.Outputs["noise"]))
			}
		})
	}
}

func TestAManifestOutsideWhatTheRunnerWritesIsCorrupt(t *testing.T) {
	for name, manifest := range map[string]string{
		"an unknown slot":           `{"captfStateParts":{"slot":"c","count":1,"bytes":1,"digest":"sha256:x"}}`,
		"more parts than allowed":   `{"captfStateParts":{"slot":"a","count":9,"bytes":1,"digest":"sha256:x"}}`,
		"more bytes than its parts": `{"captfStateParts":{"slot":"a","count":1,"bytes":2000000,"digest":"sha256:x"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			data, err := Compress([]byte(manifest))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Read(context.Background(), fake.NewClientBuilder().Build(), rawSecret(data, ""), nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}
