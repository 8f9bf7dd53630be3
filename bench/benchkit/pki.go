package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runPKI writes a throwaway CA and one server certificate for *.test names,
// the way e2e/internal/testpki does for the e2e suite. That package cannot be
// imported from here: Go keeps e2e/internal to e2e/.
func runPKI(args []string) error {
	fs := flag.NewFlagSet("pki", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for ca.pem, server.pem and server.key")
	names := fs.String("names", "", "comma-separated *.test names the server certificate covers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *names == "" {
		return errors.New("-dir and -names are required")
	}
	hosts := strings.Split(*names, ",")
	for _, h := range hosts {
		if !isTestName(h) {
			return errors.New("only *.test names may be certified: " + h)
		}
	}
	ca, server, key, err := issue(hosts)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"ca.pem": ca, "server.pem": server, "server.key": key} {
		// Rootless containers read these under another uid.
		if err := os.WriteFile(filepath.Join(*dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// issue makes a CA valid for a day and a server certificate it signed.
func issue(names []string) (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: "agent-sandbox bench CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano() + 1),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pemBlock("CERTIFICATE", caDER), pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// isTestName accepts name.test and *.name.test: the network rule allows
// no other names in a test.
func isTestName(s string) bool {
	s = strings.TrimPrefix(strings.ToLower(strings.TrimSuffix(s, ".")), "*.")
	return strings.HasSuffix(s, ".test") && len(s) > len(".test")
}
