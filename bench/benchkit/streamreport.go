package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// streamDetails shows the stream part beyond the table: each round's own
// ratios (proxy and direct ran back to back), where the first byte's time
// goes on each path, what the upstream saw of the credential, and the
// machine's load around the rounds.
func streamDetails(s samples, w io.Writer) {
	if _, ok := s.stat("stream_proxy_ttfb_s"); !ok {
		if _, ok := s.stat("stream_direct_ttfb_s"); !ok {
			return
		}
	}
	fmt.Fprint(w, "\n### Streamed answers through the credential proxy\n")
	rows := []struct{ key, name string }{
		{"ttfb_s", "first byte, new connection"},
		{"warm_ttfb_s", "first byte, kept-alive connection"},
		{"mibps", "throughput"},
	}
	var out []string
	for _, r := range rows {
		p, d := s["stream_proxy_"+r.key], s["stream_direct_"+r.key]
		if len(p) == 0 || len(p) != len(d) {
			continue
		}
		ratios := make([]string, len(p))
		for i := range p {
			ratios[i] = "–"
			if d[i] > 0 {
				ratios[i] = strconv.FormatFloat(p[i]/d[i], 'f', 2, 64)
			}
		}
		out = append(out, fmt.Sprintf("| %s | %s |", r.name, strings.Join(ratios, ", ")))
	}
	writeTable(w, "Each round's own ratio, proxy / direct, in the order run (odd rounds ran the proxy first):",
		"| measurement | ratio per round |", "|---|---|", out)

	steps := []struct{ key, name string }{
		{"dns", "DNS lookup (curl; none for 127.0.0.1)"},
		{"connect", "TCP connect (to the forwarder in the pod)"},
		{"tls", "TLS handshake (curl's, end to end; none for plain HTTP to the proxy)"},
		{"wait", "request sent to first byte (the proxy's own upstream TLS handshake is in here)"},
		{"ttfb", "first byte, from curl's start"},
	}
	out = nil
	for _, st := range steps {
		p, pok := s.stat("stream_proxy_" + st.key + "_s")
		d, dok := s.stat("stream_direct_" + st.key + "_s")
		if !pok || !dok {
			continue
		}
		out = append(out, fmt.Sprintf("| %s | %.2f ms | %.2f ms | %+.2f ms |", st.name, p.median*1000, d.median*1000, (p.median-d.median)*1000))
	}
	writeTable(w, "Where the first byte's time goes on a new connection (curl's -w times, median of each step over the rounds):",
		"| step | proxy | direct | proxy − direct |", "|---|---:|---:|---:|", out)

	ok, okSeen := s.stat("stream_upstream_api_ok")
	bad, _ := s.stat("stream_upstream_api_bad")
	none, _ := s.stat("stream_upstream_direct_none")
	dbad, _ := s.stat("stream_upstream_direct_bad")
	if okSeen {
		verdict := "as it should"
		if bad.sum > 0 || dbad.sum > 0 || ok.sum == 0 {
			verdict = "**which is wrong**"
		}
		fmt.Fprintf(w, "\nThe upstream checked every streamed request: through the proxy %.0f carried the user's key in x-api-key and no Authorization, %.0f did not; direct, %.0f carried no credential, %.0f did (%s; warm-up fetches included).\n",
			ok.sum, bad.sum, none.sum, dbad.sum, verdict)
	}
	for _, side := range []struct{ key, name string }{{"api", "Through the proxy"}, {"direct", "Direct"}} {
		conns, ok := s.stat("stream_upstream_" + side.key + "_conns")
		if !ok {
			continue
		}
		reqs, _ := s.stat("stream_upstream_api_ok")
		bad, _ := s.stat("stream_upstream_api_bad")
		if side.key == "direct" {
			reqs, _ = s.stat("stream_upstream_direct_none")
			bad, _ = s.stat("stream_upstream_direct_bad")
		}
		resumed, _ := s.stat("stream_upstream_" + side.key + "_resumed")
		fmt.Fprintf(w, "\n%s, the upstream got %s on %s (%.0f of them resumed a TLS session)",
			side.name, count(reqs.sum+bad.sum, "request"), count(conns.sum, "connection"), resumed.sum)
		if setup, ok := s.stat("stream_upstream_" + side.key + "_setup_ms"); ok {
			fmt.Fprintf(w, "; a new connection's first request arrived %.2f ms (median; %.2f–%.2f) after the upstream accepted it: TCP, the client's TLS handshake, the request",
				setup.median, setup.lo, setup.hi)
		}
		fmt.Fprintln(w, ".")
	}
	loadAround(s, "stream", "stream rounds", w)
}

// count writes "1 connection", "24 connections".
func count(n float64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatFloat(n, 'f', 0, 64) + " " + noun + "s"
}
