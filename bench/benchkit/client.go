package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runClient measures the data path from wherever it runs: in the sandbox
// (names resolve through the router, connections go through the forwarder
// and the router) or in a container on the egress network (the baseline).
// It prints one "key value" sample line per measurement.
func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	caFile := fs.String("ca", "", "CA certificate PEM that signed the server")
	host := fs.String("host", "blob.test", "server name (a *.test name)")
	dnsServer := fs.String("dns", "", "IP:port of the DNS server to ask (default: the system resolver)")
	label := fs.String("label", "", "sample key infix, for example direct or sandbox")
	size := fs.Int64("bytes", 256<<20, "bytes to download and to upload")
	small := fs.Int("small", 200, "sequential small HTTPS requests, a new connection each")
	phaseList := fs.String("phases", "download,upload,small", "which measurements to make, comma-separated (to profile one alone)")
	gatePrefix := fs.String("gate", "", "after the warm-up request create PREFIX.ready and wait for PREFIX.go; after the download and upload create PREFIX.moved and wait for PREFIX.more (bench/run reads the relays' CPU around them)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	phases := map[string]bool{}
	for p := range strings.SplitSeq(*phaseList, ",") {
		if p != "download" && p != "upload" && p != "small" {
			return fmt.Errorf("-phases: unknown phase %q (want download, upload, small)", p)
		}
		phases[p] = true
	}
	if !isTestName(*host) {
		return fmt.Errorf("-host %s: only *.test names may be used", *host)
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		return fmt.Errorf("read -ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("-ca %s holds no certificate", *caFile)
	}
	c := &client{base: "https://" + *host, roots: roots, resolver: resolver(*dnsServer)}

	// One request first, so that neither path pays a cold cache in the figures.
	if err := c.get("/small", 3); err != nil {
		return fmt.Errorf("warm-up request: %w", err)
	}
	if *gatePrefix != "" {
		if err := gate(*gatePrefix+".ready", *gatePrefix+".go", 10*time.Minute); err != nil {
			return err
		}
	}
	// MiB and seconds throughout: the report divides like by like.
	mib := float64(*size) / (1 << 20)
	if phases["download"] {
		d, err := timed(func() error { return c.get("/blob?bytes="+strconv.FormatInt(*size, 10), *size) })
		if err != nil {
			return fmt.Errorf("download: %w", err)
		}
		fmt.Printf("dl_%s_mibps %.3f\n", *label, mib/d.Seconds())
	}
	if phases["upload"] {
		d, err := timed(func() error { return c.put(*size) })
		if err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		fmt.Printf("ul_%s_mibps %.3f\n", *label, mib/d.Seconds())
	}
	if *gatePrefix != "" {
		if err := gate(*gatePrefix+".moved", *gatePrefix+".more", 10*time.Minute); err != nil {
			return err
		}
	}
	if phases["small"] {
		var steps requestSteps
		d, err := timed(func() error {
			for range *small {
				if err := c.getTraced("/small", 3, &steps); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("small requests: %w", err)
		}
		fmt.Printf("small_%s_s %.4f\n", *label, d.Seconds())
		steps.print(*label)
	}
	// The client's own CPU, to set the relays' CPU against.
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		fmt.Printf("cpu_client_%s_s %.3f\n", *label, seconds(ru.Utime)+seconds(ru.Stime))
	}
	return nil
}

// gate creates said, to say where the client is (after its warm-up
// request the session's data path is up; after the download and upload the
// data is moved), and waits up to limit until await exists.
func gate(said, await string, limit time.Duration) error {
	if err := os.WriteFile(said, nil, 0o644); err != nil {
		return err
	}
	for end := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(await); err == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("-gate: no %s after %v", await, limit)
		}
	}
}

func seconds(t syscall.Timeval) float64 {
	return float64(t.Sec) + float64(t.Usec)/1e6
}

func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

// resolver asks server if given, else the system resolver. Either way the
// client resolves every connection anew, as curl in a loop would.
func resolver(server string) *net.Resolver {
	if server == "" {
		return &net.Resolver{PreferGo: true}
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
}

type client struct {
	base     string
	roots    *x509.CertPool
	resolver *net.Resolver
}

// transport makes a fresh connection for every request: no keep-alive, no
// TLS session resumption, HTTP/1.1.
func (c *client) transport() *http.Transport {
	return &http.Transport{
		DialContext:        c.dial,
		TLSClientConfig:    &tls.Config{RootCAs: c.roots, NextProtos: []string{"http/1.1"}},
		DisableKeepAlives:  true,
		DisableCompression: true,
		// Large buffers keep the client's syscalls from being what is measured.
		WriteBufferSize: 256 << 10,
		ReadBufferSize:  256 << 10,
	}
}

// dial resolves the name fully qualified, so no search domain is ever tried.
func (c *client) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ips, err := c.resolver.LookupNetIP(ctx, "ip4", strings.TrimSuffix(host, ".")+".")
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("%s has no IPv4 address", host)
	}
	resolved := time.Now()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp4", net.JoinHostPort(ips[0].String(), port))
	if s, ok := ctx.Value(stepsKey{}).(*requestSteps); ok && err == nil {
		s.dns = append(s.dns, resolved.Sub(start))
		s.connect = append(s.connect, time.Since(resolved))
	}
	return conn, err
}

type stepsKey struct{}

// requestSteps collects where each small request's time goes, so that
// the sandbox's extra time per request can be placed: the DNS lookup, the
// TCP connect, the TLS handshake, and the request to its first byte.
type requestSteps struct {
	dns, connect, tls, firstByte, total []time.Duration
}

func (s *requestSteps) print(label string) {
	for _, st := range []struct {
		name string
		d    []time.Duration
	}{{"dns", s.dns}, {"connect", s.connect}, {"tls", s.tls}, {"ttfb", s.firstByte}, {"total", s.total}} {
		if len(st.d) == 0 {
			continue
		}
		slices.Sort(st.d)
		fmt.Printf("small_%s_%s_ms %.3f\n", label, st.name, float64(st.d[len(st.d)/2])/1e6)
	}
}

// getTraced is get that records the request's steps in s.
func (c *client) getTraced(path string, want int64, s *requestSteps) error {
	var tlsStart, wrote time.Time
	start := time.Now()
	trace := &httptrace.ClientTrace{
		TLSHandshakeStart: func() { tlsStart = time.Now() },
		TLSHandshakeDone: func(tls.ConnectionState, error) {
			s.tls = append(s.tls, time.Since(tlsStart))
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { wrote = time.Now() },
		GotFirstResponseByte: func() { s.firstByte = append(s.firstByte, time.Since(wrote)) },
	}
	ctx := httptrace.WithClientTrace(context.WithValue(context.Background(), stepsKey{}, s), trace)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	if err := c.fetch(req, want); err != nil {
		return err
	}
	s.total = append(s.total, time.Since(start))
	return nil
}

func (c *client) do(req *http.Request) (*http.Response, error) {
	hc := &http.Client{Transport: c.transport(), Timeout: 5 * time.Minute}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status)
	}
	return resp, nil
}

// get fetches path and checks that want bytes arrived.
func (c *client) get(path string, want int64) error {
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	return c.fetch(req, want)
}

func (c *client) fetch(req *http.Request, want int64) error {
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, make([]byte, 256<<10))
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("got %d bytes, want %d", n, want)
	}
	return nil
}

// put uploads n zero bytes and checks the count the server read.
func (c *client) put(n int64) error {
	req, err := http.NewRequest(http.MethodPut, c.base+"/upload", io.LimitReader(zeros{}, n))
	if err != nil {
		return err
	}
	req.ContentLength = n
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	got, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil || got != n {
		return errors.New("the server read " + strings.TrimSpace(string(body)) + " bytes, want " + strconv.FormatInt(n, 10))
	}
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
