package main

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/inspect"
)

// The TLS-inspecting proxy (router-image/routerd/inspect): nginx passes it
// the connections to the allowlisted HTTPS hosts, whose requests it sends
// on without the agent's credentials. Its CA goes to the launcher through
// CA_DIR; its key stays in this process.

// startInspect makes the session CA, writes its files and listens; the
// proxy serves once Serve runs.
func startInspect(cfg config, stdout io.Writer, logger *log.Logger) (*inspect.Proxy, error) {
	ic := inspect.Config{
		Socket: cfg.inspectSocket,
		File:   cfg.inspectFile,
		CADir:  cfg.caDir,
		Out:    stdout,
		Log:    logger,
		Poll:   configPoll,
		// hack/mutation-check's inspect-strip-off passes every credential.
		KeepCredentials: mutated("inspect-strip-off"),
		AnyHost:         mutated("inspect-host-check-off"),
		ForgeScopeOff:   mutated("forge-scope-off"),
		PublishOpen:     mutated("registry-publish-open"),
	}
	if mutated("ca-key-readable") {
		// hack/mutation-check's ca-key-readable: the key next to the
		// certificate (ca.key) and in the bundle the agent trusts.
		dir := cfg.caDir
		ic.LeakCAKey = func(key crypto.Signer) error {
			der, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				return err
			}
			keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
			path := filepath.Join(dir, "ca.key")
			if err := os.WriteFile(path, keyPEM, 0o644); err != nil {
				return err
			}
			if err := os.Chmod(path, 0o644); err != nil {
				return err
			}
			f, err := os.OpenFile(filepath.Join(dir, inspect.BundleFile), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.Write(keyPEM)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	return inspect.New(ic)
}
