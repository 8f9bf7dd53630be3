//go:build e2e

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Published ports (issue 24): --publish makes a server inside reachable
// from the host's loopback, and from nowhere else.

func TestPublish(t *testing.T) {
	runSecRows(t, secRow{52, "a published port is reached from the host's 127.0.0.1 only: not on its other addresses, not from another session, not by another site's page in the user's browser; the agent reaches nothing out through it; a taken port refuses the session", rowPublish})
}

// freePort is a port nothing on the host's loopback listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// hostAddress is one of the host's own non-loopback IPv4 addresses.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatal("this host has no non-loopback IPv4 address")
	return ""
}

// connectProbe is a python program that connects to each NAME=IP:PORT
// given and sends an HTTP request for /NAME-NONCE, printing "NAME
// connected" or "NAME ERRNO".
const connectProbe = `import socket, sys, errno
nonce = sys.argv[1]
for arg in sys.argv[2:]:
    name, addr = arg.split("=")
    host, port = addr.rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=3)
        s.sendall(("GET /%s-%s HTTP/1.0\r\n\r\n" % (name, nonce)).encode())
        s.recv(100)
        print(name, "connected", flush=True)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e)), flush=True)
`

// probeOutcomes reads connectProbe's lines.
func probeOutcomes(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, what, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			got[name] = what
		}
	}
	return got
}

func rowPublish(t *testing.T, ev *evidence) {
	nonce := newNonce(t)
	hp1, hp2 := freePort(t), freePort(t)
	for hp2 == hp1 {
		hp2 = freePort(t)
	}
	hostIP := hostAddress(t)
	// Inside A: a server on 127.0.0.1:8000 and one on 0.0.0.0:8001, each
	// logging the paths it is asked for; once both answer, the agent tries
	// to reach out through the published path: the host's loopback as
	// slirp4netns and pasta show it, and the host's own address, at the
	// host port.
	script := fmt.Sprintf(`python3 -m http.server 8000 --protocol HTTP/1.1 --bind 127.0.0.1 2>>access-8000.log >/dev/null &
python3 -m http.server 8001 2>>access-8001.log >/dev/null &
for i in $(seq 100); do python3 -c 'import socket; [socket.create_connection(("127.0.0.1", p), 1).close() for p in (8000, 8001)]' 2>/dev/null && break; sleep 0.1; done
cat > probe.py <<'EOF'
%sEOF
python3 probe.py %s slirp-host=10.0.2.2:%d pasta-host=169.254.1.2:%d host-address=%s:%d > outward.txt
touch ready
i=0; while [ ! -e done ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done`, connectProbe, nonce, hp1, hp1, hostIP, hp1)
	a := startLauncher(t, sessionOpts{Trace: true, Args: []string{"--publish", fmt.Sprintf("%d:8000", hp1), "--publish", fmt.Sprintf("%d:8001", hp2), "--exec", "sh", "-c", script}})
	finish := func() {
		_ = os.WriteFile(filepath.Join(a.Dir, "done"), nil, 0o644)
		a.wait()
	}
	if !a.waitFile("ready", 60*time.Second) {
		a.signal(unix.SIGTERM)
		a.wait()
		t.Fatal("the session with published ports did not start")
	}
	// The session's name under .localhost: the launch dir's base name.
	own1 := fmt.Sprintf("%s.localhost:%d", strings.ToLower(filepath.Base(a.Dir)), hp1)
	own2 := fmt.Sprintf("%s.localhost:%d", strings.ToLower(filepath.Base(a.Dir)), hp2)
	if want := fmt.Sprintf("published: http://%s reaches port 8000 in the sandbox", own1); !strings.Contains(a.Stderr(), want) {
		t.Errorf("the start did not print the URL %q:\n%s", want, indent(a.Stderr()))
	}
	access := func() string {
		b1, _ := os.ReadFile(filepath.Join(a.Dir, "access-8000.log"))
		b2, _ := os.ReadFile(filepath.Join(a.Dir, "access-8001.log"))
		return string(b1) + string(b2)
	}

	// The host's loopback reaches both servers (the one bound to
	// 127.0.0.1 included), by the session's name as a browser would, and
	// as 127.0.0.1 as a script would.
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(port int, path string, header map[string]string) (int, string) {
		req, err := http.NewRequest("GET", "http://127.0.0.1:"+strconv.Itoa(port)+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("the host could not reach 127.0.0.1:%d%s: %v", port, path, err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	served := func(code int) bool { return code == 200 || code == 404 }
	for _, c := range []struct {
		port   int
		path   string
		header map[string]string
	}{
		{hp1, "/in8000-" + nonce, map[string]string{"Host": own1, "Origin": "http://" + own1, "Sec-Fetch-Site": "same-origin"}},
		{hp2, "/in8001-" + nonce, map[string]string{"Host": own2, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Site": "none"}},
		{hp1, "/script-" + nonce, nil},
	} {
		if code, _ := get(c.port, c.path, c.header); !served(code) {
			t.Errorf("%d%s: status %d, want the server's answer", c.port, c.path, code)
		}
	}
	// What a page of another site in the user's browser would send: a
	// CORS read, a rebound name, the session's server as 127.0.0.1 (whose
	// cookies are the user's other local apps'). Each refused (403) by the
	// forwarder before the server sees it.
	for name, header := range map[string]map[string]string{
		"cors":     {"Host": own1, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"},
		"nocors":   {"Host": own1, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
		"rebind":   {"Host": "rebind.evil.example:" + strconv.Itoa(hp1)},
		"loopback": {"Sec-Fetch-Mode": "navigate", "Cookie": "other-app=" + nonce},
	} {
		if code, body := get(hp1, "/"+name+"-"+nonce, header); code != 403 || !strings.Contains(body, "agent-sandbox: refused") {
			t.Errorf("%s: status %d %q, want the forwarder's 403", name, code, body)
		}
	}
	// A connection the page's own request opened, then reused for another
	// site's read: the second request never arrives, the connection ends.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(hp1), 3*time.Second); err != nil {
		t.Errorf("dial the published port: %v", err)
	} else {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "GET /own-%s HTTP/1.1\r\nHost: %s\r\nSec-Fetch-Site: same-origin\r\n\r\n", nonce, own1)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("the page's own request on a kept-alive connection: %v", err)
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// The server (HTTP/1.1) keeps the connection; the page reuses it.
			fmt.Fprintf(c, "GET /reuse-%s HTTP/1.1\r\nHost: %s\r\nOrigin: https://evil.example\r\nSec-Fetch-Site: cross-site\r\n\r\n", nonce, own1)
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Errorf("another site's request on the page's connection was answered: %q", rest)
			}
		}
		c.Close()
	}
	// Not on the host's other address: refused there, and never arrives.
	_, err := net.DialTimeout("tcp", net.JoinHostPort(hostIP, strconv.Itoa(hp1)), 3*time.Second)
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the published port on the host's own address %s: %v, want connection refused", hostIP, err)
	}

	// Another session tries the host's loopback, the host's address and
	// A's pod (its address and the inner port) by every path it has.
	podA := podAddressOf(t, a.sessionName())
	// Run beside A, by hand: runSession's leftover check would count A's
	// objects.
	b := startLauncher(t, sessionOpts{Trace: true, Cmd: []string{"sh", "-c", "cat > probe.py <<'EOF'\n" + connectProbe + "EOF\n" +
		fmt.Sprintf("python3 probe.py %s b-loopback=127.0.0.1:%d b-slirp=10.0.2.2:%d b-hostaddr=%s:%d b-pod-inner=%s:61000 b-pod-8001=%s:8001",
			nonce, hp1, hp1, hostIP, hp1, podA, podA)}}).wait()
	b.wantCode(0)
	finish()
	a.wantCode(0)

	outward, _ := os.ReadFile(filepath.Join(a.Dir, "outward.txt"))
	for name, want := range map[string]string{"slirp-host": "ENETUNREACH", "pasta-host": "ENETUNREACH", "host-address": "ENETUNREACH"} {
		if got := probeOutcomes(string(outward))[name]; got != want {
			t.Errorf("the agent's %s probe: %q, want %s (outward.txt: %q)", name, got, want, outward)
		}
	}
	for name, want := range map[string]string{"b-loopback": "ECONNREFUSED", "b-slirp": "ENETUNREACH", "b-hostaddr": "ENETUNREACH", "b-pod-inner": "ENETUNREACH", "b-pod-8001": "ENETUNREACH"} {
		if got := probeOutcomes(b.Stdout())[name]; got != want {
			t.Errorf("the second session's %s probe: %q, want %s:\n%s", name, got, want, indent(b.Stdout()))
		}
	}
	log := access()
	for _, p := range []string{"slirp-host", "pasta-host", "host-address", "b-loopback", "b-slirp", "b-hostaddr", "b-pod-inner", "b-pod-8001", "cors", "nocors", "rebind", "loopback", "reuse"} {
		if strings.Contains(log, p+"-"+nonce) {
			t.Errorf("LEAK: %s's request reached a server inside the first session", p)
		}
	}
	// Opened path: the host's own requests on 127.0.0.1 are seen there.
	for _, p := range []string{"/in8000-" + nonce, "/in8001-" + nonce, "/script-" + nonce, "/own-" + nonce} {
		if !strings.Contains(log, p) {
			t.Errorf("the host's request %s is not in the servers' logs:\n%s", p, log)
		}
	}
	assertNoLeftovers(t)
	if err := checkPortFree(hp1); err != nil {
		t.Errorf("host port %d is still taken after the session: %v", hp1, err)
	}

	// A port that is taken refuses a session before anything is created.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	before := podmanInventory(t)
	r := runSession(t, sessionOpts{Args: []string{"--publish", strconv.Itoa(taken), "--exec", "echo", "ran-" + nonce}})
	wantCode(t, r, 1)
	if want := fmt.Sprintf("--publish %d:%d: port %d on this host is taken", taken, taken, taken); !strings.Contains(r.Stderr(), want) || strings.Contains(r.Stdout(), "ran-") {
		t.Errorf("a taken port: stderr lacks %q (or the agent ran):\n%s", want, indent(r.Stderr()))
	}
	if after := podmanInventory(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("a refused --publish created objects:\nbefore %v\nafter %v", before, after)
	}
	if !t.Failed() {
		ev.add("servers on 127.0.0.1:8000 and 0.0.0.0:8001 inside reached at 127.0.0.1:%d and :%d on the host as %s (a browser's same-origin and navigation requests) and as 127.0.0.1 (a script's), the requests' nonces in their logs (opened path); a CORS read and a no-cors load from another site, a rebound name and a browser's request to 127.0.0.1 refused (403) and never arrived; another site's request on a connection the session's own page opened never arrived; %s:%d refused; the agent's tries at the host through 10.0.2.2, 169.254.1.2 and %s: ENETUNREACH; a second session: its own loopback ECONNREFUSED, the host and the first pod (%s:61000, :8001) ENETUNREACH; none of their nonces in the logs; a taken port refused, nothing created",
			hp1, hp2, own1, hostIP, hp1, hostIP, podA)
	}
}

// podAddressOf is the address of session's pod on its own network: .3,
// beside the router's .2, when it publishes ports.
func podAddressOf(t *testing.T, session string) string {
	t.Helper()
	out, err := podman("network", "inspect", "--format", "{{range .Subnets}}{{.Subnet}}{{end}}", session)
	if err != nil {
		t.Fatalf("network inspect %s: %v", session, err)
	}
	subnet := strings.TrimSpace(out)
	base, _, ok := strings.Cut(subnet, "/")
	if !ok || !strings.HasSuffix(base, ".0") {
		t.Fatalf("session network %s has subnet %q", session, subnet)
	}
	return strings.TrimSuffix(base, ".0") + ".3"
}

func checkPortFree(port int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	return ln.Close()
}
