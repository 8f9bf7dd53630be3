//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// TestHarness proves the fake upstream is reachable and logging for a
// container on the egress network without any sandbox in the way. Without
// it, every "blocked" row could pass against a dead fake.
func TestHarness(t *testing.T) {
	row(t, "fake upstream answers and logs from the egress network", func(t *testing.T) {
		dnsNonce, httpsNonce, tcpNonce, plainNonce := newNonce(t), newNonce(t), newNonce(t), newNonce(t)
		probes := []probe{
			{"dns", "dig @" + fakeIP + " +time=3 +tries=2 " + dnsNonce + ".allowed.test A"},
			{"dns-nx", "dig @" + fakeIP + " +time=3 +tries=2 " + dnsNonce + "-nx.nowhere.test A"},
			{"dns-tcp", "dig @" + fakeIP + " +tcp +time=3 +tries=2 +short allowed.test A"},
			{"https", "curl -sS --max-time 15 --cacert /fake/ca.pem --resolve allowed.test:443:" + fakeIP +
				" https://allowed.test/" + httpsNonce},
			{"tcp", ncSend(fakeIP, "2222", tcpNonce)},
			{"plaintext", "printf 'GET /" + plainNonce + " HTTP/1.0\\r\\n\\r\\n' | nc -N -w 5 " + fakeIP + " 443"},
		}
		// --dns pins any accidental lookup to the fake; the probes name the
		// fake's address themselves and never use the machine's resolver.
		out, err := podman("run", "--rm", "--label", harnessLabel+"=control",
			"--network", egressNet, "--dns", fakeIP, "-v", harness.fakeDir+":/fake:ro",
			"--entrypoint", "sh", harness.sandboxImage, "-c", probeScript(probes...))
		if err != nil {
			t.Fatalf("control container: %v\n%s", err, out)
		}
		res := parseProbes(out)
		wantOK(t, res, "dns", "status: NOERROR", fakeIP)
		wantOK(t, res, "dns-nx", "status: NXDOMAIN")
		wantOK(t, res, "dns-tcp", fakeIP)
		wantOK(t, res, "https", "hello from allowed.test", "path /"+httpsNonce)
		wantOK(t, res, "tcp", tcpNonce)
		wantArrived(t, dnsNonce, "dns query")
		wantArrived(t, httpsNonce, "https request")
		wantArrived(t, tcpNonce, "tcp payload")
		wantArrived(t, plainNonce, "plaintext on the TLS port")
		if got := fakeLogLines("dns tcp query", `"allowed.test."`); len(got) == 0 {
			t.Errorf("no DNS-over-TCP line in the fake log:\n%s", fakeLog())
		}
		if t.Failed() {
			t.Logf("control probes:\n%s", strings.TrimSpace(out))
		}
	})
}
