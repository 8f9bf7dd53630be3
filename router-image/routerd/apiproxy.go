package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
	"github.com/agent-sandbox/agent-sandbox/router-image/routerd/apipolicy"
)

// The API gate: the router adds the user's key to the agent's requests to
// the model APIs, so every such request is made in the user's name. The
// gate stands in front of nginx's credential proxy, on the port the agent
// reaches: it reads each request whole (bounded), asks apipolicy what the
// request may do, refuses it with the provider's own error shape or sends
// it on (with a trimmed tool where the policy trimmed one) to nginx, which
// removes the agent's credential, adds the user's and speaks TLS to the
// API host. Answers stream back as they come.

// apiPolicyFile is the gate's config in the launcher's dir: the routes,
// the rules the user allowed, and the allowlist's names.
const apiPolicyFile = "api-policy.json"

// apiPolicy is that file's content (internal/routerconf writes it).
type apiPolicy struct {
	Routes []apiRoute `json:"routes"`
	// Allow are the rules the user turned off by name.
	Allow []string `json:"allow,omitempty"`
	// Hosts are the allowlist's exact names on 443, Wildcards the
	// suffixes of its `*.` entries.
	Hosts     []string `json:"hosts"`
	Wildcards []string `json:"wildcards,omitempty"`
}

type apiRoute struct {
	Provider string `json:"provider"`
	Host     string `json:"host"`
	// Listen is where the agent's requests arrive (the router's session
	// address and the provider's port), Upstream nginx's unix socket.
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
}

func readAPIPolicy(path string) (apiPolicy, error) {
	var p apiPolicy
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// options are the policy's view of the session.
func (p apiPolicy) options() apipolicy.Options {
	allow := map[string]bool{}
	for _, a := range p.Allow {
		allow[a] = true
	}
	exact := map[string]bool{}
	for _, h := range p.Hosts {
		exact[h] = true
	}
	wild := p.Wildcards
	return apipolicy.Options{Allow: allow, Hosts: p.Hosts, Admits: func(h string) bool {
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if exact[h] {
			return true
		}
		for _, w := range wild {
			if strings.HasSuffix(h, "."+w) {
				return true
			}
		}
		return false
	}}
}

// apiGate serves the routes of the policy file and follows its changes
// (an allowlist edit changes what a web fetch tool may name).
type apiGate struct {
	path string
	log  *log.Logger
	out  io.Writer // the router's log, which the launcher reads

	mu      sync.Mutex
	opts    apipolicy.Options
	servers map[string]*http.Server // by listen address
	// reading holds a token for each body being read and checked.
	reading chan struct{}
}

func newAPIGate(path string, out io.Writer, logger *log.Logger) *apiGate {
	return &apiGate{path: path, out: out, log: logger, servers: map[string]*http.Server{}, reading: make(chan struct{}, 4)}
}

// load reads the policy and starts a server for each new route; routes
// that went away are closed.
func (g *apiGate) load() error {
	p, err := readAPIPolicy(g.path)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opts = p.options()
	want := map[string]bool{}
	for _, r := range p.Routes {
		want[r.Listen] = true
		if _, ok := g.servers[r.Listen]; ok {
			continue
		}
		ln, err := net.Listen("tcp", r.Listen)
		if err != nil {
			return fmt.Errorf("api gate: %w", err)
		}
		// ReadTimeout bounds the request alone (the answer may stream
		// for as long as it takes): an agent's requests are sent at once.
		srv := &http.Server{Handler: g.handler(r), ReadHeaderTimeout: 30 * time.Second, ReadTimeout: 5 * time.Minute}
		g.servers[r.Listen] = srv
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				g.log.Printf("api gate %s: %v", r.Listen, err)
			}
		}()
	}
	for addr, srv := range g.servers {
		if !want[addr] {
			_ = srv.Close()
			delete(g.servers, addr)
		}
	}
	return nil
}

// follow reloads the policy when the launcher rewrites it: an allowlist
// edit adds or removes routes and changes what a web fetch tool may name.
func (g *apiGate) follow(ctx context.Context, every time.Duration) {
	var last filestamp.Stamp
	if fi, err := os.Stat(g.path); err == nil {
		last = filestamp.Of(fi)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(g.path)
		if err != nil || filestamp.Of(fi) == last {
			continue
		}
		last = filestamp.Of(fi)
		if err := g.load(); err != nil {
			g.log.Printf("api gate: keeps its policy: %v", err)
		}
	}
}

func (g *apiGate) options() apipolicy.Options {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.opts
}

func (g *apiGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.servers {
		_ = s.Close()
	}
}

// handler checks one route's requests and passes the admitted ones to
// nginx on its unix socket.
func (g *apiGate) handler(r apiRoute) http.Handler {
	provider := apipolicy.Provider(r.Provider)
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", r.Upstream)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = r.Host
			pr.Out.Host = r.Host
		},
		Transport: transport,
		// Server-sent events pass as they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			g.log.Printf("api gate %s: upstream: %v", r.Host, err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// A few bodies at a time: each is read whole and parsed, and a
		// router that runs out of memory ends the session.
		select {
		case g.reading <- struct{}{}:
		case <-req.Context().Done():
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, apipolicy.MaxBody+1))
		if err != nil {
			<-g.reading
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// The path as sent, escapes and all: what nginx passes on is what
		// the rules must see (a %2F that matched once decoded would not
		// be the path the provider reads).
		path := req.URL.EscapedPath()
		d := apipolicy.Check(provider, apipolicy.Request{Method: req.Method, Path: path, RawQuery: req.URL.RawQuery,
			ContentEncoding: strings.Join(req.Header.Values("Content-Encoding"), ","), Body: body}, g.options())
		<-g.reading
		// hack/mutation-check's api-endpoint-open passes every endpoint,
		// api-body-open every body.
		if d.Refused && (mutated("api-endpoint-open") && strings.HasSuffix(d.Rule, ".endpoint") ||
			mutated("api-body-open") && !strings.HasSuffix(d.Rule, ".endpoint")) {
			d = apipolicy.Decision{}
		}
		if d.Refused {
			// Neither headers nor body: the log is the launcher's to read.
			fmt.Fprintf(g.out, "api-refused host=%s method=%q path=%q rule=%s status=%d\n", r.Host, req.Method, path, d.Rule, d.Status)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(d.Status)
			_, _ = w.Write(apipolicy.ErrorBody(provider, d))
			return
		}
		for _, n := range d.Notes {
			fmt.Fprintf(g.out, "api-changed host=%s path=%q note=%s\n", r.Host, path, strconv.Quote(n))
		}
		for _, n := range d.Allowed {
			fmt.Fprintf(g.out, "api-allowed host=%s path=%q note=%s\n", r.Host, path, strconv.Quote(n))
		}
		if d.Body != nil {
			body = d.Body
		}
		// Headers that would make the provider read the request as another
		// one than the rules did (Google's APIs take a method override), or
		// turn it into a stream the gate cannot read.
		for _, h := range []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "Upgrade", "Http2-Settings"} {
			req.Header.Del(h)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Length", strconv.Itoa(len(body)))
		req.Header.Del("Transfer-Encoding")
		proxy.ServeHTTP(w, req)
	})
}
