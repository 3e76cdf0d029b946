package jobs

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

var fuzzKinds = []Kind{KindCluster, KindMachine, KindMachinePool}

// FuzzJobName checks the name rules for any object name, inputs hash, tick and attempt: at most
// 57 characters, a valid Job name for a valid object name, the same name for the same inputs,
// and a pod of it that OwnsPod attributes to the object and to no other name.
func FuzzJobName(f *testing.F) {
	f.Add(uint8(0), "web", uint8(0), int32(1), "h1:abc", "")
	f.Add(uint8(1), strings.Repeat("a", 33), uint8(3), int32(40), "state", "2026-10-01T12:00:00Z")
	f.Add(uint8(2), strings.Repeat("b", 34), uint8(5), int32(2147483647), "backup", "restore/x")
	f.Add(uint8(0), "x-apply-a1-abcdef", uint8(1), int32(9), "", "remediate/")
	f.Add(uint8(1), "web.example", uint8(2), int32(10), "\x00", "\x00")
	f.Fuzz(func(t *testing.T, kindIdx uint8, name string, opIdx uint8, attempt int32, inputsHash, tick string) {
		in := NameInputs{
			Kind:       fuzzKinds[int(kindIdx)%len(fuzzKinds)],
			Name:       name,
			Op:         Ops()[int(opIdx)%len(Ops())],
			Attempt:    attempt,
			InputsHash: inputsHash,
			Tick:       tick,
		}
		got, err := JobName(in)
		if name == "" || attempt < 1 {
			if err == nil {
				t.Fatalf("JobName(%+v) = %q, want an error", in, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("JobName(%+v) error = %v", in, err)
		}
		if len(got) > MaxJobNameLength {
			t.Fatalf("JobName() = %q has %d characters", got, len(got))
		}
		if again, _ := JobName(in); again != got {
			t.Fatalf("JobName() is not deterministic: %q, %q", got, again)
		}
		if len(validation.IsDNS1123Subdomain(name)) == 0 && len(validation.IsDNS1123Subdomain(got)) > 0 {
			t.Fatalf("JobName() = %q is not a valid name for object %q", got, name)
		}
		pod := got + "-abcde"
		if !OwnsPod(in.Kind, name, pod) {
			t.Fatalf("OwnsPod(%s, %q, %q) = false", in.Kind, name, pod)
		}
		if OwnsPod(in.Kind, name+"x", pod) {
			t.Fatalf("OwnsPod attributes %q to %q too", pod, name+"x")
		}
	})
}

// FuzzOwnsPod checks that any pod name is parsed without panicking, and that a pod it accepts
// has the shape of one of the object's Jobs' pods.
func FuzzOwnsPod(f *testing.F) {
	f.Add(uint8(0), "web", "captf-c-web-apply-a1-dbb569-abcde")
	f.Add(uint8(0), "web", "captf-c-web-apply-a01-dbb569-abcde")
	f.Add(uint8(2), strings.Repeat("w", 40), "captf-mp-"+hash16(strings.Repeat("w", 40))+"-refresh-a40-abcdef-qwert")
	f.Add(uint8(1), "m", "-a-abcdef-abcde")
	f.Add(uint8(1), "m", "")
	f.Add(uint8(1), "m", "captf-m-m-plan-a9999999999999-000000-00000")
	f.Fuzz(func(t *testing.T, kindIdx uint8, name, pod string) {
		kind := fuzzKinds[int(kindIdx)%len(fuzzKinds)]
		if !OwnsPod(kind, name, pod) {
			return
		}
		if len(pod) > MaxJobNameLength+1+podSuffixLength {
			t.Fatalf("OwnsPod accepted %q, longer than a Job name and a pod suffix", pod)
		}
		if !strings.HasPrefix(pod, "captf-"+kind.Short()+"-") {
			t.Fatalf("OwnsPod accepted %q without the kind's prefix", pod)
		}
		job := pod[:len(pod)-1-podSuffixLength]
		if !strings.Contains(job, name) && !strings.Contains(job, hash16(name)) {
			t.Fatalf("OwnsPod accepted %q, which names neither %q nor its hash", pod, name)
		}
	})
}

// FuzzSummaryCodec checks that any annotation value decodes without panicking, that a readable
// one encodes within bounds, and that encoding is stable: what it writes reads back and writes
// the same again.
func FuzzSummaryCodec(f *testing.F) {
	full, _ := EncodeSummary(fullSummary())
	f.Add(full)
	f.Add(`{"outcome":"Succeeded"}`)
	f.Add(`{"plan":{"hash":"p3:x","resources":[{"address":"a","actions":["delete"]}],"truncated":true},"unknown":1}`)
	f.Add(`{"error":{"kind":"step","summary":"\u0001\u0002\ud800"},"finishedAt":"2026-10-01T12:00:00.5Z"}`)
	f.Add(`{"drift":{"detected":true,"resources":[{"address":"` + strings.Repeat("é", 300) + `"}]}}`)
	f.Add(`{"outcome":`)
	f.Add(`null`)
	f.Add("{\"error\":{\"summary\":\"\xff\xfe\"}}")
	f.Fuzz(func(t *testing.T, value string) {
		s, err := DecodeSummary(value)
		if err != nil {
			if !s.Unreadable {
				t.Fatalf("DecodeSummary(%q) error %v without Unreadable", value, err)
			}
			return
		}
		enc, err := EncodeSummary(s)
		if err != nil {
			// Only a plan hash or short words too long to ever fit may refuse to encode.
			return
		}
		if len(enc) > MaxSummaryBytes {
			t.Fatalf("EncodeSummary() wrote %d bytes", len(enc))
		}
		back, err := DecodeSummary(enc)
		if err != nil {
			t.Fatalf("DecodeSummary(EncodeSummary()) error = %v for %q", err, enc)
		}
		again, err := EncodeSummary(back)
		if err != nil || again != enc {
			t.Fatalf("encoding is not stable:\n%s\n%s (%v)", enc, again, err)
		}
	})
}

// FuzzRunnerResult checks that any termination message parses without panicking, and that a
// parsed result encodes within bounds and parses back.
func FuzzRunnerResult(f *testing.F) {
	full, _ := EncodeRunnerResult(fullRunnerResult())
	f.Add(full)
	f.Add([]byte(`{"version":1,"op":"plan","plan":{"hash":"p3:x","counts":{"add":1,"change":0,"destroy":0}}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"steps":[{"name":"init","exit":0,"seconds":1e308}]}`))
	f.Add([]byte(`runner: killed`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		r, err := ParseRunnerResult(doc)
		if err != nil {
			return
		}
		_ = NewSummary(OutcomeFailed, t0, &r)
		b, err := EncodeRunnerResult(r)
		if err != nil {
			return
		}
		if len(b) > MaxRunnerResultBytes {
			t.Fatalf("EncodeRunnerResult() wrote %d bytes", len(b))
		}
		if _, err := ParseRunnerResult(b); err != nil {
			t.Fatalf("ParseRunnerResult(EncodeRunnerResult()) error = %v for %s", err, b)
		}
	})
}
