package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

const (
	// ConfigFile is the proxy's config in the launcher's config dir.
	ConfigFile = "inspect.json"
	// DefaultTrustedCA is the bundle upstreams are verified with when the
	// config names none.
	DefaultTrustedCA = "/etc/ssl/certs/ca-certificates.crt"
	// DefaultResolver is routerd's own filtering DNS.
	DefaultResolver = "127.0.0.1:5353"
)

// file is ConfigFile's content, as the launcher writes it.
type file struct {
	// Hosts are the names inspected; Wildcards the suffixes of the
	// allowlist's `*.` entries, under which any name is.
	Hosts     []string `json:"hosts"`
	Wildcards []string `json:"wildcards"`
	// TrustedCA is the bundle upstream certificates are verified with.
	TrustedCA string `json:"trusted_ca"`
	// Resolver is the DNS server upstream names are resolved through.
	Resolver string `json:"resolver"`
	// Gates maps hosts to the plain HTTP address of routerd's API gate,
	// which adds the user's key.
	Gates map[string]string `json:"gates"`
	// Forge gives GitHub's hosts and the registries their rules
	// (forge.go).
	Forge *forgeFile `json:"forge"`
}

// policy is a loaded config: what is admitted and where it goes.
type policy struct {
	hosts     map[string]bool
	wildcards []string
	trustedCA string
	resolver  string
	gates     map[string]string
	forge     *forgePolicy
}

// readPolicy reads the config; a missing file admits nothing.
func readPolicy(path string) (*policy, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return parsePolicy(nil)
	}
	if err != nil {
		return nil, err
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p, err := parsePolicy(&f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

func parsePolicy(f *file) (*policy, error) {
	p := &policy{hosts: map[string]bool{}, gates: map[string]string{}, trustedCA: DefaultTrustedCA, resolver: DefaultResolver}
	var err error
	if f == nil {
		p.forge, err = parseForge(nil)
		return p, err
	}
	if p.forge, err = parseForge(f.Forge); err != nil {
		return nil, err
	}
	for _, h := range f.Hosts {
		if h = normalName(h); h != "" {
			p.hosts[h] = true
		}
	}
	for _, w := range f.Wildcards {
		if w = normalName(strings.TrimPrefix(w, "*.")); w != "" {
			p.wildcards = append(p.wildcards, w)
		}
	}
	if f.TrustedCA != "" {
		p.trustedCA = f.TrustedCA
	}
	if f.Resolver != "" {
		if _, err := netip.ParseAddrPort(f.Resolver); err != nil {
			return nil, fmt.Errorf("resolver %q: want IP:PORT", f.Resolver)
		}
		p.resolver = f.Resolver
	}
	for h, addr := range f.Gates {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("gate of %s %q: want HOST:PORT", h, addr)
		}
		p.gates[normalName(h)] = addr
	}
	return p, nil
}

// normalName is how names are compared: lowercase, without the root's dot.
func normalName(s string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
}

// admits reports whether name (normalised) is inspected: an exact host or
// a name strictly under a wildcard's suffix.
func (p *policy) admits(name string) bool {
	if !hostName(name) {
		return false
	}
	if p.hosts[name] {
		return true
	}
	for _, w := range p.wildcards {
		if len(name) > len(w)+1 && strings.HasSuffix(name, w) && name[len(name)-len(w)-1] == '.' {
			return true
		}
	}
	return false
}

// hostName says whether name is a DNS host name: labels of letters,
// digits, '-' and '_', at most 63 bytes each and 253 in all. Under a
// wildcard the agent chooses the first labels; nothing else may reach a
// certificate, an upstream or the log.
func hostName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
