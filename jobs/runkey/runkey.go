// Package runkey signs what the controller writes with the install's run key, and verifies it:
// the facts of a Job bound to its UID, a result by its digest. The controller and the runs API
// server share it, so a Job, a plan or durable inputs that someone else rewrote are told apart.
package runkey

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/jobs"
)

// AnnotationSignature holds the controller's signature of a Job or of a durable inputs Secret:
// an HMAC, under the install's run key, of the facts the controller acts on there. Anyone who
// may create or patch Jobs or Secrets can copy labels, owner references and annotations; only
// the controller can sign, so a Job or Secret whose signature does not verify is not trusted.
const AnnotationSignature = "captf.io/signature"

// AnnotationResultDigest holds the SHA-256 of a booked Job's result annotation. The signature
// covers it rather than the result itself, so a cache that drops the result still verifies the
// Job, and whoever reads the result checks it against the digest (ResultIntact).
const AnnotationResultDigest = "captf.io/result-digest"

// Size is the size of a run key in bytes.
const Size = 32

// signatureVersion prefixes every signature, so the scheme can change without misreading old
// ones.
const signatureVersion = "s1:"

// Key is the install's signing key. Only what carries its signature is trusted: what a
// controller that did not sign left behind is signed once, when the key is made (see
// controller.LoadRunKey), never later on the strength of its age.
type Key struct {
	key []byte
}

// Of returns the key held in key, which must be Size bytes.
func Of(key []byte) (Key, error) {
	if len(key) != Size {
		return Key{}, fmt.Errorf("a run key has %d bytes, not %d", Size, len(key))
	}
	return Key{key: slices.Clone(key)}, nil
}

// New returns a new random key.
func New() (Key, error) {
	b := make([]byte, Size)
	if _, err := rand.Read(b); err != nil {
		return Key{}, fmt.Errorf("making a run key: %w", err)
	}
	return Of(b)
}

// Bytes returns the key, to be stored.
func (k Key) Bytes() []byte { return slices.Clone(k.key) }

// Valid reports whether k holds a key.
func (k Key) Valid() bool { return len(k.key) == Size }

// Sign returns the signature of fields under k. Each field is length-prefixed, so no two lists
// of fields sign alike.
func (k Key) Sign(fields ...string) string {
	mac := hmac.New(sha256.New, k.key)
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		mac.Write(n[:])
		mac.Write([]byte(f))
	}
	return signatureVersion + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// Verify reports whether signature is k's signature of fields.
func (k Key) Verify(signature string, fields ...string) bool {
	if !k.Valid() || !strings.HasPrefix(signature, signatureVersion) {
		return false
	}
	return hmac.Equal([]byte(signature), []byte(k.Sign(fields...)))
}

// SignJob returns the signature of what the controller acts on in job: its namespace, name and
// UID (so a signature copied onto another Job does not verify), its controller, its captf.io/,
// captf.infrastructure.cluster.x-k8s.io/ and cluster.x-k8s.io/ labels (owner, op, attempt,
// cluster), and every captf.io/ annotation but the signature and the result (which the result
// digest stands for). job must carry the UID the API server gave it.
func (k Key) SignJob(job *batchv1.Job) string { return k.Sign(jobFacts(job)...) }

// JobSigned reports whether job carries k's signature of its facts: the controller made it and
// nothing the signature covers changed since the controller last wrote it.
func (k Key) JobSigned(job *batchv1.Job) bool {
	return k.Verify(job.Annotations[AnnotationSignature], jobFacts(job)...)
}

// jobFacts lists the facts of job a signature covers, in a fixed order.
func jobFacts(job *batchv1.Job) []string {
	var owner string
	if ref := metav1.GetControllerOf(job); ref != nil {
		owner = ref.APIVersion + "/" + ref.Kind + "/" + ref.Name + "/" + string(ref.UID)
	}
	facts := []string{"job", job.Namespace, job.Name, string(job.UID), owner}
	facts = append(facts, prefixed("l:", job.Labels, signedLabelPrefixes, nil)...)
	return append(facts, prefixed("a:", job.Annotations, signedAnnotationPrefixes, map[string]bool{AnnotationSignature: true, jobs.AnnotationResult: true})...)
}

// The labels and annotations a Job signature covers: every key under the prefixes the
// controller writes (captf's own, its op, attempt and owner labels, and Cluster API's
// cluster-name label). Keys of other owners (a policy engine's, the Job controller's) may come
// and go without breaking it.
var (
	signedLabelPrefixes      = []string{"captf.io/", "captf.infrastructure.cluster.x-k8s.io/", "cluster.x-k8s.io/"}
	signedAnnotationPrefixes = []string{"captf.io/"}
)

// prefixed lists the entries of m under prefixes as "<tag>key=value", sorted, leaving out skip.
func prefixed(tag string, m map[string]string, prefixes []string, skip map[string]bool) []string {
	var out []string
	for k, v := range m {
		if !skip[k] && slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			out = append(out, tag+k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

// ResultDigest is the value of AnnotationResultDigest for a result annotation.
func ResultDigest(result string) string {
	sum := sha256.Sum256([]byte(result))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ResultIntact reports whether job's result annotation is the one its result digest names; a
// Job without a result has nothing to check.
func ResultIntact(job *batchv1.Job) bool {
	result, has := job.Annotations[jobs.AnnotationResult]
	if !has {
		_, digest := job.Annotations[AnnotationResultDigest]
		return !digest
	}
	return job.Annotations[AnnotationResultDigest] == ResultDigest(result)
}
