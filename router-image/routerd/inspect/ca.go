package inspect

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"
)

const (
	// caLifetime outlasts any session; the CA dies with the process anyway.
	caLifetime = 90 * 24 * time.Hour
	// maxLeaves bounds the leaf cache: a wildcard admits any number of
	// names. When it is full it starts over.
	maxLeaves = 4096
)

// authority is the session's CA. Its key is made when routerd starts and
// lives in this process's memory only: whoever held it could mint
// certificates the agent trusts, and the agent trusts this CA only for
// this session.
type authority struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
	// leafKey is the one key of every leaf: a key per name would cost a
	// key generation for each new name and buy nothing, since the CA key
	// sits next to it.
	leafKey *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	var tag [8]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return nil, err
	}
	ski, err := keyID(key)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		// A name of its own, so that a CA left in some trust store can be
		// told from the next session's.
		Subject:               pkix.Name{CommonName: "agent-sandbox session CA " + hex.EncodeToString(tag[:])},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          ski,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, der: der, key: key, leafKey: leafKey, leaves: map[string]*tls.Certificate{}}, nil
}

// certPEM is the CA certificate for the agent's trust store.
func (a *authority) certPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.der})
}

// leaf is the certificate for exactly one name, made on first use.
func (a *authority) leaf(name string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.leaves[name]; c != nil {
		return c, nil
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	// Strict verifiers (Python 3.13's) want the SAN, the key usages and
	// the authority key id, which Go takes from the CA's subject key id.
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    a.cert.NotBefore,
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, a.leafKey.Public(), a.key)
	if err != nil {
		return nil, fmt.Errorf("certificate for %s: %w", name, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: a.leafKey}
	if len(a.leaves) >= maxLeaves {
		clear(a.leaves)
	}
	a.leaves[name] = c
	return c, nil
}

// serial is a random positive 128-bit serial number.
func serial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
		if err != nil || n.Sign() > 0 {
			return n, err
		}
	}
}

// keyID is the CA's subject key id: a hash of its public key (RFC 7093).
func keyID(key *ecdsa.PrivateKey) ([]byte, error) {
	pub, err := key.PublicKey.ECDH()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(pub.Bytes())
	return sum[:20], nil
}
