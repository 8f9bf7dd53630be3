//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Markers close the suite's "it never arrived" checks. A blocked probe's
// nonce may be absent from a log only because the log has not caught up
// yet: a datagram still queued, a connection whose handler has not run.
// So after the probes a fresh nonce, the marker, goes to every listener a
// log is fed by, from a container on the network the probes' traffic
// would have come in on, and the check waits until each marker is in its
// log. Only then does "absent" mean "never arrived"; a marker that does
// not arrive fails the row, since the log could not have shown a leak.
//
// Why a marker's line comes after every earlier arrival's:
//   - the fakes' UDP listeners (DNS and datagrams) and the sniffer read
//     one queue in one loop and log before they answer: a marker read from
//     the queue was behind everything queued before it;
//   - a TCP listener accepts in order and hands each connection to a
//     goroutine of its own. The marker's line proves the listener got that
//     far; a probe's connection accepted before it had its data waiting
//     (its client had ended before the marker was sent), so its goroutine
//     logs in microseconds, while the marker needs a container started
//     and a handshake of its own after that. This is the one ordering
//     assumption, and it has a margin of a sizeable fraction of a second;
//   - row 27's listener of session A's agent has the same shape (a
//     thread per connection, one loop per UDP socket), and A's router's
//     log is read with podman logs, which keeps the order it was written in;
//   - the host canaries log in this process, before they echo.

// A mark is one marker: what sec.py mark sends (kind: udp, tcp, http,
// proxy, dns-udp, dns-tcp, https) to host:port, and the log it must reach.
// Kind "sniff" sends nothing: it is a frame of another marker, which the
// sniffer in log must have logged.
type mark struct {
	log, kind, host, port, nonce string
}

func (m mark) spec() string { return m.kind + "|" + m.host + "|" + m.port + "|" + m.nonce }

func (m mark) String() string {
	if m.kind == "sniff" {
		return fmt.Sprintf("%s: the sniffer's frame of %s", m.log, m.nonce)
	}
	return fmt.Sprintf("%s: %s to %s:%s (%s)", m.log, m.kind, m.host, m.port, m.nonce)
}

// in says whether the log text holds the marker: a line of the listener
// itself, since a log with a sniffer also holds the frames of its marker.
func (m mark) in(text string) bool {
	nd := needle(m.nonce)
	for _, line := range strings.Split(strings.ToLower(text), "\n") {
		if strings.Contains(line, nd) && strings.Contains(line, " sniff ") == (m.kind == "sniff") {
			return true
		}
	}
	return false
}

// readyLine is the line a fake logs once every listener is bound, naming
// each: "ready dns=[::]:53 tls=[::]:443 tcp=[::]:22,[::]:2222 udp=...".
var readyLine = regexp.MustCompile(`(?m) ready (dns=.*)$`)

// listenerMarks are the markers for every listener the fake writing text
// said it has, sent to host; sniff says whether it runs the sniffer. The
// listeners come from the fake's own word, so one added later gets its
// marker too.
func listenerMarks(t *testing.T, log, text, host string) (marks []mark, sniff bool, err error) {
	t.Helper()
	m := readyLine.FindAllStringSubmatch(text, -1)
	if m == nil {
		return nil, false, fmt.Errorf("%s has no ready line: no way to know its listeners", log)
	}
	kinds := map[string][]string{"dns": {"dns-udp", "dns-tcp"}, "tls": {"https"}, "tcp": {"tcp"}, "udp": {"udp"}, "http": {"http"}, "proxy": {"proxy"}}
	for _, field := range strings.Fields(m[len(m)-1][1]) {
		k, v, _ := strings.Cut(field, "=")
		if k == "sniff" {
			sniff = v == "on"
			continue
		}
		if kinds[k] == nil || v == "off" {
			continue
		}
		for _, addr := range strings.Split(v, ",") {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, false, fmt.Errorf("%s's ready line: %s: %v", log, field, err)
			}
			for _, kind := range kinds[k] {
				marks = append(marks, mark{log: log, kind: kind, host: host, port: port, nonce: newNonce(t)})
			}
		}
	}
	if len(marks) == 0 {
		return nil, false, fmt.Errorf("%s's ready line names no listener: %q", log, m[len(m)-1][0])
	}
	return marks, sniff, nil
}

var markerDir struct {
	once sync.Once
	path string
	err  error
}

// sendMarks runs sec.py mark in a container on the given networks (the
// egress network when none). A spec's host may be $H: the address the
// container reaches the host at, or hostFallback where podman names none.
// The container's output is returned for a failure's message only: the
// logs are what count.
func sendMarks(t *testing.T, marks []mark, hostFallback string, networks ...string) string {
	t.Helper()
	markerDir.once.Do(func() {
		markerDir.path = filepath.Join(harness.workDir, "marker")
		if markerDir.err = os.MkdirAll(markerDir.path, 0o755); markerDir.err == nil {
			markerDir.err = os.WriteFile(filepath.Join(markerDir.path, "sec.py"), []byte(secPy), 0o755)
		}
	})
	if markerDir.err != nil {
		t.Fatalf("marker dir: %v", markerDir.err)
	}
	var specs []string
	for _, m := range marks {
		if m.kind != "sniff" {
			specs = append(specs, `"`+m.spec()+`"`)
		}
	}
	script := "python3 -S ./sec.py mark " + strings.Join(specs, " ")
	if hostFallback != "" {
		// As the control container finds the host (buildControl).
		script = `H="$(getent ahostsv4 host.containers.internal | head -n1 | cut -d' ' -f1 | grep . || echo ` + hostFallback + `)"; ` + script
	}
	if len(networks) == 0 {
		networks = []string{egressNet}
	}
	args := []string{"run", "--rm", "--label", harnessLabel + "=marker"}
	for _, n := range networks {
		args = append(args, "--network", n)
	}
	args = append(args, "-v", markerDir.path+":/w:ro", "-w", "/w", "--entrypoint", "sh", harness.sandboxImage, "-c", script)
	out, err := podman(args...)
	if err != nil {
		return fmt.Sprintf("%v\n%s", err, out)
	}
	return out
}

// markTimeout bounds the wait for the markers. They are normally in their
// logs before the container has even exited (each listener logs before it
// answers); this is slack for a loaded machine.
const markTimeout = 30 * time.Second

// waitMarks waits until every marker is in its log, as text reads it. When
// one is not, the row fails: the logs cannot tell what never arrived.
func waitMarks(t *testing.T, what string, marks []mark, text func(log string) string, sent string) bool {
	t.Helper()
	var missing []string
	start := time.Now()
	for deadline := start.Add(markTimeout); ; time.Sleep(50 * time.Millisecond) {
		missing = missing[:0]
		for _, m := range marks {
			if !m.in(text(m.log)) {
				missing = append(missing, m.String())
			}
		}
		if len(missing) == 0 {
			t.Logf("%s: all %d markers in their logs (%v after the sender ended)", what, len(marks), time.Since(start).Round(time.Millisecond))
			return true
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("%s: %d of %d markers never reached their logs within %v, so those logs cannot show what never arrived:\n%s\nthe markers' sender said:\n%s",
		what, len(missing), len(marks), markTimeout, indent(strings.Join(missing, "\n")), indent(sent))
	return false
}

// settleFakeLog sends a marker to each of the harness fake's listeners and
// waits for all: the fake's log then holds everything a probe before it
// got through to the fake.
func settleFakeLog(t *testing.T, what string) bool {
	t.Helper()
	marks, _, err := listenerMarks(t, "fake", fakeLog(), fakeIP)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return false
	}
	sent := sendMarks(t, marks, "")
	return waitMarks(t, what, marks, func(string) string { return fakeLog() }, sent)
}

// markerLines tells the lines the markers caused from all others, for the
// checks that read every line of a window: those with a marker's nonce
// and those of the same connection without it (a TCP echo's "tcp connect"
// and "tcp close", the host canaries' "host tcp connect"), which name its
// from=ADDR:PORT as the marker's own line does.
type markerLines struct {
	needles []string
	froms   map[string]bool
}

var fromField = regexp.MustCompile(` from=(\S+)`)

// add records marks, whose lines are in texts.
func (f *markerLines) add(marks []mark, texts ...string) {
	if f.froms == nil {
		f.froms = map[string]bool{}
	}
	start := len(f.needles)
	for _, m := range marks {
		f.needles = append(f.needles, needle(m.nonce))
	}
	for _, text := range texts {
		for _, line := range strings.Split(strings.ToLower(text), "\n") {
			for _, nd := range f.needles[start:] {
				if strings.Contains(line, nd) {
					if m := fromField.FindStringSubmatch(line); m != nil {
						f.froms[m[1]] = true
					}
					break
				}
			}
		}
	}
}

func (f *markerLines) caused(line string) bool {
	low := strings.ToLower(line)
	for _, nd := range f.needles {
		if strings.Contains(low, nd) {
			return true
		}
	}
	m := fromField.FindStringSubmatch(low)
	return m != nil && f.froms[m[1]]
}

// without drops the lines the markers caused from text.
func (f *markerLines) without(text string) string {
	var keep []string
	for _, line := range strings.SplitAfter(text, "\n") {
		if line != "" && !f.caused(line) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// settle closes a batch of the security rows' probes: a marker to every
// listener of the fakes, the canaries and the gateway canary, from a
// container on the egress network, where a router's traffic comes from;
// every one of them also crosses podman's network namespace, where the
// sniffer must log it. The same container sends one over TCP and one over
// UDP to the host canaries by way of the uplink (slirp4netns or pasta),
// as a leak to the host would go, and this process one to each of the
// host canaries' own sockets (loopback among them), which only the host
// reaches. It fails the row and returns false if a marker is missing.
func (e *secEnv) settle(t *testing.T, what string) bool {
	t.Helper()
	targets := []struct{ log, host string }{{"fake", fakeIP}, {"secfake", secFakeIP}, {"gateway", egressGW}}
	for _, c := range secCanaries {
		targets = append(targets, struct{ log, host string }{c.name, c.ip})
	}
	var marks []mark
	var sniffers []string
	for _, tg := range targets {
		ms, sniff, err := listenerMarks(t, tg.log, e.logText(tg.log), tg.host)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return false
		}
		marks = append(marks, ms...)
		if sniff {
			sniffers = append(sniffers, tg.log)
		}
	}
	if len(sniffers) == 0 {
		t.Errorf("%s: no log says its fake runs the sniffer", what)
		return false
	}
	port := strconv.Itoa(e.hostPort)
	for _, proto := range []string{"tcp", "udp"} {
		marks = append(marks, mark{log: "host canaries", kind: proto, host: "$H", port: port, nonce: newNonce(t)})
	}
	var sniffed []mark
	for _, s := range sniffers {
		for _, m := range marks {
			sniffed = append(sniffed, mark{log: s, kind: "sniff", nonce: m.nonce})
		}
	}
	sent := sendMarks(t, marks, e.hostIPs[0])
	marks = append(append(marks, sniffed...), e.markHostSockets(t)...)
	ok := waitMarks(t, what, marks, e.logText, sent)
	var texts []string
	for _, name := range e.logNames() {
		texts = append(texts, e.logText(name))
	}
	e.markers.add(marks, texts...)
	return ok
}

// markHostSockets sends a marker to each socket of the host canaries, TCP
// and UDP on every address, and reads its echo, which comes after the line.
func (e *secEnv) markHostSockets(t *testing.T) []mark {
	t.Helper()
	port := strconv.Itoa(e.hostPort)
	var marks []mark
	for _, addr := range append([]string{"127.0.0.1", "::1"}, e.hostIPs...) {
		for _, proto := range []string{"tcp", "udp"} {
			m := mark{log: "host canaries", kind: proto, host: addr, port: port, nonce: newNonce(t)}
			marks = append(marks, m)
			c, err := net.DialTimeout(proto, net.JoinHostPort(addr, port), 5*time.Second)
			if err != nil {
				continue // waitMarks names it
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write([]byte(m.nonce + "\n"))
			_, _ = c.Read(make([]byte, 64))
			_ = c.Close()
		}
	}
	return marks
}
