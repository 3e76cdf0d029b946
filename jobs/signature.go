package jobs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// RunKeySize is the size of a run key in bytes.
const RunKeySize = 32

// signatureVersion prefixes every signature, so the scheme can change without misreading old
// ones.
const signatureVersion = "s1:"

// RunKey is the install's signing key. Since is when it was made: what was made before it, and
// carries no signature, was made by a controller that did not sign yet (see Trusted).
type RunKey struct {
	key   []byte
	Since time.Time
}

// RunKeyOf returns the key held in key, made at since; key must be RunKeySize bytes.
func RunKeyOf(key []byte, since time.Time) (RunKey, error) {
	if len(key) != RunKeySize {
		return RunKey{}, fmt.Errorf("a run key has %d bytes, not %d", RunKeySize, len(key))
	}
	return RunKey{key: slices.Clone(key), Since: since}, nil
}

// Bytes returns the key, to be stored.
func (k RunKey) Bytes() []byte { return slices.Clone(k.key) }

// Valid reports whether k holds a key.
func (k RunKey) Valid() bool { return len(k.key) == RunKeySize }

// Sign returns the signature of fields under k. Each field is length-prefixed, so no two lists
// of fields sign alike.
func (k RunKey) Sign(fields ...string) string {
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
func (k RunKey) Verify(signature string, fields ...string) bool {
	if !k.Valid() || !strings.HasPrefix(signature, signatureVersion) {
		return false
	}
	return hmac.Equal([]byte(signature), []byte(k.Sign(fields...)))
}

// SignJob returns the signature of what the controller acts on in job: its namespace, name and
// UID (so a signature copied onto another Job does not verify), the UID of its controller, and
// every captf.io/ label and annotation but the signature and the result (which the result digest
// stands for). job must carry the UID the API server gave it.
func (k RunKey) SignJob(job *batchv1.Job) string { return k.Sign(jobFacts(job)...) }

// JobSigned reports whether job carries k's signature of its facts.
func (k RunKey) JobSigned(job *batchv1.Job) bool {
	return k.Verify(job.Annotations[AnnotationSignature], jobFacts(job)...)
}

// Trusted reports whether the controller made job and nothing it acts on changed since it
// last wrote the Job: its signature verifies, or, carrying none, it was created before the key
// existed (a Job of a controller that did not sign yet).
func (k RunKey) Trusted(job *batchv1.Job) bool {
	if _, signed := job.Annotations[AnnotationSignature]; !signed {
		return !k.Since.IsZero() && job.CreationTimestamp.Time.Before(k.Since)
	}
	return k.JobSigned(job)
}

// jobFacts lists the facts of job a signature covers, in a fixed order.
func jobFacts(job *batchv1.Job) []string {
	var owner string
	if ref := metav1.GetControllerOf(job); ref != nil {
		owner = ref.APIVersion + "/" + ref.Kind + "/" + ref.Name + "/" + string(ref.UID)
	}
	facts := []string{"job", job.Namespace, job.Name, string(job.UID), owner}
	facts = append(facts, prefixed("l:", job.Labels, nil)...)
	return append(facts, prefixed("a:", job.Annotations, map[string]bool{AnnotationSignature: true, AnnotationResult: true})...)
}

// prefixed lists the captf.io/ entries of m as "<tag>key=value", sorted, leaving out skip.
func prefixed(tag string, m map[string]string, skip map[string]bool) []string {
	var out []string
	for k, v := range m {
		if strings.HasPrefix(k, "captf.io/") && !skip[k] {
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
	result, has := job.Annotations[AnnotationResult]
	if !has {
		_, digest := job.Annotations[AnnotationResultDigest]
		return !digest
	}
	return job.Annotations[AnnotationResultDigest] == ResultDigest(result)
}
