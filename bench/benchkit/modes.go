package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
)

// mode is one cluster of a figure's samples: its median, range and size.
type mode struct {
	median, lo, hi float64
	n              int
}

// maxModes bounds how many clusters modes reports.
const maxModes = 3

// modes splits samples into clusters at wide gaps, so that a figure with
// two modes (podman 4.3.1's `podman run` waits either about 0.13 s or,
// when its wait is interrupted, 0.25 s more: see BENCHMARKS.md) is shown as
// two values instead of a median that lands on either. A gap splits when
// it is at least a quarter of the median below it and at least as wide as
// the range of the samples on either side of it, and leaves on each side
// at least 2 samples and a tenth of them all; the widest such gap splits
// first, up to maxModes clusters. Load from others spreads every figure,
// and a spread without such a gap is one mode: the second mode of a bare
// `podman run` stands out on a quiet machine and drowns in a busy one's
// noise. Returned lowest first.
func modes(samples []float64) []mode {
	v := slices.Clone(samples)
	if len(v) == 0 {
		return nil
	}
	sort.Float64s(v)
	minSize := max(2, int(math.Ceil(float64(len(v))/10)))
	parts := [][]float64{v}
	for len(parts) < maxModes {
		bestPart, bestAt, bestGap := -1, 0, 0.0
		for p, part := range parts {
			for i := minSize; i <= len(part)-minSize; i++ {
				g := part[i] - part[i-1]
				spread := max(part[i-1]-part[0], part[len(part)-1]-part[i])
				if g < 0.25*median(part[:i]) || g < spread || g <= bestGap {
					continue
				}
				bestPart, bestAt, bestGap = p, i, g
			}
		}
		if bestPart < 0 {
			break
		}
		part := parts[bestPart]
		parts = slices.Replace(parts, bestPart, bestPart+1, part[:bestAt], part[bestAt:])
	}
	out := make([]mode, len(parts))
	for i, p := range parts {
		out[i] = mode{median: median(p), lo: p[0], hi: p[len(p)-1], n: len(p)}
	}
	return out
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// formatModes writes clusters as "0.131 s (18 runs, 0.120–0.160)".
func formatModes(ms []mode, unit string, scale float64) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		runs := "runs"
		if m.n == 1 {
			runs = "run"
		}
		parts[i] = fmt.Sprintf("%.3f %s (%d %s, %.3f–%.3f)", m.median*scale, unit, m.n, runs, m.lo*scale, m.hi*scale)
	}
	return strings.Join(parts, "; ")
}

// startupKeys are the start-up figures whose distribution the report
// shows, in order.
var startupKeys = []struct{ key, name string }{
	{"t_bare", "T_bare (`--network none`)"},
	{"t_bare_slirp", "T_bare_slirp (default network: its own slirp4netns)"},
	{"t_bare_net", "T_bare_net (egress network, rootless netns kept up)"},
	{"t_cli", "T_cli"},
	{"t_session", "T_session"},
	{"t_agent", "T_agent"},
}

// startupDistributions shows each start-up figure's spread and modes, and
// every start-up target computed from the minima as well as from the
// medians: on a shared machine the minimum is each command's least
// disturbed run, the median its typical one.
func startupDistributions(s samples, w io.Writer) {
	var rows []string
	for _, k := range startupKeys {
		st, ok := s.stat(k.key)
		if !ok {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %.3f s | %.3f s | %.3f s | %s |",
			k.name, st.n, st.lo, st.median, st.hi, formatModes(modes(s[k.key]), "s", 1)))
	}
	writeTable(w, "Each start-up figure's spread over all its runs, and its modes (clusters of runs split at wide gaps: one mode means none was found):",
		"| figure | n | min | median | max | modes: median (runs, range) |", "|---|---:|---:|---:|---:|---|", rows)
	rows = nil
	for _, f := range figures {
		if f.group != "Start-up" || f.base == "" {
			continue
		}
		st, ok1 := s.stat(f.key)
		bs, ok2 := s.stat(f.base)
		if !ok1 || !ok2 || bs.median == 0 || bs.lo == 0 {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s / %s | %.2f | %.2f | %s |",
			strings.SplitN(f.name, ":", 2)[0], f.baseName, st.median/bs.median, st.lo/bs.lo, f.target))
	}
	writeTable(w, "The start-up targets by the medians (as in the results table) and by the minima:",
		"| ratio | of medians | of minima | target |", "|---|---:|---:|---|", rows)
	for _, l := range []struct{ key, part string }{{"startup", "start-up rounds"}, {"data", "data-path rounds"}, {"list", "rounds of the 10- and the 5,000-entry list"}} {
		loadAround(s, l.key, l.part, w)
	}
}

// loadAround says how busy the machine was around a part's rounds: the
// load average before and after each, and how busy the cores were in the
// half second before each started (bench/run waits for a lull).
func loadAround(s samples, key, part string, w io.Writer) {
	st, ok := s.stat("load_" + key)
	if !ok {
		return
	}
	fmt.Fprintf(w, "\nThe machine's 1-minute load average before and after each of the %s: median %.2f (%.2f–%.2f, n=%d) on %s cores.",
		part, st.median, st.lo, st.hi, st.n, s.param("cores", "2"))
	busy, ok1 := s.stat(key + "_busy_pct")
	wait, ok2 := s.stat(key + "_wait_s")
	if ok1 && ok2 {
		fmt.Fprintf(w, " In the half second before each round the cores were %.0f %% busy (median; %.0f–%.0f %%); waiting for that lull took %.1f s (median; at most %.1f s).",
			busy.median, busy.lo, busy.hi, wait.median, wait.hi)
	}
	fmt.Fprintln(w)
}
