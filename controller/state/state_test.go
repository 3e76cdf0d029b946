package state

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const appliedState = `{"version":4,"terraform_version":"1.10.10","serial":7,"lineage":"abc",
"outputs":{"workspace":{"value":{"provider_id":"local://m1"},"type":"object","sensitive":true}},
"resources":[
 {"mode":"managed","type":"terraform_data","name":"a","instances":[{"attributes":{}}]},
 {"mode":"managed","type":"terraform_data","name":"b","instances":[{"attributes":{}},{"attributes":{}}]},
 {"mode":"data","type":"x","name":"d","instances":[{"attributes":{}}]}]}`

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		secret     *corev1.Secret
		wantErr    error
		wantExists bool
		wantRes    int
		wantHash   string
	}{
		{"no Secret is no state", nil, nil, false, 0, ""},
		{"a Secret without state data is no state", secret(t, nil, ""), nil, false, 0, ""},
		{"managed resource instances are counted, data sources are not", secret(t, []byte(appliedState), "h1:x"), nil, true, 3, "h1:x"},
		{"a state without the inputs hash annotation has none", secret(t, []byte(appliedState), ""), nil, true, 3, ""},
		{"an empty state after destroy exists and is empty", secret(t, []byte(`{"version":4,"serial":9,"lineage":"abc","resources":[]}`), "h1:x"), nil, true, 0, "h1:x"},
		{"data that is not gzip is corrupt", rawSecret([]byte("not gzip"), ""), ErrCorrupt, false, 0, ""},
		{"gzip of something not JSON is corrupt", secret(t, []byte("{"), ""), ErrCorrupt, false, 0, ""},
		{"an encrypted state is reported as encrypted", secret(t, []byte(`{"serial":1,"lineage":"l","meta":{"key_provider.pbkdf2.k":"e30="},"encrypted_data":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","encryption_version":"v0"}`), ""), ErrEncrypted, false, 0, ""},
		{"a state of another format version is unsupported", secret(t, []byte(`{"version":3}`), ""), ErrUnsupportedVersion, false, 0, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s, err := Read(context.Background(), nil, tc.secret, nil)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if s.Exists != tc.wantExists || s.Resources != tc.wantRes || s.InputsHash != tc.wantHash {
				t.Fatalf("state = %+v", s)
			}
			if tc.wantErr == nil && s.Empty() != (tc.wantRes == 0) {
				t.Fatalf("Empty() = %v with %d resources", s.Empty(), tc.wantRes)
			}
		})
	}
}

// TestReadBoundsTheDecompressedState: a state Secret is written by whoever may write Secrets in
// the namespace, and a small one can decompress to gigabytes. Read stops at maxStateBytes and
// reports anything larger as corrupt and too large, which makes StateReadable False; a state of
// exactly the bound is read.
func TestReadBoundsTheDecompressedState(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		secret  func(t *testing.T) *corev1.Secret
		wantErr []error
	}{
		{"a Secret's worth of gzip members that decompress to 900 MiB is too large", func(t *testing.T) *corev1.Secret {
			member := gzipStream(t, 1<<20, []byte{0}, gzip.BestCompression)
			bomb := bytes.Repeat(member, 900) // a gzip reader reads the members one after another
			if len(bomb) > 1<<20 {
				t.Fatalf("the bomb takes %d bytes, more than a Secret holds", len(bomb))
			}
			return rawSecret(bomb, "")
		}, []error{ErrCorrupt, ErrTooLarge}},
		{"a state one byte past the bound is too large", func(t *testing.T) *corev1.Secret {
			return rawSecret(gzipStream(t, maxStateBytes+1, paddedState, gzip.BestSpeed), "")
		}, []error{ErrCorrupt, ErrTooLarge}},
		{"a state of exactly the bound is read", func(t *testing.T) *corev1.Secret {
			return rawSecret(gzipStream(t, maxStateBytes, paddedState, gzip.BestSpeed), "")
		}, nil},
		{"a gzip stream cut short is corrupt, not too large", func(t *testing.T) *corev1.Secret {
			data := gzipStream(t, 1<<20, []byte{0}, gzip.BestSpeed)
			return rawSecret(data[:len(data)/2], "")
		}, []error{ErrCorrupt}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s, err := Read(context.Background(), nil, tc.secret(t), nil)
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want %v", err, want)
				}
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("err = %v", err)
			}
			if !slices.Contains(tc.wantErr, ErrTooLarge) && errors.Is(err, ErrTooLarge) {
				t.Errorf("err = %v, want it not ErrTooLarge", err)
			}
			if len(tc.wantErr) == 0 && (!s.Exists || s.Serial != 3) {
				t.Errorf("state = %+v, want serial 3", s)
			}
		})
	}
}

// paddedState marks gzipStream's content as a state document padded with spaces.
var paddedState = []byte(`{"version":4,"serial":3,"lineage":"l","resources":[]}`)

// gzipStream compresses n bytes at level without holding them: head (cut to n) followed by
// spaces when head is a state document, or head repeated otherwise.
func gzipStream(t *testing.T, n int, head []byte, level int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	fill := head
	if len(head) > 1 {
		if _, err := zw.Write(head[:min(n, len(head))]); err != nil {
			t.Fatal(err)
		}
		n -= min(n, len(head))
		fill = []byte{' '}
	}
	chunk := bytes.Repeat(fill, 1<<20)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := zw.Write(chunk[:k]); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadKeepsSerialLineageAndOutputs(t *testing.T) {
	s, err := Read(context.Background(), nil, secret(t, []byte(appliedState), ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Serial != 7 || s.Lineage != "abc" || string(s.Outputs["workspace"]) != `{"provider_id":"local://m1"}` {
		t.Fatalf("state = %+v", s)
	}
}

func TestNames(t *testing.T) {
	if got := SecretName("0123456789abcdef-c"); got != "tfstate-default-0123456789abcdef-c" {
		t.Errorf("SecretName = %s", got)
	}
	if got := LockLeaseName("0123456789abcdef-c"); got != "lock-tfstate-default-0123456789abcdef-c" {
		t.Errorf("LockLeaseName = %s", got)
	}
}

func secret(t *testing.T, state []byte, inputsHash string) *corev1.Secret {
	t.Helper()
	if state == nil {
		return &corev1.Secret{}
	}
	data, err := Compress(state)
	if err != nil {
		t.Fatal(err)
	}
	return rawSecret(data, inputsHash)
}

func rawSecret(data []byte, inputsHash string) *corev1.Secret {
	s := &corev1.Secret{Data: map[string][]byte{dataKey: data}}
	if inputsHash != "" {
		s.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{InputsHashAnnotation: inputsHash}}
	}
	return s
}
