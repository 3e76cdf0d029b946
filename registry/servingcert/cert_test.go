package servingcert

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

var (
	names    = DNSNames("captf-apiserver", "captf-system")
	validity = 30 * 24 * time.Hour
	t0       = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func issue(t *testing.T, b Bundle, action Action, now time.Time) Bundle {
	t.Helper()
	out, err := Issue(b, action, names, now, validity)
	if err != nil {
		t.Fatalf("Issue(%v): %v", action, err)
	}
	return out
}

func certs(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

func with(b Bundle, key string, value []byte) Bundle {
	out := Bundle{}
	for k, v := range b {
		out[k] = v
	}
	out[key] = value
	return out
}

// Each rule of Decide, a row: what the Secret holds, when, and what is done.
func TestDecide(t *testing.T) {
	fresh := issue(t, nil, RenewCA, t0)
	other := issue(t, nil, RenewCA, t0)
	for _, tc := range []struct {
		name  string
		b     Bundle
		names []string
		now   time.Time
		want  Action
	}{
		{"no Secret issues a CA and a certificate", nil, names, t0, RenewCA},
		{"a fresh bundle is kept", fresh, names, t0.Add(time.Hour), Keep},
		{"a certificate with more than a third of its life left is kept", fresh, names, t0.Add(validity * 2 / 3).Add(-2 * time.Minute), Keep},
		{"a certificate with a third of its life left is renewed", fresh, names, t0.Add(validity * 2 / 3), RenewCertificate},
		{"an expired certificate is renewed", fresh, names, t0.Add(validity + time.Hour), RenewCertificate},
		{"a certificate for other names is renewed", fresh, []string{"other.captf-system.svc"}, t0, RenewCertificate},
		{"a certificate signed by another CA is renewed", with(fresh, CertKey, other[CertKey]), names, t0, RenewCertificate},
		{"a certificate without its key is renewed", with(fresh, PrivateKeyKey, other[PrivateKeyKey]), names, t0, RenewCertificate},
		{"a CA with a third of its life left is replaced", fresh, names, t0.Add(CALifetimes * validity * 2 / 3), RenewCA},
		{"a CA key that does not match is replaced", with(fresh, CAPrivateKeyKey, other[CAPrivateKeyKey]), names, t0, RenewCA},
		{"a CA that is not PEM is replaced", with(fresh, CABundleKey, []byte("junk")), names, t0, RenewCA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := Decide(tc.b, tc.names, tc.now); got != tc.want {
				t.Errorf("Decide = %v (%s), want %v", got, why, tc.want)
			}
		})
	}
}

// Renewing the certificate keeps the CA, so no caBundle changes; the result is valid again.
func TestRenewCertificateKeepsTheCA(t *testing.T) {
	first := issue(t, nil, RenewCA, t0)
	later := t0.Add(validity * 3 / 4)
	renewed := issue(t, first, RenewCertificate, later)
	if !bytes.Equal(renewed[CABundleKey], first[CABundleKey]) || !bytes.Equal(renewed[CAPrivateKeyKey], first[CAPrivateKeyKey]) {
		t.Error("the CA changed")
	}
	if bytes.Equal(renewed[CertKey], first[CertKey]) {
		t.Error("the certificate did not change")
	}
	if got, why := Decide(renewed, names, later); got != Keep {
		t.Errorf("the renewed bundle: %v (%s)", got, why)
	}
	leaf := certs(t, renewed[CertKey])[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, renewed[CABundleKey]), DNSName: names[0], CurrentTime: later}); err != nil {
		t.Errorf("the renewed certificate does not verify against the bundle: %v", err)
	}
}

// A new CA keeps the previous one in the bundle while it is valid, so a replica still serving a
// certificate of the previous CA is trusted until it picks up the new one.
func TestRenewCAKeepsThePreviousCATrusted(t *testing.T) {
	first := issue(t, nil, RenewCA, t0)
	later := t0.Add(CALifetimes * validity * 3 / 4)
	renewed := issue(t, first, RenewCA, later)
	bundle := certs(t, renewed[CABundleKey])
	if len(bundle) != 2 {
		t.Fatalf("the bundle has %d CAs, want the new and the previous", len(bundle))
	}
	old := certs(t, first[CertKey])[0]
	if _, err := old.Verify(x509.VerifyOptions{Roots: pool(t, renewed[CABundleKey]), DNSName: names[0], CurrentTime: old.NotBefore.Add(time.Minute)}); err != nil {
		t.Errorf("a certificate of the previous CA is not trusted by the new bundle: %v", err)
	}
	// Once the previous CA has expired, the next new CA drops it.
	expired := issue(t, renewed, RenewCA, t0.Add(CALifetimes*validity+time.Hour))
	if n := len(certs(t, expired[CABundleKey])); n != 2 {
		t.Errorf("the bundle has %d CAs after the first CA expired, want 2 (the newest and its predecessor)", n)
	}
}

// A serving certificate never outlives its CA.
func TestCertificateNeverOutlivesItsCA(t *testing.T) {
	first := issue(t, nil, RenewCA, t0)
	ca := certs(t, first[CABundleKey])[0]
	late := ca.NotAfter.Add(-time.Hour)
	renewed := issue(t, first, RenewCertificate, late)
	if leaf := certs(t, renewed[CertKey])[0]; leaf.NotAfter.After(ca.NotAfter) {
		t.Errorf("the certificate expires at %s, after its CA at %s", leaf.NotAfter, ca.NotAfter)
	}
}

func pool(t *testing.T, data []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		t.Fatal("no certificate in the bundle")
	}
	return p
}
