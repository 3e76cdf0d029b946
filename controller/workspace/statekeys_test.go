package workspace_test

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

const (
	keyOne = "one-passphrase-of-the-tests-0001"
	keyTwo = "two-passphrase-of-the-tests-0002"
)

// encryptAsOpenTofu encrypts a state document as OpenTofu's pbkdf2 key provider named id and
// aes_gcm method do, with the parameters the runner writes.
func encryptAsOpenTofu(t *testing.T, doc []byte, id, passphrase string, serial int64) []byte {
	t.Helper()
	salt := make([]byte, 32)
	_, _ = rand.Read(salt)
	key, err := pbkdf2.Key(sha512.New, passphrase, salt, 200000, 32)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(key)
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, gcm.NonceSize())
	_, _ = rand.Read(nonce)
	meta, _ := json.Marshal(map[string]any{"salt": salt, "iterations": 200000, "hash_function": "sha512", "key_length": 32})
	out, err := json.Marshal(map[string]any{
		"serial": serial, "lineage": "l",
		"meta":               map[string][]byte{"key_provider.pbkdf2." + id: meta},
		"encrypted_data":     gcm.Seal(nonce, nonce, doc, nil),
		"encryption_version": "v0",
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeEncryptedState writes the cluster web's state, with contractOutputs, encrypted under id.
func (h *harness) writeEncryptedState(id, passphrase string) {
	h.t.Helper()
	doc := fmt.Sprintf(`{"version":4,"serial":1,"lineage":"l","resources":[{"mode":"managed","type":"terraform_data","name":"r","instances":[{"attributes":{}}]}],"outputs":{"workspace":{"value":%s,"sensitive":true}}}`, contractOutputs)
	data, err := state.Compress(encryptAsOpenTofu(h.t, []byte(doc), id, passphrase, 1))
	if err != nil {
		h.t.Fatal(err)
	}
	head := h.stateSecret(jobs.KindCluster, "web")
	head.Data = map[string][]byte{"tfstate": data}
	if err := h.c.Update(h.ctx, head); err != nil {
		h.t.Fatal(err)
	}
}

// stateKeySecret creates the Secret of state passphrases, opted in or not.
func (h *harness) stateKeySecret(optedIn bool, keys map[string]string) *corev1.Secret {
	h.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "state-keys"}, StringData: keys}
	if optedIn {
		s.Labels = map[string]string{infrav1.StateKeyLabel: "true"}
	}
	if err := h.c.Create(h.ctx, s); err != nil {
		h.t.Fatal(err)
	}
	return s
}

func encryptedWith(keyID string) func(*infrav1.TerraformCluster) {
	return func(c *infrav1.TerraformCluster) {
		c.Spec.StateEncryption = &infrav1.StateEncryption{SecretRef: infrav1.SourceReference{Name: "state-keys"}, KeyID: keyID}
	}
}

// stateKeysOf is the state-keys volume and the state arguments of a Job.
func stateKeysOf(job batchv1.Job) (items []string, args []string) {
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == "state-keys" && v.Secret != nil {
			for _, i := range v.Secret.Items {
				items = append(items, i.Key)
			}
		}
	}
	for _, a := range command(job) {
		if strings.HasPrefix(a, "--state-") {
			args = append(args, a)
		}
	}
	return items, args
}

func TestStateEncryptionKeys(t *testing.T) {
	tests := []struct {
		name      string
		optedIn   bool
		keys      map[string]string
		keyID     string
		wantJob   bool
		wantItems []string
		wantArgs  []string
		problem   string
	}{
		{name: "a Secret that has not opted in starts no Job", keys: map[string]string{"one": keyOne}, keyID: "one", problem: "does not carry the label captf.io/state-key=true"},
		{name: "a Secret without the current key starts no Job", optedIn: true, keys: map[string]string{"one": keyOne}, keyID: "two", problem: "has no key two"},
		{name: "a passphrase shorter than OpenTofu takes starts no Job", optedIn: true, keys: map[string]string{"one": "short"}, keyID: "one", problem: `key "one" is not a key id`},
		{name: "a passphrase that is no UTF-8 text, which OpenTofu cannot read, starts no Job", optedIn: true, keys: map[string]string{"one": "\xff\xfe" + keyOne}, keyID: "one", problem: "UTF-8"},
		{name: "a key that is no key id starts no Job", optedIn: true, keys: map[string]string{"one": keyOne, "2nd": keyTwo}, keyID: "one", problem: `key "2nd" is not a key id`},
		{name: "the run gets every key, writes under the current one and takes no state in the clear", optedIn: true, keys: map[string]string{"one": keyOne, "two": keyTwo}, keyID: "two",
			wantJob: true, wantItems: []string{"one", "two"}, wantArgs: []string{"--state-keys=" + jobspec.StateKeysDir, "--state-key=two"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			h.stateKeySecret(tt.optedIn, tt.keys)
			tc := h.cluster("web", encryptedWith(tt.keyID))
			h.settle(tc)
			if !tt.wantJob {
				h.noRunningJob(jobs.KindCluster, "web")
				h.get(tc)
				c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded)
				if c == nil || c.Reason != conditions.ReasonStateKeysNotFound || !strings.Contains(c.Message, tt.problem) || strings.Contains(c.Message, keyOne) {
					t.Fatalf("ApplyJobSucceeded = %+v, want StateKeysNotFound saying %q and no passphrase", c, tt.problem)
				}
				if countPrefix(h.events(), "Warning StateKeysNotFound") != 1 {
					t.Errorf("want one StateKeysNotFound event")
				}
				return
			}
			job := h.runningJob(jobs.KindCluster, "web")
			items, args := stateKeysOf(job)
			if !slices.Equal(items, tt.wantItems) || !slices.Equal(args, tt.wantArgs) {
				t.Fatalf("state keys mounted %v, args %v; want %v, %v", items, args, tt.wantItems, tt.wantArgs)
			}
		})
	}
}

func TestAnEncryptedStateIsReadWithItsKey(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.stateKeySecret(true, map[string]string{"one": keyOne})
	tc := h.cluster("web", encryptedWith("one"))
	h.settle(tc)
	h.writeEncryptedState("one", keyOne)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, &jobs.RunnerResult{Changes: &jobs.Changes{Add: 1}})
	h.settle(tc)
	h.get(tc)
	if !conditions.IsTrue(tc.Status.Conditions, conditions.OutputsValid) || tc.Spec.ControlPlaneEndpoint.Host != "api.web.example" || tc.Status.StateKeyID != "one" {
		t.Fatalf("conditions %+v, endpoint %+v, stateKeyID %q: want the encrypted state's outputs, key one", tc.Status.Conditions, tc.Spec.ControlPlaneEndpoint, tc.Status.StateKeyID)
	}

	// A state in the clear where an encrypted one was was written without the key: refused.
	h.writeState(jobs.KindCluster, "web", 1)
	h.settle(tc)
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.StateReadable); c == nil || c.Reason != conditions.ReasonStateNotEncrypted || tc.Status.StateKeyID != "one" {
		t.Fatalf("StateReadable = %+v, stateKeyID %q; want StateNotEncrypted and the key kept", c, tc.Status.StateKeyID)
	}

	// Under a key id the controller has, with another passphrase, the state does not open.
	h.writeEncryptedState("one", keyTwo)
	h.settle(tc)
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.StateReadable); c == nil || c.Reason != conditions.ReasonStateKeyMismatch {
		t.Fatalf("StateReadable = %+v, want StateKeyMismatch", c)
	}
}

func TestAStateInTheClearIsEncryptedByTheNextRun(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)

	h.stateKeySecret(true, map[string]string{"one": keyOne})
	h.get(tc)
	encryptedWith("one")(tc)
	tc.Spec.Variables.Raw = []byte(`{"region":"us"}`)
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	if _, args := stateKeysOf(job); !slices.Contains(args, "--state-accept-plaintext") {
		t.Fatalf("args %v: the run after a state in the clear must accept it once", args)
	}
}
