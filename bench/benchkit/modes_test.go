package main

import (
	"strings"
	"testing"
)

func TestModes(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []float64
		want []mode
	}{
		{"empty", nil, nil},
		{"one sample", []float64{0.2}, []mode{{0.2, 0.2, 0.2, 1}}},
		// podman run --rm on this machine kind: most runs fast, some
		// 0.25 s later.
		{"two modes", []float64{0.131, 0.352, 0.128, 0.140, 0.135, 0.348, 0.133, 0.360, 0.129, 0.137},
			[]mode{{0.133, 0.128, 0.140, 7}, {0.352, 0.348, 0.360, 3}}},
		// A session under load: spread out, but no gap stands out.
		{"one noisy mode", []float64{2.04, 2.18, 2.51, 2.10, 2.30, 2.22, 2.41},
			[]mode{{2.22, 2.04, 2.51, 7}}},
		// One slow run is an outlier, not a mode.
		{"an outlier", []float64{0.13, 0.14, 0.135, 0.132, 0.138, 0.9},
			[]mode{{0.1365, 0.13, 0.9, 6}}},
		// A busy machine's bare runs (bench/run at load 5.5–7): a gap, but
		// no wider than the spread on either side of it.
		{"load, not a mode", []float64{0.153, 0.16, 0.165, 0.17, 0.175, 0.177, 0.18, 0.19, 0.2, 0.229, 0.282, 0.29, 0.306, 0.35, 0.454},
			[]mode{{0.19, 0.153, 0.454, 15}}},
		{"three modes", []float64{0.1, 0.11, 0.105, 0.5, 0.51, 0.52, 1.5, 1.52, 1.49},
			[]mode{{0.105, 0.1, 0.11, 3}, {0.51, 0.5, 0.52, 3}, {1.5, 1.49, 1.52, 3}}},
	} {
		got := modes(c.in)
		if len(got) != len(c.want) {
			t.Errorf("%s: modes = %+v, want %+v", c.name, got, c.want)
			continue
		}
		for i := range got {
			g, w := got[i], c.want[i]
			if g.n != w.n || !near(g.median, w.median) || !near(g.lo, w.lo) || !near(g.hi, w.hi) {
				t.Errorf("%s: mode %d = %+v, want %+v", c.name, i, g, w)
			}
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestStartupDistributions(t *testing.T) {
	s, err := readSamples(strings.NewReader(`
t_bare_slirp 0.13
t_bare_slirp 0.35
t_bare_slirp 0.14
t_bare_slirp 0.12
t_bare_slirp 0.36
t_bare_slirp 0.135
t_bare 0.14
t_bare 0.13
t_bare 0.12
t_bare 0.135
load_startup 1.5
load_startup 3.5
load_startup 2.0
startup_busy_pct 10
startup_busy_pct 30
startup_wait_s 0.5
startup_wait_s 20.1
t_session 0.60
t_session 0.50
t_session 0.55
t_agent 0.40
`))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	startupDistributions(s, &out)
	for _, want := range []string{
		"| T_bare_slirp (default network: its own slirp4netns) | 6 | 0.120 s | 0.138 s | 0.360 s | 0.133 s (4 runs, 0.120–0.140); 0.355 s (2 runs, 0.350–0.360) |",
		"| T_bare (`--network none`) | 4 | 0.120 s | 0.133 s | 0.140 s | 0.133 s (4 runs, 0.120–0.140) |",
		"| T_session | 3 | 0.500 s | 0.550 s | 0.600 s | 0.550 s (3 runs, 0.500–0.600) |",
		// medians 0.55 / 0.1325, minima 0.50 / 0.12
		"| T_session / T_bare | 4.15 | 4.17 | ≤ 2.5 × T_bare |",
		"| T_agent / T_bare | 3.02 | 3.33 | ≤ 2 × T_bare |",
		"load average before and after each of the start-up rounds: median 2.00 (1.50–3.50, n=3) on 2 cores. In the half second before each round the cores were 20 % busy (median; 10–30 %); waiting for that lull took 10.3 s (median; at most 20.1 s).",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	// No T_cli samples: neither its row nor the ratio against it.
	if strings.Contains(out.String(), "T_cli") {
		t.Errorf("a figure without samples is shown:\n%s", out.String())
	}
}
