package inspect

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", r.Proto, r.Host, r.URL.RequestURI())
	})
}

func TestLeafVerifiesAgainstTheSessionCA(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	bundle, err := os.ReadFile(filepath.Join(e.dir, "ca", BundleFile))
	if err != nil {
		t.Fatal(err)
	}
	upstreamCA, _ := os.ReadFile(u.caFile)
	if !bytes.HasPrefix(bundle, upstreamCA) || !bytes.HasSuffix(bundle, e.ca(t)) {
		t.Errorf("bundle.pem is not the trusted bundle followed by the session CA")
	}
	bundlePool := x509.NewCertPool()
	bundlePool.AppendCertsFromPEM(bundle)

	for _, name := range []string{"allowed.test", "a.wild.test", "deep.a.wild.test", "ALLOWED.test"} {
		c, err := e.handshake(name)
		if err != nil {
			t.Errorf("%s: handshake: %v", name, err)
			continue
		}
		st := c.ConnectionState()
		_ = c.Close()
		leaf := st.PeerCertificates[0]
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: bundlePool}); err != nil {
			t.Errorf("%s: leaf does not verify against bundle.pem: %v", name, err)
		}
		if want := []string{strings.ToLower(name)}; !slices.Equal(leaf.DNSNames, want) {
			t.Errorf("%s: leaf names %v, want %v", name, leaf.DNSNames, want)
		}
		if leaf.KeyUsage != x509.KeyUsageDigitalSignature || !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
			t.Errorf("%s: leaf usages %v %v", name, leaf.KeyUsage, leaf.ExtKeyUsage)
		}
		if len(leaf.AuthorityKeyId) == 0 || !bytes.Equal(leaf.AuthorityKeyId, e.p.ca.cert.SubjectKeyId) {
			t.Errorf("%s: leaf's authority key id %x, CA's subject key id %x", name, leaf.AuthorityKeyId, e.p.ca.cert.SubjectKeyId)
		}
	}

	ca := e.p.ca.cert
	if !ca.IsCA || !ca.BasicConstraintsValid || !ca.MaxPathLenZero || ca.MaxPathLen != 0 ||
		ca.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign || len(ca.SubjectKeyId) == 0 ||
		!strings.HasPrefix(ca.Subject.CommonName, "agent-sandbox session CA ") || ca.SerialNumber.BitLen() < 64 {
		t.Errorf("CA certificate: %+v", ca)
	}
	basicConstraints := asn1.ObjectIdentifier{2, 5, 29, 19}
	for _, ext := range ca.Extensions {
		if ext.Id.Equal(basicConstraints) && !ext.Critical {
			t.Error("the CA's basic constraints are not critical: strict verifiers refuse it")
		}
	}
	if d := ca.NotAfter.Sub(ca.NotBefore); d < 89*24*time.Hour || d > 92*24*time.Hour {
		t.Errorf("CA valid for %v", d)
	}
}

func TestRefusesNamesNotAdmitted(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	for _, name := range []string{"nope.test", "wild.test", "xwild.test", ""} {
		if c, err := e.handshake(name); err == nil {
			_ = c.Close()
			t.Errorf("%q: handshake succeeded", name)
		}
		if want := fmt.Sprintf("inspect refused sni=%q reason=\"not in the allowlist\"\n", name); !strings.Contains(e.out.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, e.out)
		}
	}
	e.p.ca.mu.Lock()
	_, minted := e.p.ca.leaves["nope.test"]
	e.p.ca.mu.Unlock()
	if minted {
		t.Error("a certificate was minted for a refused name")
	}
	if strings.Contains(e.logs.String(), "handshake") {
		t.Errorf("refusals logged twice:\n%s", e.logs)
	}
}

func TestMissingConfigAdmitsNothing(t *testing.T) {
	u := startUpstream(t, echoHandler())
	c := defaultConfig(u)
	c.hosts, c.wildcards = nil, nil
	// The trusted bundle is the system's then; tests point it at theirs.
	if _, err := os.Stat(DefaultTrustedCA); err != nil {
		t.Skip("no system bundle")
	}
	e := startEnv(t, c)
	if conn, err := e.handshake("allowed.test"); err == nil {
		_ = conn.Close()
		t.Error("admitted a name with no config")
	}
}

func TestReloadStopsAdmittingARemovedName(t *testing.T) {
	u := startUpstream(t, echoHandler())
	c := defaultConfig(u)
	e := startEnv(t, c)
	open, err := e.handshake("removed.test", "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	kept, err := e.handshake("allowed.test", "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()

	c.hosts = []string{"allowed.test"}
	writeConfig(t, e.file, c, e.dns.addr)
	waitFor(t, "the reload", func() bool {
		conn, err := e.handshake("removed.test")
		if err == nil {
			_ = conn.Close()
		}
		return err != nil
	})
	// The open connection to the removed name is closed too.
	_ = open.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(open, "GET / HTTP/1.1\r\nHost: removed.test\r\n\r\n"); err == nil {
		if _, err := bufio.NewReader(open).ReadString('\n'); err == nil {
			t.Error("a connection to a removed name still answers")
		}
	}
	_ = kept.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(kept, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if line, err := bufio.NewReader(kept).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Errorf("a connection to a name still allowed: %q, %v", line, err)
	}

	// A file that does not parse leaves the config as it was.
	if err := os.WriteFile(e.file+".tmp", []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.file+".tmp", e.file); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rejected reload", func() bool { return strings.Contains(e.logs.String(), "inspect: keeps its config") })
	if conn, err := e.handshake("allowed.test"); err != nil {
		t.Errorf("after a config that does not parse: %v", err)
	} else {
		_ = conn.Close()
	}
}

func TestRemovesCredentials(t *testing.T) {
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			http.SetCookie(w, &http.Cookie{Name: "sess", Value: "S3SS10N", Path: "/"})
			http.SetCookie(w, &http.Cookie{Name: "pref", Value: "dark"})
			http.SetCookie(w, &http.Cookie{Name: "pref", Value: "light"})
			http.SetCookie(w, &http.Cookie{Name: "gone", Value: "soon"})
			http.SetCookie(w, &http.Cookie{Name: "gone", MaxAge: -1})
		}
	}))
	e := startEnv(t, defaultConfig(u))
	c := e.client(false)
	get(t, c, "https://allowed.test/login", nil)

	h := http.Header{}
	var values []string
	for i, name := range credentialHeaders {
		h[name] = []string{nonce(i)}
		values = append(values, nonce(i))
	}
	h["X_api_key"] = []string{nonce(90)}
	h["Cookie"] = []string{"sess=S3SS10N; stolen=" + nonce(91) + "; pref=light; pref=dark; gone=soon"}
	values = append(values, nonce(90), nonce(91), nonce(92), nonce(93), nonce(94))
	query := "a=1&access_token=" + nonce(92) + "&PRIVATE_TOKEN=" + nonce(93) + "&b=2&%6Aob_token=" + nonce(94)
	resp, _ := get(t, c, "https://allowed.test/strip?"+query, h)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := u.last(t)
	for _, name := range credentialHeaders {
		if v, ok := got.Header[name]; ok {
			t.Errorf("%s reached the upstream: %q", name, v)
		}
	}
	if v, ok := got.Header["X_api_key"]; ok {
		t.Errorf("X_api_key reached the upstream: %q", v)
	}
	if c := got.Header.Values("Cookie"); !slices.Equal(c, []string{"sess=S3SS10N; pref=light"}) {
		t.Errorf("cookies upstream %q, want only the ones the host set", c)
	}
	if got.URL.RawQuery != "a=1&b=2" {
		t.Errorf("query upstream %q, want a=1&b=2", got.URL.RawQuery)
	}
	want := `inspect host=allowed.test method=GET path="/strip" proto=HTTP/1.1 status=200 removed="` +
		strings.Join(func() []string {
			var l []string
			for _, n := range credentialHeaders {
				l = append(l, strings.ToLower(n))
			}
			return l
		}(), ",") + `,x_api_key,cookie,query:access_token,query:private_token,query:job_token"` + "\n"
	e.waitOut(t, want)
	e.waitOut(t, `inspect host=allowed.test method=GET path="/login" proto=HTTP/1.1 status=200 removed="-"`)
	for _, v := range append(values, "S3SS10N") {
		if strings.Contains(e.out.String()+e.logs.String(), v) {
			t.Errorf("a value reached the log: %s", v)
		}
	}

	// A cookie of the session alone passes untouched, and no removal is
	// logged.
	get(t, c, "https://allowed.test/again", http.Header{"Cookie": {"sess=S3SS10N"}})
	if c := u.last(t).Header.Values("Cookie"); !slices.Equal(c, []string{"sess=S3SS10N"}) {
		t.Errorf("cookie upstream %q", c)
	}
	e.waitOut(t, `path="/again" proto=HTTP/1.1 status=200 removed="-"`)
	// Another host does not get this host's cookies.
	get(t, c, "https://a.wild.test/", http.Header{"Cookie": {"sess=S3SS10N"}})
	if c := u.last(t).Header.Values("Cookie"); len(c) != 0 {
		t.Errorf("another host's cookie passed: %q", c)
	}
}

func TestStripOffMutationPassesCredentials(t *testing.T) {
	u := startUpstream(t, echoHandler())
	c := defaultConfig(u)
	c.keep = true
	e := startEnv(t, c)
	get(t, e.client(false), "https://allowed.test/?access_token=x", http.Header{"Authorization": {"Bearer x"}})
	if got := u.last(t); got.Header.Get("Authorization") != "Bearer x" || got.URL.RawQuery != "access_token=x" {
		t.Errorf("with inspect-strip-off the upstream got %v %q", got.Header, got.URL.RawQuery)
	}
}

func TestStripUserinfoTrailersAndQueries(t *testing.T) {
	r := httptest.NewRequest("GET", "https://user:pass@maps.googleapis.com/x?key=K&q=1&Access%5Ftoken=T;x=1&api_key", nil)
	r.Trailer = http.Header{"Authorization": nil}
	removed := strip(r, "maps.googleapis.com", newJar(), false)
	if r.URL.User != nil || r.Trailer != nil || r.URL.RawQuery != "q=1" {
		t.Errorf("left user %v, trailer %v, query %q", r.URL.User, r.Trailer, r.URL.RawQuery)
	}
	if want := []string{"userinfo", "query:key", "query:access_token", "query:api_key", "trailer"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	// key is an ordinary word elsewhere.
	r = httptest.NewRequest("GET", "https://allowed.test/x?key=K", nil)
	if removed := strip(r, "allowed.test", newJar(), false); removed != nil || r.URL.RawQuery != "key=K" {
		t.Errorf("removed %v, query %q", removed, r.URL.RawQuery)
	}
}

func TestHostDifferentFromSNIIsMisdirected(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("GET", "https://allowed.test/", nil)
		req.Host = "api.example.com"
		resp, err := e.client(h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "differs from the TLS") {
			t.Errorf("h2=%v: %d %q", h2, resp.StatusCode, body)
		}
	}
	if n := u.hits.Load(); n != 0 {
		t.Errorf("the upstream was called %d times", n)
	}
	if want := `inspect refused host="api.example.com" sni="allowed.test" reason="host differs from the TLS name"`; !strings.Contains(e.out.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, e.out)
	}
	// Same name, other case, port 443: the same host.
	req, _ := http.NewRequest("GET", "https://allowed.test/", nil)
	req.Host = "Allowed.Test:443"
	resp, err := e.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("Host with port 443: %d", resp.StatusCode)
	}
}

func TestHTTP2AndStreaming(t *testing.T) {
	release := make(chan struct{})
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			fmt.Fprint(w, r.Proto)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: two\n\n")
	}))
	e := startEnv(t, defaultConfig(u))
	for _, h2 := range []bool{false, true} {
		resp, body := get(t, e.client(h2), "https://allowed.test/proto", nil)
		wantProto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		if resp.Proto != wantProto {
			t.Errorf("downstream %s, want %s", resp.Proto, wantProto)
		}
		// Upstream in the agent's own protocol.
		if body != wantProto {
			t.Errorf("upstream spoke %s, want %s", body, wantProto)
		}
		e.waitOut(t, `path="/proto" proto=`+wantProto+" status=200")

		resp, err := e.client(h2).Get("https://allowed.test/stream")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		first := make(chan string, 1)
		go func() {
			line, _ := br.ReadString('\n')
			first <- line
		}()
		select {
		case line := <-first:
			if line != "data: one\n" {
				t.Errorf("first chunk %q", line)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("h2=%v: the first chunk did not arrive before the second was written", h2)
		}
		release <- struct{}{}
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if string(rest) != "\ndata: two\n\n" {
			t.Errorf("rest %q", rest)
		}
	}
}

// pattern is a reader of n bytes that need not sit in memory: byte i is
// i%251, copied from a table so that making it costs next to nothing.
type pattern struct{ n, off int64 }

var patternTable = func() []byte {
	b := make([]byte, 251+64<<10)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}()

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n-p.off {
		b = b[:p.n-p.off]
	}
	n := 0
	for n < len(b) {
		n += copy(b[n:], patternTable[(p.off+int64(n))%251:])
	}
	p.off += int64(n)
	return n, nil
}

// checkPattern reads r to its end and says whether it was pattern's n bytes.
func checkPattern(r io.Reader, n int64) error {
	buf := make([]byte, 64<<10)
	var off int64
	for {
		k, err := r.Read(buf)
		for i := range k {
			if buf[i] != byte((off+int64(i))%251) {
				return fmt.Errorf("byte %d differs", off+int64(i))
			}
		}
		off += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if off != n {
		return fmt.Errorf("%d bytes, want %d", off, n)
	}
	return nil
}

func TestLargeUploadAndDownload(t *testing.T) {
	const size = 64 << 20
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			if err := checkPattern(r.Body, size); err != nil {
				http.Error(w, err.Error(), 400)
			}
			return
		}
		_, _ = io.Copy(w, &pattern{n: size})
	}))
	e := startEnv(t, defaultConfig(u))
	for _, h2 := range []bool{false, true} {
		c := e.client(h2)
		resp, err := c.Post("https://allowed.test/up", "application/octet-stream", &pattern{n: size})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("h2=%v upload: %d %s", h2, resp.StatusCode, body)
		}
		resp, err = c.Get("https://allowed.test/down")
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(resp.Body, size); err != nil {
			t.Errorf("h2=%v download: %v", h2, err)
		}
		resp.Body.Close()
	}
}

func TestUpgradeEchoesBothWays(t *testing.T) {
	u := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || r.ProtoMajor != 1 {
			http.Error(w, "want an upgrade over HTTP/1.1", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(c, brw)
	}))
	e := startEnv(t, defaultConfig(u))
	c, err := e.handshake("allowed.test", "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nAuthorization: Bearer "+nonce(1)+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	for _, msg := range []string{"ping", "a longer message\n", strings.Repeat("x", 100000)} {
		fmt.Fprint(c, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo of %d bytes: %v", len(msg), err)
		}
	}
	if got := u.last(t).Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization reached the upstream on an upgrade")
	}
	_ = c.Close()
	e.waitOut(t, `path="/ws" proto=HTTP/1.1 status=101 removed="authorization"`)

	// Another upgrade would tunnel requests past the strip.
	hits := u.hits.Load()
	for _, target := range []string{"GET /h2c HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n", "CONNECT allowed.test:443 HTTP/1.1\r\n"} {
		c, err := e.handshake("allowed.test", "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, target+"Host: allowed.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %v, %v", target, resp, err)
		}
		_ = c.Close()
	}
	if u.hits.Load() != hits {
		t.Error("a request upgrading to h2c or a CONNECT reached the upstream")
	}
}

func TestUntrustedUpstreamIsBadGateway(t *testing.T) {
	u := startUpstream(t, echoHandler())
	other := startUpstream(t, echoHandler())
	c := defaultConfig(u)
	c.trustedCA = other.caFile // u's certificate is not signed by it
	e := startEnv(t, c)
	resp, body := get(t, e.client(false), "https://allowed.test/secret?x=1", http.Header{"Authorization": {"x"}})
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d %s", resp.StatusCode, body)
	}
	if n := u.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	if !strings.Contains(e.logs.String(), "inspect allowed.test: upstream: tls: failed to verify certificate") {
		t.Errorf("log:\n%s", e.logs)
	}
	e.waitOut(t, `path="/secret" proto=HTTP/1.1 status=502 removed="authorization"`)
}

func TestGatesGetPlainHTTPWithTheHostKept(t *testing.T) {
	u := startUpstream(t, echoHandler())
	got := make(chan *http.Request, 1)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Clone(r.Context())
		fmt.Fprint(w, "from the gate")
	}))
	defer gate.Close()
	c := defaultConfig(u)
	c.gates = map[string]string{"api.example.com": gate.Listener.Addr().String()}
	e := startEnv(t, c)
	for _, h2 := range []bool{false, true} {
		resp, body := get(t, e.client(h2), "https://api.example.com/v1/messages", http.Header{"Authorization": {"Bearer " + nonce(1)}, "X-Api-Key": {nonce(2)}})
		if resp.StatusCode != 200 || body != "from the gate" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		r := <-got
		if r.Host != "api.example.com" || r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" || r.URL.Path != "/v1/messages" {
			t.Errorf("the gate got Host %q, headers %v, path %q", r.Host, r.Header, r.URL.Path)
		}
	}
	if u.hits.Load() != 0 {
		t.Error("a gated host's request went to the upstream")
	}
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		want := `inspect host=api.example.com method=GET path="/v1/messages" proto=` + proto + ` status=200 removed="authorization,x-api-key"`
		e.waitOut(t, want)
	}
	if strings.Contains(e.out.String(), nonce(1)) || strings.Contains(e.out.String(), nonce(2)) {
		t.Errorf("log:\n%s", e.out)
	}
}

func TestNoPrivateKeyInTheCADir(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	dir := filepath.Join(e.dir, "ca")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range entries {
		names = append(names, de.Name())
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("PRIVATE KEY")) {
			t.Errorf("%s holds a private key", de.Name())
		}
		fi, _ := de.Info()
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s mode %v, want 0644", de.Name(), fi.Mode().Perm())
		}
	}
	if !slices.Equal(names, []string{BundleFile, CAFile}) {
		t.Errorf("CA dir holds %v", names)
	}
	if bytes.Count(e.ca(t), []byte("BEGIN CERTIFICATE")) != 1 {
		t.Error("ca.pem is not one certificate")
	}
	fi, err := os.Stat(e.sock)
	if err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket: %v, %v; want mode 0666", fi, err)
	}
}

func TestResolverOverTCPWhenTruncated(t *testing.T) {
	// UDP answers truncated; the full answer only over TCP on the same port.
	addr := startTruncatingDNS(t)
	addrs, err := lookupA(t.Context(), addr, "allowed.test")
	if err != nil || len(addrs) != 1 || addrs[0].String() != "127.0.0.1" {
		t.Errorf("lookup %v, %v", addrs, err)
	}
	if _, err := lookupA(t.Context(), addr, "unknown.test"); err == nil {
		t.Error("an unknown name resolved")
	}
}

func TestOnlyTheResolverIsAsked(t *testing.T) {
	u := startUpstream(t, echoHandler())
	e := startEnv(t, defaultConfig(u))
	before := e.dns.queries.Load()
	get(t, e.client(false), "https://a.wild.test/", nil)
	if e.dns.queries.Load() == before {
		t.Error("the upstream name was not resolved through the configured resolver")
	}
}

func TestQueryUnescapes(t *testing.T) {
	for raw, want := range map[string]string{
		"a=1":                    "a=1",
		"access_token=x":         "",
		"a=1&Access_Token=x&b=2": "a=1&b=2",
		"acc%65ss_token=x&b":     "b",
		"a=1;token=x&b=2":        "b=2",
		"tokens=1&token_x=2":     "tokens=1",
		"max_tokens=5&apiToken=x&page_token=p&access.token=x&sub-key=y&$key=z&author=a": "max_tokens=5&page_token=p&$key=z&author=a",
	} {
		if got, _ := stripQuery(raw, false); got != want {
			t.Errorf("stripQuery(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestWarmMintsABoundedNumber: a long list's names are not all signed at
// start (half a CPU-second as the agent starts); the rest get theirs on
// first use.
func TestWarmMintsABoundedNumber(t *testing.T) {
	ca, err := newAuthority()
	if err != nil {
		t.Fatal(err)
	}
	pol := &policy{hosts: map[string]bool{}}
	for i := range 3 * warmLeaves {
		pol.hosts[fmt.Sprintf("h%d.test", i)] = true
	}
	p := &Proxy{ca: ca, cfg: Config{Log: log.New(io.Discard, "", 0)}}
	p.mint(pol)
	if got := len(ca.leaves); got != warmLeaves {
		t.Fatalf("minted %d certificates ahead of time, want %d", got, warmLeaves)
	}
	if _, err := ca.leaf("h1000.test"); err != nil {
		t.Fatal(err)
	}
}
