package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/inspect"
)

// The CA port (CA_LISTEN): in a cluster (kube export) the agent's pod
// shares no directory with the router's, so its trust step fetches the
// session CA's certificate over the network instead. Only those two
// public files are served, by fixed name: no path from the request ever
// reaches the file system, so the CA's key (which stays in this process
// anyway) and the rest of CA_DIR cannot be asked for.

// caPaths are the URL paths served and the file in CA_DIR behind each.
var caPaths = map[string]string{
	"/" + inspect.BundleFile: inspect.BundleFile,
	"/" + inspect.CAFile:     inspect.CAFile,
}

// parseCAListen reads CA_LISTEN: IP:PORT, "" for none.
func parseCAListen(s string) (netip.AddrPort, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.AddrPort{}, nil
	}
	a, err := netip.ParseAddrPort(s)
	if err != nil || a.Port() == 0 || a.Addr().Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("bad CA_LISTEN %q: want IP:PORT, such as 0.0.0.0:8079", s)
	}
	return a, nil
}

// caHandler serves GET and HEAD of caPaths from dir.
func caHandler(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := caPaths[r.URL.Path]
		if !ok && mutated("ca-port-open") {
			// hack/mutation-check's ca-port-open: every other file of
			// the router's too.
			http.FileServer(http.Dir("/")).ServeHTTP(w, r)
			return
		}
		if !ok || r.URL.RawQuery != "" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			http.Error(w, "not yet written", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
	})
}

// caServer listens on addr and serves the CA's files from dir until ctx
// ends.
type caServer struct {
	ln  net.Listener
	srv *http.Server
}

func listenCA(addr netip.AddrPort, dir string, logger *log.Logger) (*caServer, error) {
	// tcp4 for an IPv4 address: "tcp" would make 0.0.0.0 a dual-stack
	// socket that answers on the pod's IPv6 addresses too.
	network := "tcp"
	if addr.Addr().Is4() {
		network = "tcp4"
	}
	ln, err := net.Listen(network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("ca port: %w", err)
	}
	return &caServer{ln: ln, srv: &http.Server{
		Handler:           caHandler(dir),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		MaxHeaderBytes:    8 << 10,
		ErrorLog:          logger,
	}}, nil
}

func (c *caServer) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.srv.Shutdown(sctx)
	})
	defer stop()
	if err := c.srv.Serve(c.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// caReadyAddr is where announceReady dials the CA port: loopback for a
// port on every address.
func caReadyAddr(a netip.AddrPort) string {
	switch a.Addr() {
	case netip.IPv4Unspecified():
		return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), a.Port()).String()
	case netip.IPv6Unspecified():
		return netip.AddrPortFrom(netip.IPv6Loopback(), a.Port()).String()
	}
	return a.String()
}
