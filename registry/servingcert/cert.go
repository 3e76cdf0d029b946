// Package servingcert keeps a server's TLS serving certificate in a Secret without cert-manager:
// it issues a CA and a serving certificate signed by it on first start, renews the certificate
// before it expires, and writes the CA into the caBundle of the APIServices and webhook
// configurations that send traffic to the server. The rules that decide when to issue what are
// pure functions of the Secret's data and the time (Decide); Manager applies them to the cluster.
package servingcert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Keys of the Secret, a kubernetes.io/tls Secret with the CA beside the serving pair.
const (
	// CertKey holds the serving certificate (PEM).
	CertKey = "tls.crt"
	// PrivateKeyKey holds the serving certificate's private key (PEM).
	PrivateKeyKey = "tls.key"
	// CABundleKey holds the CAs clients trust (PEM): the current CA, and the previous one while
	// certificates it signed may still be served.
	CABundleKey = "ca.crt"
	// CAPrivateKeyKey holds the current CA's private key (PEM), so any replica can renew.
	CAPrivateKeyKey = "ca.key"
)

// CALifetimes is how many serving certificate lifetimes a CA lives: renewing the serving
// certificate then leaves every caBundle alone, and a CA is replaced rarely.
const CALifetimes = 10

// Bundle is the content of the Secret: PEM data under the keys above.
type Bundle map[string][]byte

// Action is what Decide asks for.
type Action int

// Actions, from doing nothing to replacing everything.
const (
	// Keep the bundle: it is valid and not yet due for renewal.
	Keep Action = iota
	// RenewCertificate issues a new serving certificate signed by the current CA.
	RenewCertificate
	// RenewCA issues a new CA, keeps the previous one in the bundle while it is valid, and a
	// serving certificate signed by the new CA.
	RenewCA
)

func (a Action) String() string {
	switch a {
	case Keep:
		return "Keep"
	case RenewCertificate:
		return "RenewCertificate"
	case RenewCA:
		return "RenewCA"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// renewalDue reports whether a certificate valid from notBefore to notAfter has less than a
// third of its life left at now, the point from which it is renewed.
func renewalDue(notBefore, notAfter, now time.Time) bool {
	life := notAfter.Sub(notBefore)
	return !now.Before(notAfter.Add(-life / 3))
}

// Decide returns what to do with the bundle b at now, for a serving certificate valid for
// dnsNames, and why, in words for the log.
func Decide(b Bundle, dnsNames []string, now time.Time) (Action, string) {
	ca, _, err := parseCA(b)
	if err != nil {
		return RenewCA, err.Error()
	}
	if renewalDue(ca.NotBefore, ca.NotAfter, now) {
		return RenewCA, fmt.Sprintf("the CA expires at %s", ca.NotAfter.UTC().Format(time.RFC3339))
	}
	pair, err := tls.X509KeyPair(b[CertKey], b[PrivateKeyKey])
	if err != nil {
		return RenewCertificate, fmt.Sprintf("the serving certificate and key are unusable: %v", err)
	}
	cert := pair.Leaf
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return RenewCertificate, "the serving certificate is not signed by the current CA"
	}
	if !slices.Equal(sortedCopy(cert.DNSNames), sortedCopy(dnsNames)) {
		return RenewCertificate, fmt.Sprintf("the serving certificate is for %v, not %v", cert.DNSNames, sortedCopy(dnsNames))
	}
	if renewalDue(cert.NotBefore, cert.NotAfter, now) {
		return RenewCertificate, fmt.Sprintf("the serving certificate expires at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return Keep, "valid"
}

// Issue carries out action on b and returns the new bundle; b is not modified. validity is the
// serving certificate's lifetime; a new CA lives CALifetimes times as long.
func Issue(b Bundle, action Action, dnsNames []string, now time.Time, validity time.Duration) (Bundle, error) {
	out := Bundle{}
	var (
		ca    *x509.Certificate
		caKey *ecdsa.PrivateKey
		err   error
	)
	switch action {
	case Keep:
		for k, v := range b {
			out[k] = bytes.Clone(v)
		}
		return out, nil
	case RenewCertificate:
		if ca, caKey, err = parseCA(b); err != nil {
			return nil, err
		}
		out[CABundleKey] = bytes.Clone(b[CABundleKey])
		out[CAPrivateKeyKey] = bytes.Clone(b[CAPrivateKeyKey])
	case RenewCA:
		var caPEM, caKeyPEM []byte
		if ca, caKey, caPEM, caKeyPEM, err = newCA(now, CALifetimes*validity); err != nil {
			return nil, err
		}
		// The previous CA stays trusted while certificates it signed may still be served by a
		// replica that has not seen the new one.
		out[CABundleKey] = append(caPEM, previousCA(b, now)...)
		out[CAPrivateKeyKey] = caKeyPEM
	default:
		return nil, fmt.Errorf("unknown action %v", action)
	}
	certPEM, keyPEM, err := newServingCert(ca, caKey, dnsNames, now, validity)
	if err != nil {
		return nil, err
	}
	out[CertKey], out[PrivateKeyKey] = certPEM, keyPEM
	return out, nil
}

// previousCA returns the PEM of the bundle's current CA when it is still valid at now.
func previousCA(b Bundle, now time.Time) []byte {
	ca, _, err := parseCA(b)
	if err != nil || !now.Before(ca.NotAfter) {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
}

// parseCA returns the bundle's current CA (the first certificate of ca.crt) and its key.
func parseCA(b Bundle) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if len(b[CABundleKey]) == 0 || len(b[CAPrivateKeyKey]) == 0 {
		return nil, nil, errors.New("there is no CA")
	}
	block, _ := pem.Decode(b[CABundleKey])
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("the CA certificate is not PEM")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("the CA certificate does not parse: %w", err)
	}
	if !ca.IsCA {
		return nil, nil, errors.New("the CA certificate is not a CA")
	}
	keyBlock, _ := pem.Decode(b[CAPrivateKeyKey])
	if keyBlock == nil {
		return nil, nil, errors.New("the CA key is not PEM")
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("the CA key does not parse: %w", err)
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the CA key does not match the CA certificate")
	}
	return ca, key, nil
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("captf-serving-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("creating the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return ca, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func newServingCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, dnsNames []string, now time.Time, validity time.Duration) ([]byte, []byte, error) {
	if len(dnsNames) == 0 {
		return nil, nil, errors.New("a serving certificate needs at least one DNS name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	// Never outlive the CA: a client would reject the chain at the CA's expiry anyway.
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     sortedCopy(dnsNames),
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// DNSNames are the names a Service's clients verify: the aggregator and the webhook callers
// use <service>.<namespace>.svc; the cluster-domain form is for everything else.
func DNSNames(service, namespace string) []string {
	return []string{
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}
