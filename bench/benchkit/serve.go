package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/agent-sandbox/agent-sandbox/internal/dnsserve"
)

const serveReady = "benchkit: serving"

// runServe is the data path's upstream: an authoritative DNS server for a
// few *.test names (it never recurses, so nothing it is asked leaves the
// machine) and an HTTPS server that streams and swallows blobs. It logs
// nothing per request but one line per streamed answer (its host and
// whether it carried the right credential): the fake upstream of the e2e
// suite logs with O_SYNC, which would weigh on the direct baseline more
// than on the sandbox.
func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	zoneFlag := fs.String("zone", "", "name=IPv4 or *.suffix=IPv4, comma-separated; *.test names only")
	dnsAddr := fs.String("dns", ":53", "DNS address (UDP and TCP)")
	httpsAddr := fs.String("https", ":443", "HTTPS address")
	cert := fs.String("cert", "", "server certificate PEM")
	key := fs.String("key", "", "server key PEM")
	apiHost := fs.String("api-host", "", "the stream's API host: its requests must carry the key of -api-key-file in x-api-key")
	apiKeyFile := fs.String("api-key-file", "", "file holding the key the credential proxy adds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	z, err := parseZone(*zoneFlag)
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return fmt.Errorf("load -cert/-key: %w", err)
	}
	check := &streamCheck{apiHost: *apiHost, log: os.Stdout}
	if *apiHost != "" {
		b, err := os.ReadFile(*apiKeyFile)
		if check.apiKey = strings.TrimSpace(string(b)); err != nil || check.apiKey == "" {
			return fmt.Errorf("-api-host needs a key in -api-key-file: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	pc, err := net.ListenPacket("udp", *dnsAddr)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	tl, err := net.Listen("tcp", *dnsAddr)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	hl, err := net.Listen("tcp", *httpsAddr)
	if err != nil {
		return fmt.Errorf("https: %w", err)
	}
	go dnsserve.UDP(pc, z.answer)
	go dnsserve.TCP(tl, 10*time.Second, z.answer, nil)
	srv := blobServer(pair, check)
	go func() { _ = srv.ServeTLS(hl, "", "") }()
	fmt.Printf("%s dns=%s https=%s\n", serveReady, pc.LocalAddr(), hl.Addr())
	<-ctx.Done()
	_ = pc.Close()
	_ = tl.Close()
	return srv.Close()
}

// blobServer serves GET /blob?bytes=N (N zero bytes), PUT /upload (read and
// counted), GET /small (three bytes) and the streamed answers of POST
// /v1/messages (stream.go), over HTTP/1.1 only, so that both paths of the
// comparison speak the same protocol.
func blobServer(pair tls.Certificate, check *streamCheck) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /blob", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "want ?bytes=N", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 256<<10)
		for n > 0 {
			k, err := w.Write(buf[:min(n, int64(len(buf)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	})
	mux.HandleFunc("PUT /upload", func(w http.ResponseWriter, r *http.Request) {
		// A plain writer keeps io.Discard's small ReaderFrom buffer out.
		n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, r.Body, make([]byte, 256<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, n)
	})
	mux.HandleFunc("GET /small", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /v1/messages", check.stream)
	return &http.Server{
		Handler:           mux,
		ConnState:         check.connState,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}},
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
}

// zone maps exact names and wildcard suffixes to one IPv4 address each.
type zone struct {
	exact map[string]netip.Addr
	wild  map[string]netip.Addr // "bench.test" for *.bench.test
}

func parseZone(s string) (*zone, error) {
	z := &zone{exact: map[string]netip.Addr{}, wild: map[string]netip.Addr{}}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, ip, ok := strings.Cut(f, "=")
		addr, err := netip.ParseAddr(ip)
		if !ok || err != nil || !addr.Is4() {
			return nil, fmt.Errorf("bad zone entry %q: want name=IPv4", f)
		}
		if !isTestName(name) {
			return nil, fmt.Errorf("bad zone entry %q: only *.test names may be answered", f)
		}
		name = strings.ToLower(strings.TrimSuffix(name, "."))
		if suffix, ok := strings.CutPrefix(name, "*."); ok {
			z.wild[suffix] = addr
		} else {
			z.exact[name] = addr
		}
	}
	if len(z.exact)+len(z.wild) == 0 {
		return nil, errors.New("-zone is empty: name at least one *.test name")
	}
	return z, nil
}

func (z *zone) lookup(name string) (netip.Addr, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if a, ok := z.exact[name]; ok {
		return a, true
	}
	for i := strings.IndexByte(name, '.'); i >= 0; {
		if a, ok := z.wild[name[i+1:]]; ok {
			return a, true
		}
		j := strings.IndexByte(name[i+1:], '.')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return netip.Addr{}, false
}

// answer builds the reply to one query: A records for zone names, an empty
// answer for their other types, NXDOMAIN for everything else.
func (z *zone) answer(req []byte, _ string, _ net.Addr) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	addr, known := z.lookup(q.Name.String())
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil
	}
	if known && q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60}
		if b.AResource(rr, dnsmessage.AResource{A: addr.As4()}) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
