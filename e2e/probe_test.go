//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A probe is one shell snippet run inside the sandbox. Several run in one
// session; each reports its exit status and output between markers so rows
// can assert on them separately.
type probe struct {
	Name  string
	Shell string
}

type probeResult struct {
	RC      int
	Out     string
	Elapsed time.Duration
}

const probeMark = "@@probe"

// probeScript runs every probe in order, never stopping at a failure.
func probeScript(probes ...probe) string {
	var b strings.Builder
	for i, p := range probes {
		fmt.Fprintf(&b, "p%d() {\n%s\n}\n", i, p.Shell)
		fmt.Fprintf(&b, "t0=$(date +%%s%%N); out=$(p%d 2>&1 </dev/null); rc=$?; t1=$(date +%%s%%N)\n", i)
		fmt.Fprintf(&b, "printf '%s %%s rc=%%d ms=%%d\\n%%s\\n%s-end\\n' %s \"$rc\" $(( (t1 - t0) / 1000000 )) \"$out\"\n",
			probeMark, probeMark, shellQuote(p.Name))
	}
	b.WriteString("exit 0\n")
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func parseProbes(stdout string) map[string]probeResult {
	res := map[string]probeResult{}
	var name string
	var cur *probeResult
	var out []string
	for _, line := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(line, probeMark+"-end"):
			if cur != nil {
				cur.Out = strings.Join(out, "\n")
				res[name] = *cur
			}
			cur, out = nil, nil
		case strings.HasPrefix(line, probeMark+" "):
			rest := strings.TrimPrefix(line, probeMark+" ")
			i := strings.LastIndex(rest, " rc=")
			if i < 0 {
				continue
			}
			var rc, ms int
			_, _ = fmt.Sscanf(rest[i+1:], "rc=%d ms=%d", &rc, &ms)
			name, cur, out = rest[:i], &probeResult{RC: rc, Elapsed: time.Duration(ms) * time.Millisecond}, nil
		case cur != nil:
			out = append(out, line)
		}
	}
	return res
}

// probeSession runs the probes in one session and returns their results;
// a probe that did not report fails the row.
func probeSession(t *testing.T, o sessionOpts, probes ...probe) (map[string]probeResult, *launcher) {
	t.Helper()
	o.Cmd = []string{"sh", "-c", probeScript(probes...)}
	r := runSession(t, o)
	wantCode(t, r, 0)
	res := parseProbes(r.Stdout())
	for _, p := range probes {
		if _, ok := res[p.Name]; !ok {
			t.Errorf("probe %q did not report", p.Name)
		}
	}
	return res, r
}

func (p probeResult) String() string {
	return fmt.Sprintf("rc=%d after %s, output:\n%s", p.RC, p.Elapsed, indent(p.Out))
}

// wantOK asserts the probe exited 0 and printed every part of want.
func wantOK(t *testing.T, res map[string]probeResult, name string, want ...string) {
	t.Helper()
	p, ok := res[name]
	if !ok {
		return
	}
	if p.RC != 0 {
		t.Errorf("%s failed: %s", name, p)
		return
	}
	for _, w := range want {
		if !strings.Contains(p.Out, w) {
			t.Errorf("%s: output lacks %q: %s", name, w, p)
		}
	}
}

// wantFailed asserts the client side of a block: the probe exited non-zero.
func wantFailed(t *testing.T, res map[string]probeResult, name string) {
	t.Helper()
	if p, ok := res[name]; ok && p.RC == 0 {
		t.Errorf("LEAK: %s succeeded but must be blocked: %s", name, p)
	}
}

// Shell snippets the rows share. They run as claude in the launch dir, which
// holds the test CA as ca.pem.
func curlHTTPS(host, path string) string {
	return fmt.Sprintf("curl -sS --max-time 15 --cacert ./ca.pem https://%s/%s", host, path)
}

func ncSend(host, port, payload string) string {
	return fmt.Sprintf("printf '%%s\\n' %s | nc -N -w 10 %s %s", shellQuote(payload), host, port)
}
