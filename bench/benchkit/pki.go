package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/testpki"
)

// runPKI writes a throwaway CA and one server certificate for *.test names,
// made like the e2e suite's.
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
	ca, err := testpki.NewCA()
	if err != nil {
		return err
	}
	server, key, err := ca.Issue(hosts, nil)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"ca.pem": ca.CertPEM, "server.pem": server, "server.key": key} {
		// Rootless containers read these under another uid.
		if err := os.WriteFile(filepath.Join(*dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// isTestName accepts name.test and *.name.test: the network rule allows
// no other names in a test.
func isTestName(s string) bool {
	s = strings.TrimPrefix(strings.ToLower(strings.TrimSuffix(s, ".")), "*.")
	return strings.HasSuffix(s, ".test") && len(s) > len(".test")
}
