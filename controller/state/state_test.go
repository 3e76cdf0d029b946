package state

import (
	"errors"
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
		{"an encrypted state is reported as encrypted", secret(t, []byte(`{"encrypted_data":"AAAA","meta":{}}`), ""), ErrEncrypted, false, 0, ""},
		{"a state of another format version is unsupported", secret(t, []byte(`{"version":3}`), ""), ErrUnsupportedVersion, false, 0, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s, err := Read(tc.secret)
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

func TestReadKeepsSerialLineageAndOutputs(t *testing.T) {
	s, err := Read(secret(t, []byte(appliedState), ""))
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
