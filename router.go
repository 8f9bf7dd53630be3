package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
)

// The session's router plan: what its allowlist, credentials and ports
// make of internal/routerconf's plan, written into the session's dir for
// the router and the forwarder, and written again on every edit of the
// allowlist.

// routerFiles makes every file and directory the router and the forwarder
// mount from one session's temp dir. The config (dnsmasq.conf, nginx.conf
// and forwards) they mount read-only at /etc/router and poll; the TLS
// socket dir (tlsDirOf) they share at tlsSocketDir.
type routerFiles struct {
	dir, routerIP string

	// creds is what the router adds credentials for, fixed for the
	// session; the allowlist decides which of them are served.
	creds credPlan

	// published are the forwarder's pairs for the session's published
	// ports, fixed for the session.
	published []string

	mu      sync.Mutex
	plan    routerconf.Plan
	cursor  routerconf.Cursor
	applied []allowlist.Entry
}

// newRouterFiles makes the TLS socket dir in dir; apply writes the config.
func newRouterFiles(dir, routerIP string, creds credPlan) (*routerFiles, error) {
	tls := tlsDirOf(dir)
	if err := os.Mkdir(tls, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cannot make the router's socket dir: %w", err)
	}
	// Open to the forwarder, which connects as another uid of the user
	// namespace.
	if err := os.Chmod(tls, 0o755); err != nil {
		return nil, err
	}
	// Where routerd writes the session CA's certificate and the bundle the
	// agent trusts (routerd runs as the namespace's root: the user).
	if err := os.Mkdir(caDirOf(dir), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cannot make the router's CA dir: %w", err)
	}
	// The agent's container is created and started while the router
	// starts, and its bind mount holds the inode it finds: routerd writes
	// its bundle into this one (inspect.writeInPlace) before it is ready,
	// and the agent's command runs only after that (gate.go).
	if err := os.WriteFile(filepath.Join(caDirOf(dir), caBundleFile), nil, 0o644); err != nil {
		return nil, fmt.Errorf("cannot make the router's CA dir: %w", err)
	}
	r := &routerFiles{dir: dir, routerIP: routerIP, creds: creds, cursor: routerconf.FirstCursor}
	if len(creds.upstreamCA) > 0 {
		if err := r.replace(routerconf.File{Name: upstreamCAFile, Body: string(creds.upstreamCA)}); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// tlsDirOf is the host side of tlsSocketDir, in the session's temp dir.
func tlsDirOf(tmp string) string { return filepath.Join(tmp, "tls") }

// caDirOf is the host side of routerCADir, in the session's temp dir.
func caDirOf(tmp string) string { return filepath.Join(tmp, "ca") }

// apply plans entries after the running plan and replaces the config
// files, each by rename, so that a reader sees the old one or the new
// one, never a partial one.
func (r *routerFiles) apply(entries []allowlist.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, cursor, err := replan(r.plan, r.cursor, r.creds, entries)
	if err != nil {
		return err
	}
	p.Published = r.published
	for _, f := range p.Render(r.routerIP) {
		if err := r.replace(f); err != nil {
			return err
		}
	}
	// The router and the forwarder read as other uids of the user
	// namespace.
	if err := os.Chmod(r.dir, 0o755); err != nil {
		return err
	}
	r.plan, r.cursor, r.applied = p, cursor, entries
	return nil
}

// replan is the router's plan for entries after prev: the allowlist's,
// with what the credentials add (their routes, the CA bundle nginx
// verifies with, the forge's rules).
func replan(prev routerconf.Plan, cursor routerconf.Cursor, creds credPlan, entries []allowlist.Entry) (routerconf.Plan, routerconf.Cursor, error) {
	p, cursor, err := routerconf.Replan(prev, cursor, creds.withHanded(entries))
	if err != nil {
		return p, cursor, err
	}
	p.Routes, p.TrustedCA, p.APIAllow = routes(creds.active(entries)), creds.trustedCA(), creds.apiAllow
	p.Forge = creds.forge.doc(creds.apiAllow)
	return p, cursor, nil
}

// entries is the list the session runs with now.
func (r *routerFiles) entries() []allowlist.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// replace writes f into the session's dir; its errors name the file and
// the dir, for a full disk.
func (r *routerFiles) replace(f routerconf.File) error {
	made, err := replaceFile(filepath.Join(r.dir, f.Name), []byte(f.Body), 0o644, false)
	switch {
	case err == nil:
		return nil
	case !made:
		return fmt.Errorf("cannot write the router config: %w", err)
	}
	return fmt.Errorf("cannot write the router config %s: %w; check the space left in %s", f.Name, err, r.dir)
}

// routes is what the router's plan needs of the routes: where each is
// served and which headers are whose, never a credential.
func routes(rs []credRoute) []routerconf.Route {
	var out []routerconf.Route
	for _, r := range rs {
		prov := r.kind.provider
		out = append(out, routerconf.Route{Provider: prov.id, Host: r.host, GatePort: prov.port, Header: r.kind.header,
			AgentHeaders: prov.headers, RefuseArgs: prov.refuseArgs,
			// The file writeCredentialDir writes, mounted at routerCredentialDir.
			IncludeFile: routerCredentialDir + "/" + prov.id + ".conf"})
	}
	return out
}
