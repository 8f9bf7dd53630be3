package inspect

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// The benchmarks compare a request through the proxy (unix socket, the
// session's TLS, credentials stripped, the upstream's TLS) with the same
// request straight to the upstream over loopback. Client, proxy and
// upstream share the process, so -cpu 1 is the router's GOMAXPROCS(1)
// for all three.

const benchBody = 4 << 20

func benchUpstream(b *testing.B) (*upstream, *env) {
	u := startUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case "POST":
			_, _ = io.Copy(io.Discard, r.Body)
		default:
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			_, _ = io.CopyN(w, &pattern{n: int64(n)}, int64(n))
		}
	}))
	return u, startEnv(b, defaultConfig(u))
}

// benchClients are the two ways to the upstream, keeping connections
// alive unless fresh is set.
func benchClients(u *upstream, e *env, fresh bool) map[string]*http.Client {
	direct := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", u.srv.Listener.Addr().String())
		},
		TLSClientConfig:   &tls.Config{RootCAs: u.ca.Pool()},
		DisableKeepAlives: fresh,
	}
	proxy := e.client(false).Transport.(*http.Transport)
	proxy.DisableKeepAlives = fresh
	return map[string]*http.Client{"direct": {Transport: direct}, "proxy": {Transport: proxy}}
}

func BenchmarkInspectDownload(b *testing.B) {
	u, e := benchUpstream(b)
	for _, name := range []string{"direct", "proxy"} {
		c := benchClients(u, e, false)[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchBody)
			for b.Loop() {
				resp, err := c.Get("https://allowed.test/down?n=" + strconv.Itoa(benchBody))
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != benchBody {
					b.Fatalf("%d bytes, %v", n, err)
				}
				resp.Body.Close()
			}
		})
	}
}

func BenchmarkInspectUpload(b *testing.B) {
	u, e := benchUpstream(b)
	for _, name := range []string{"direct", "proxy"} {
		c := benchClients(u, e, false)[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchBody)
			for b.Loop() {
				req, _ := http.NewRequest("POST", "https://allowed.test/up", &pattern{n: benchBody})
				req.ContentLength = benchBody
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// BenchmarkNewConnection is a small request on a new connection each
// time: the handshakes (the proxy's leaf is cached, its upstream
// connection kept).
func BenchmarkNewConnection(b *testing.B) {
	u, e := benchUpstream(b)
	for _, name := range []string{"direct", "proxy"} {
		c := benchClients(u, e, true)[name]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				resp, err := c.Get("https://allowed.test/small?n=100")
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
