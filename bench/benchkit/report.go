package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// runHyperfine turns hyperfine --export-json files into sample lines, one
// key per benchmarked command in order.
func runHyperfine(args []string) error {
	fs := flag.NewFlagSet("hyperfine", flag.ContinueOnError)
	keys := fs.String("keys", "", "comma-separated sample keys, one per command in order")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keys == "" || fs.NArg() == 0 {
		return errors.New("usage: benchkit hyperfine -keys KEY,... FILE.json...")
	}
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = hyperfineSamples(f, strings.Split(*keys, ","), os.Stdout)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func hyperfineSamples(r io.Reader, keys []string, w io.Writer) error {
	var doc struct {
		Results []struct {
			Command   string    `json:"command"`
			Times     []float64 `json:"times"`
			ExitCodes []int     `json:"exit_codes"`
			User      float64   `json:"user"`
			System    float64   `json:"system"`
		} `json:"results"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return fmt.Errorf("read hyperfine json: %w", err)
	}
	if len(doc.Results) != len(keys) {
		return fmt.Errorf("hyperfine ran %d commands, but %d keys were given", len(doc.Results), len(keys))
	}
	for i, res := range doc.Results {
		for j, t := range res.Times {
			// A failed run's time is not a session's: count it instead.
			if j < len(res.ExitCodes) && res.ExitCodes[j] != 0 {
				fmt.Fprintf(w, "%s_failed 1\n", keys[i])
				continue
			}
			fmt.Fprintf(w, "%s %.6f\n", keys[i], t)
		}
		// hyperfine keeps only the mean CPU time of each command.
		fmt.Fprintf(w, "%s_cpu %.6f\n", keys[i], res.User+res.System)
	}
	return nil
}

// samples holds every measured value by key, in the order measured.
type samples map[string][]float64

func readSamples(r io.Reader) (samples, error) {
	s := samples{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("samples line %d: want KEY VALUE, got %q", n, line)
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("samples line %d: %q is not a number", n, f[1])
		}
		s[f[0]] = append(s[f[0]], v)
	}
	return s, sc.Err()
}

// param is a run parameter recorded among the samples, such as the size
// of the transfers.
func (s samples) param(key, def string) string {
	if v := s[key]; len(v) > 0 {
		return strconv.FormatFloat(v[0], 'f', -1, 64)
	}
	return def
}

type stat struct {
	n                   int
	median, lo, hi, sum float64
}

func (s samples) stat(key string) (stat, bool) {
	v := slices.Clone(s[key])
	if len(v) == 0 {
		return stat{}, false
	}
	sort.Float64s(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return stat{n: len(v), median: m, lo: v[0], hi: v[len(v)-1], sum: sum}, true
}

// figure is one row of the results table: a measurement against a baseline
// of the same run, or against an absolute limit when base is empty.
type figure struct {
	group, name     string
	key, base       string
	unit            string
	scale           float64 // the unit per sample unit
	limit           float64
	atMost          bool // the ratio (or value) must not exceed limit
	target          string
	absolute        bool
	baseName, notes string
}

var figures = []figure{
	{group: "Start-up", name: "T_bare: `podman run --rm --network none` sandbox image `true`", key: "t_bare", unit: "s", scale: 1, notes: "baseline"},
	{group: "Start-up", name: "T_bare_slirp: `podman run --rm` sandbox image `true`, default network (bimodal: see its modes)", key: "t_bare_slirp", unit: "s", scale: 1, notes: "reference"},
	{group: "Start-up", name: "T_cli: bench/session-cli.sh", key: "t_cli", unit: "s", scale: 1, notes: "baseline"},
	{group: "Start-up", name: "T_agent: launch to the agent's first instruction", key: "t_agent", base: "t_bare", baseName: "T_bare", unit: "s", scale: 1, limit: 2, atMost: true, target: "≤ 2 × T_bare"},
	{group: "Start-up", name: "T_session: `agent-sandbox --exec true`", key: "t_session", base: "t_bare", baseName: "T_bare", unit: "s", scale: 1, limit: 2.5, atMost: true, target: "≤ 2.5 × T_bare"},
	{group: "Start-up", name: "T_session: `agent-sandbox --exec true`", key: "t_session", base: "t_cli", baseName: "T_cli", unit: "s", scale: 1, limit: 0.5, atMost: true, target: "≤ 0.5 × T_cli"},
	{group: "Start-up", name: "Exit: the launcher's return after the agent's last instruction, `--exec date`", key: "t_exit", unit: "ms", scale: 1000, limit: 100, atMost: true, absolute: true, target: "≤ 100 ms"},
	{group: "Start-up", name: "Exit: the launcher's return after the agent's last instruction, a 5 s session", key: "t_exit_long", unit: "ms", scale: 1000, limit: 100, atMost: true, absolute: true, target: "≤ 100 ms"},
	{group: "Data path", name: "download {MiB} MiB over TLS, sandbox", key: "dl_sandbox_mibps", base: "dl_direct_mibps", baseName: "direct", unit: "MiB/s", scale: 1, limit: 0.85, target: "≥ 0.85 × direct"},
	{group: "Data path", name: "upload {MiB} MiB over TLS, sandbox", key: "ul_sandbox_mibps", base: "ul_direct_mibps", baseName: "direct", unit: "MiB/s", scale: 1, limit: 0.85, target: "≥ 0.85 × direct"},
	{group: "Data path", name: "{N} sequential HTTPS requests, new connection each, sandbox", key: "small_sandbox_s", base: "small_direct_s", baseName: "direct", unit: "s", scale: 1, limit: 1.5, atMost: true, target: "≤ 1.5 × direct"},
	{group: "Data path", name: "download {MiB} MiB over TLS, inspected (routerd ends the TLS)", key: "dl_inspected_mibps", base: "dl_direct_mibps", baseName: "direct", unit: "MiB/s", scale: 1, limit: 0.6, target: "≥ 0.6 × direct"},
	{group: "Data path", name: "upload {MiB} MiB over TLS, inspected", key: "ul_inspected_mibps", base: "ul_direct_mibps", baseName: "direct", unit: "MiB/s", scale: 1, limit: 0.6, target: "≥ 0.6 × direct"},
	{group: "Data path", name: "{N} sequential HTTPS requests, new connection each, inspected", key: "small_inspected_s", base: "small_direct_s", baseName: "direct", unit: "s", scale: 1, limit: 2, atMost: true, target: "≤ 2 × direct"},
	{group: "Data path", name: "CPU per GiB moved (download + upload), router container (routerd, nginx, dnsmasq), inspected", key: "cpu_gib_inspected_router_s", unit: "s/GiB", scale: 1, notes: "no target"},
	{group: "Data path", name: "CPU per GiB moved (download + upload), forwarder, inspected", key: "cpu_gib_inspected_forwarder_s", unit: "s/GiB", scale: 1, notes: "no target"},
	{group: "Data path", name: "CPU per GiB moved (download + upload), router container, sandbox (passthrough)", key: "cpu_gib_sandbox_router_s", unit: "s/GiB", scale: 1, notes: "no target"},
	{group: "Data path", name: "CPU per GiB moved (download + upload), forwarder, sandbox (passthrough)", key: "cpu_gib_sandbox_forwarder_s", unit: "s/GiB", scale: 1, notes: "no target"},
	{group: "Footprint", name: "router + forwarder containers, RSS", key: "rss_helpers_kib", unit: "MiB", scale: 1.0 / 1024, limit: 24, atMost: true, absolute: true, target: "≤ 24 MiB"},
	{group: "Footprint", name: "launcher + its API service, RSS", key: "rss_launcher_service_kib", unit: "MiB", scale: 1.0 / 1024, notes: "no target"},
	{group: "Scale", name: "{S} sessions at once, wall time for all", key: "t_eight", base: "t_one", baseName: "one session", unit: "s", scale: 1, limit: 4, atMost: true, target: "≤ 4 × one session"},
	{group: "Scale", name: "{S} bare containers at once (T_bare's command, one each), wall time for all", key: "t_bare_eight", base: "t_bare_one", baseName: "one bare container", unit: "s", scale: 1, notes: "the floor of the ratio above"},
	{group: "Scale", name: "T_session with 5,000 entries (200 host:port)", key: "t_one_big", base: "t_one_short", baseName: "10 entries", unit: "s", scale: 1, limit: 1.1, atMost: true, target: "≤ 1.1 × 10 entries"},
	{group: "Stream", name: "first byte of a {SMiB} MiB SSE answer, new connection, through the credential proxy", key: "stream_proxy_ttfb_s", base: "stream_direct_ttfb_s", baseName: "direct", unit: "ms", scale: 1000, limit: 1.2, atMost: true, target: "≤ 1.2 × direct"},
	{group: "Stream", name: "first byte of the next answer ({WKiB} KiB) on the kept-alive connection, through the credential proxy", key: "stream_proxy_warm_ttfb_s", base: "stream_direct_warm_ttfb_s", baseName: "direct", unit: "ms", scale: 1000, limit: 1.2, atMost: true, target: "≤ 1.2 × direct"},
	{group: "Stream", name: "throughput of the {SMiB} MiB SSE answer ({E}-byte events, each flushed), through the credential proxy", key: "stream_proxy_mibps", base: "stream_direct_mibps", baseName: "direct", unit: "MiB/s", scale: 1, notes: "no target"},
}

func (st stat) format(unit string, scale float64) string {
	prec := 3
	switch unit {
	case "ms", "s/GiB":
		prec = 2
	case "s":
	default:
		prec = 1
	}
	f := func(x float64) string { return strconv.FormatFloat(x*scale, 'f', prec, 64) }
	return fmt.Sprintf("%s %s (%s–%s, n=%d)", f(st.median), unit, f(st.lo), f(st.hi), st.n)
}

// table renders the rows of the results table whose group is in groups
// (every row when groups is empty); it returns how many targets were missed.
func table(s samples, groups []string, w io.Writer) int {
	missed := 0
	params := strings.NewReplacer("{MiB}", s.param("data_mib", "256"), "{N}", s.param("small_requests", "200"), "{S}", s.param("scale_sessions", "8"),
		"{SMiB}", s.param("stream_mib", "64"), "{WKiB}", s.param("stream_warm_kib", "64"), "{E}", s.param("stream_event_bytes", "1024"))
	fmt.Fprintln(w, "| group | figure | median (min–max) | baseline: median (min–max) | ratio | target | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, f := range figures {
		if !inGroups(f.group, groups) {
			continue
		}
		f.name = params.Replace(f.name)
		st, ok := s.stat(f.key)
		if !ok {
			fmt.Fprintf(w, "| %s | %s | not measured | | | %s | **no** |\n", f.group, f.name, f.target)
			if f.target != "" {
				missed++
			}
			continue
		}
		measured := st.format(f.unit, f.scale)
		failed := len(s[f.key+"_failed"]) + len(s[f.base+"_failed"])
		if failed > 0 {
			measured += fmt.Sprintf("; %d runs failed", failed)
		}
		base, ratio, met := "", "", f.notes
		value := st.median * f.scale
		if f.base != "" {
			bs, ok := s.stat(f.base)
			if !ok || bs.median == 0 {
				fmt.Fprintf(w, "| %s | %s | %s | %s not measured | | %s | **no** |\n", f.group, f.name, measured, f.baseName, f.target)
				if f.target != "" {
					missed++
				}
				continue
			}
			base = f.baseName + ": " + bs.format(f.unit, f.scale)
			value = st.median / bs.median
			ratio = strconv.FormatFloat(value, 'f', 2, 64)
		}
		if f.target != "" {
			ok := value >= f.limit
			if f.atMost {
				ok = value <= f.limit
			}
			met = "yes"
			if !ok || failed > 0 {
				met = "**no**"
				missed++
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", f.group, f.name, measured, base, ratio, f.target, met)
	}
	return missed
}

// relayCPU shows what moving the data cost each process of the sandbox
// path, read from /proc around one transfer in a session.
func relayCPU(s samples, w io.Writer) {
	rows := []struct{ key, name string }{
		{"cpu_forwarder", "forwarder (in the pod)"},
		{"cpu_router", "router: nginx, dnsmasq, routerd"},
		{"cpu_nginx", "… nginx (master and worker)"},
		{"cpu_dnsmasq", "… dnsmasq"},
		{"cpu_routerd", "… routerd (DNS front and filter)"},
		{"cpu_conmon", "conmon of the session's containers (their logs)"},
		{"cpu_upstream", "upstream server (TLS end)"},
		{"cpu_client_profile", "client in the sandbox (TLS end)"},
		{"cpu_machine", "whole machine, every process (all users)"},
		{"cpu_client_sandbox", "client in the sandbox, data-path rounds"},
		{"cpu_client_inspected", "client in the sandbox, inspected, data-path rounds"},
		{"cpu_client_direct", "client on the egress network, data-path rounds"},
	}
	var out []string
	for _, r := range rows {
		c, ok := s.stat(r.key + "_s")
		if !ok {
			continue
		}
		sys := ""
		if k, ok := s.stat(r.key + "_sys_s"); ok {
			sys = fmt.Sprintf("%.2f s", k.median)
		}
		out = append(out, fmt.Sprintf("| %s | %.2f s (%.2f–%.2f, n=%d) | %s |", r.name, c.median, c.lo, c.hi, c.n, sys))
	}
	wall := ""
	if st, ok := s.stat("wall_profile_s"); ok {
		wall = fmt.Sprintf(", %.2f s of wall time on %s cores", st.median, s.param("cores", "2"))
	}
	writeTable(w, fmt.Sprintf("CPU spent on one round of the data path (%s MiB down, %s MiB up, %s small requests%s), by process:",
		s.param("data_mib", "256"), s.param("data_mib", "256"), s.param("small_requests", "200"), wall),
		"| process | CPU (user + system) | of which system |", "|---|---:|---:|", out)
}

// dataSides are the data path's sides measured against direct.
var dataSides = []struct{ key, name string }{{"sandbox", "sandbox"}, {"inspected", "inspected"}}

// dataRounds shows each data-path round's own ratios: the sides ran back
// to back, so a round's ratio saw one machine load, while the table's ratio
// of medians may pair different moments.
func dataRounds(s samples, w io.Writer) {
	rows := []struct{ key, name string }{
		{"dl", "download"}, {"ul", "upload"}, {"small", "small requests (time)"},
	}
	var out []string
	for _, side := range dataSides {
		for _, r := range rows {
			unit := "_mibps"
			if r.key == "small" {
				unit = "_s"
			}
			sb, db := s[r.key+"_"+side.key+unit], s[r.key+"_direct"+unit]
			if len(sb) == 0 || len(sb) != len(db) {
				continue
			}
			ratios := make([]string, len(sb))
			for i := range sb {
				ratios[i] = strconv.FormatFloat(sb[i]/db[i], 'f', 2, 64)
			}
			out = append(out, fmt.Sprintf("| %s, %s / direct | %s |", r.name, side.name, strings.Join(ratios, ", ")))
		}
	}
	writeTable(w, "Each data-path round's own ratio to direct, in the order run:",
		"| measurement | ratio per round |", "|---|---|", out)
}

// smallSteps places the small requests' time: the client's median of
// each step over one round's requests, medians over the rounds.
func smallSteps(s samples, w io.Writer) {
	steps := []struct{ key, name string }{
		{"dns", "DNS lookup"}, {"connect", "TCP connect"}, {"tls", "TLS handshake"},
		{"ttfb", "request written to first response byte"}, {"total", "whole request, close included"},
	}
	cell := func(ok bool, format string, v float64) string {
		if !ok {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	var out []string
	for _, st := range steps {
		d, dok := s.stat("small_direct_" + st.key + "_ms")
		b, bok := s.stat("small_sandbox_" + st.key + "_ms")
		n, nok := s.stat("small_inspected_" + st.key + "_ms")
		if !dok || !bok && !nok {
			continue
		}
		out = append(out, fmt.Sprintf("| %s | %.2f ms | %s | %s | %s | %s |", st.name, d.median,
			cell(bok, "%.2f ms", b.median), cell(nok, "%.2f ms", n.median),
			cell(bok, "%+.2f ms", b.median-d.median), cell(nok, "%+.2f ms", n.median-d.median)))
	}
	writeTable(w, "Where a small request's time goes (the client's median per request, median over the rounds):",
		"| step | direct | sandbox | inspected | sandbox − direct | inspected − direct |", "|---|---:|---:|---:|---:|---:|", out)
}

// dataCPU shows what moving the data cost the relays in the data-path
// rounds, per GiB: their CPU read from /proc while the client in the
// session downloaded and uploaded (not during its small requests), divided
// by the GiB moved both ways.
func dataCPU(s samples, w io.Writer) {
	parts := []struct{ key, name string }{
		{"router", "router container (routerd, nginx, dnsmasq)"},
		{"routerd", "… routerd (with inspection: the TLS ends and the proxy)"},
		{"nginx", "… nginx (SNI relay)"},
		{"forwarder", "forwarder (in the pod)"},
	}
	cell := func(key string) string {
		st, ok := s.stat(key)
		if !ok {
			return "–"
		}
		return st.format("s/GiB", 1)
	}
	var out []string
	for _, p := range parts {
		sb, ib := "cpu_gib_sandbox_"+p.key+"_s", "cpu_gib_inspected_"+p.key+"_s"
		if _, ok := s.stat(sb); !ok {
			if _, ok := s.stat(ib); !ok {
				continue
			}
		}
		// No ratio to a few clock ticks: routerd passes no data unread.
		ratio := ""
		if a, ok := s.stat(sb); ok && a.median >= 0.1 {
			if b, ok := s.stat(ib); ok {
				ratio = strconv.FormatFloat(b.median/a.median, 'f', 2, 64)
			}
		}
		out = append(out, fmt.Sprintf("| %s | %s | %s | %s |", p.name, cell(sb), cell(ib), ratio))
	}
	writeTable(w, fmt.Sprintf("CPU (user + system) per GiB moved in the data-path rounds (%s MiB down and %s MiB up each, read from /proc around the transfers):",
		s.param("data_mib", "256"), s.param("data_mib", "256")),
		"| process | sandbox (passthrough) | inspected | inspected / sandbox |", "|---|---|---|---:|", out)
}

// cpu shows what each timed command cost in CPU: on a shared two-core
// machine that, more than waiting, bounds how many sessions start at once.
func cpu(s samples, w io.Writer) {
	rows := []struct{ key, name string }{
		{"t_bare", "T_bare"}, {"t_bare_slirp", "T_bare_slirp"}, {"t_bare_net", "T_bare_net"}, {"t_cli", "T_cli"}, {"t_session", "T_session"},
		{"t_one", "one session (scale)"}, {"t_one_short", "one session, 10 entries (list rounds)"}, {"t_one_big", "one session, 5,000 entries"}, {"t_eight", "{S} sessions at once"},
		{"t_bare_one", "one bare container (scale)"}, {"t_bare_eight", "{S} bare containers at once"},
	}
	var out []string
	for _, r := range rows {
		if c, ok := s.stat(r.key + "_cpu"); ok {
			out = append(out, fmt.Sprintf("| %s | %.3f s |", strings.ReplaceAll(r.name, "{S}", s.param("scale_sessions", "8")), c.median))
		}
	}
	for _, r := range []struct{ key, name string }{
		{"cpu_launcher_start_s", "launcher, up to the agent's start (read from /proc while the session idles)"},
		{"cpu_service_start_s", "its podman service, likewise"},
	} {
		if c, ok := s.stat(r.key); ok {
			out = append(out, fmt.Sprintf("| %s | %.3f s |", r.name, c.median))
		}
	}
	writeTable(w, "CPU time (user + system) of each command and the children it waited for, as hyperfine reports it (median; conmon and the containers are not its children, so they are not in it), and of one session's launcher and service:",
		"| command | CPU |", "|---|---:|", out)
}

// writeTable writes intro and a markdown table of rows under header and
// rule, or nothing when there are no rows: a part that did not run leaves
// no empty table.
func writeTable(w io.Writer, intro, header, rule string, rows []string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n\n%s\n%s\n", intro, header, rule)
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

// sessionCPU shows where one session's CPU goes, machine-wide, and what
// that means for sessions started together: work that needs C CPU-seconds
// cannot finish on n cores in less than C / n seconds, however it overlaps.
func sessionCPU(s samples, w io.Writer) {
	var rows []string
	total := 0.0
	for _, c := range cpuParts {
		if st, ok := s.stat("sesscpu_" + c.key + "_s"); ok && c.key != "idle" {
			total += st.median
		}
	}
	for _, c := range cpuParts {
		st, ok := s.stat("sesscpu_" + c.key + "_s")
		if !ok {
			continue
		}
		started := ""
		if n, ok := s.stat("sessexec_" + c.key); ok {
			started = strconv.Itoa(int(n.median))
		}
		share := ""
		if c.key != "idle" && total > 0 {
			share = fmt.Sprintf("%.0f %%", 100*st.median/total)
		}
		rows = append(rows, fmt.Sprintf("| %s | %.2f s | %s | %s |", c.name, st.median, share, started))
	}
	busy, okBusy := s.stat("session_busy_s")
	wall, okWall := s.stat("session_wall_s")
	eight, okEight := s.stat("eight_busy_s")
	eightWall, okEightWall := s.stat("eight_wall_s")
	if len(rows) == 0 && !okBusy {
		return
	}
	fmt.Fprint(w, "\n### Where one session's CPU goes\n")
	writeTable(w, fmt.Sprintf("One `agent-sandbox --exec true` sampled machine-wide by `perf record -a` (CPU-seconds, both cores; busy: %.2f s; a process's share is by its command and, for podman, by who started it):", total),
		"| part | CPU | of busy | processes started |", "|---|---:|---:|---:|", rows)
	if !okBusy || !okWall {
		return
	}
	cores, _ := strconv.ParseFloat(s.param("cores", "2"), 64)
	n, _ := strconv.ParseFloat(s.param("scale_sessions", "8"), 64)
	fmt.Fprintf(w, "\nThe whole machine's CPU time (from /proc/stat) while one session ran alone: %.2f s (%.2f–%.2f, n=%d) in %.2f s of wall time, %.0f %% of its %g cores.",
		busy.median, busy.lo, busy.hi, busy.n, wall.median, 100*busy.median/(wall.median*cores), cores)
	if okEight && okEightWall {
		fmt.Fprintf(w, " %g sessions at once: %.2f s of CPU (%.2f s each) in %.2f s.", n, eight.median, eight.median/n, eightWall.median)
	}
	floor := n * busy.median / cores
	fmt.Fprintf(w, " So %g sessions need at least %g × %.2f s / %g cores = %.2f s however well they overlap: %.1f × one session's wall time.\n",
		n, n, busy.median, cores, floor, floor/wall.median)
}

// footprintParts are the per-session processes read from /proc.
var footprintParts = []struct{ key, name string }{
	{"router", "router container (podman-init, routerd, dnsmasq, nginx master + worker)"},
	{"forwarder", "forwarder container"},
	{"helpers", "router + forwarder"},
	{"helpers_after", "router + forwarder after one data-path round"},
	{"launcher", "launcher (agent-sandbox)"},
	{"service", "its `podman system service` (shared by the sessions of one podman environment; the bench runs them one at a time)"},
	{"launcher_service", "launcher + service"},
	{"conmon", "conmon monitors of the session's containers (not counted above)"},
	{"infra", "pod infra container (catatonit; not counted above)"},
}

// footprint writes its section, or nothing when the part did not run.
func footprint(s samples, w io.Writer) {
	if _, ok := s.stat("rss_helpers_kib"); !ok {
		return
	}
	fmt.Fprint(w, "\n### Footprint by process\n\nRead from /proc (VmRSS, and Pss from smaps_rollup) while an idle session ran, and in the first session again after it moved the data of one data-path round; PSS splits pages shared between processes.\n\n")
	fmt.Fprintln(w, "| processes | RSS median (min–max) | PSS median (min–max) |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, p := range footprintParts {
		rss, ok := s.stat("rss_" + p.key + "_kib")
		if !ok {
			continue
		}
		pss := "not read"
		if ps, ok := s.stat("pss_" + p.key + "_kib"); ok {
			pss = ps.format("MiB", 1.0/1024)
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", p.name, rss.format("MiB", 1.0/1024), pss)
	}
}

// traceLine matches the launcher's AGENT_SANDBOX_TRACE output: time since
// the tracer started, the step's own duration, and the step.
var traceLine = regexp.MustCompile(`^agent-sandbox: trace +([0-9.]+)ms +([0-9.]+)ms (.+)$`)

var sessionName = regexp.MustCompile(`agent-sandbox-[0-9]+-[0-9]+`)

type traceStep struct {
	name    string
	at, dur float64 // ms
}

func readTrace(r io.Reader) (steps []traceStep, wall float64, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "wall "); ok {
			if wall, err = strconv.ParseFloat(v, 64); err != nil {
				return nil, 0, fmt.Errorf("bad wall line %q", line)
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "first "); ok {
			// Not a step: the agent's first instruction, in seconds
			// after launch, shown apart from the tracer's clock.
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("bad first line %q", line)
			}
			steps = append(steps, traceStep{name: firstInstruction, at: -f * 1000})
			continue
		}
		m := traceLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		dur, _ := strconv.ParseFloat(m[2], 64)
		name := sessionName.ReplaceAllString(m[3], "S")
		if name == serviceStop {
			// The launcher starts this step's clock when it defers the
			// stop, right after the start: what it reports is the whole
			// session. The stop itself is what follows the last step.
			dur = at
			for _, st := range steps {
				dur = min(dur, at-st.at)
			}
		}
		steps = append(steps, traceStep{name: name, at: at, dur: dur})
	}
	return steps, wall, sc.Err()
}

const (
	serviceStop      = "podman service release"
	firstInstruction = "the agent's first instruction"
)

// traces prints the first traced run step by step, then each step's median
// over all traced runs, slowest first.
func traces(files []string, w io.Writer) error {
	type run struct {
		steps []traceStep
		wall  float64
	}
	var runs []run
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		steps, wall, err := readTrace(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if len(steps) > 0 {
			runs = append(runs, run{steps, wall})
		}
	}
	if len(runs) == 0 {
		fmt.Fprintln(w, "No trace lines in the traced runs' output: does the launcher still honour AGENT_SANDBOX_TRACE?")
		return nil
	}
	first := runs[0]
	fmt.Fprintf(w, "One traced `agent-sandbox --exec date +%%s.%%N` (S is the session name; steps that overlap ran side by side; the tracer's clock starts after the launcher's checks; wall %.0f ms):\n\n", first.wall*1000)
	fmt.Fprintln(w, "| ends at (ms) | took (ms) | step |")
	fmt.Fprintln(w, "|---:|---:|---|")
	last := 0.0
	for _, st := range first.steps {
		if st.name == firstInstruction {
			continue
		}
		fmt.Fprintf(w, "| %.1f | %.1f | %s |\n", st.at, st.dur, st.name)
		last = math.Max(last, st.at)
	}
	if first.wall > 0 {
		fmt.Fprintf(w, "| %.1f | %.1f | outside the tracer: process start, allowlist and launch-dir checks, exit |\n", first.wall*1000, first.wall*1000-last)
	}
	for _, st := range first.steps {
		if st.name == firstInstruction {
			fmt.Fprintf(w, "\nThe agent's first instruction ran %.0f ms after launch (launcher clock, not the tracer's).\n", -st.at)
		}
	}

	byName := samples{}
	var order []string
	for _, r := range runs {
		last := 0.0
		for _, st := range r.steps {
			if st.name == firstInstruction {
				continue
			}
			if _, ok := byName[st.name]; !ok {
				order = append(order, st.name)
			}
			byName[st.name] = append(byName[st.name], st.dur)
			last = math.Max(last, st.at)
		}
		if r.wall > 0 {
			const outside = "outside the tracer"
			if _, ok := byName[outside]; !ok {
				order = append(order, outside)
			}
			byName[outside] = append(byName[outside], r.wall*1000-last)
			byName["wall"] = append(byName["wall"], r.wall*1000)
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, _ := byName.stat(order[i])
		b, _ := byName.stat(order[j])
		return a.median > b.median
	})
	wall, _ := byName.stat("wall")
	fmt.Fprintf(w, "\nEvery step over %d traced runs, slowest first (median wall %.0f ms):\n\n", len(runs), wall.median)
	fmt.Fprintln(w, "| step | median (ms) | min–max (ms) |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, name := range order {
		st, _ := byName.stat(name)
		fmt.Fprintf(w, "| %s | %.1f | %.1f–%.1f |\n", name, st.median, st.lo, st.hi)
	}
	return nil
}

// eventTime is how podman 4 prints an event's time.
const eventTime = "2006-01-02 15:04:05.999999999 -0700 MST"

// events prints the first traced session's container lifecycle from
// podman's own event log, in ms after launch: it shows what the engine calls
// in the trace spend their time on.
func events(file string, w io.Writer) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var launch float64
	type event struct {
		at         float64
		what, name string
	}
	var evs []event
	session := ""
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "launch "); ok {
			launch, _ = strconv.ParseFloat(v, 64)
			continue
		}
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 {
			continue
		}
		t, err := time.Parse(eventTime, f[0])
		if err != nil {
			continue
		}
		at := float64(t.UnixNano())/1e6 - launch*1000
		if at < 0 {
			continue
		}
		if session == "" {
			session = sessionName.FindString(f[2])
		}
		evs = append(evs, event{at, f[1], f[2]})
	}
	if launch == 0 || len(evs) == 0 || session == "" {
		fmt.Fprintln(w, "\n(no podman events were recorded for the traced session)")
		return nil
	}
	fmt.Fprint(w, "\nThe same session's container events, from podman's event log (ms after launch; infra is the pod's infra container):\n\n")
	fmt.Fprintln(w, "| at (ms) | event | object |")
	fmt.Fprintln(w, "|---:|---|---|")
	infra := regexp.MustCompile(`^[0-9a-f]{12}-infra$`)
	for _, e := range evs {
		name := strings.ReplaceAll(e.name, session, "S")
		if infra.MatchString(name) {
			name = "infra"
		} else if name == e.name {
			continue // another session's or another tool's
		}
		fmt.Fprintf(w, "| %.0f | %s | %s |\n", e.at, e.what, name)
	}
	return nil
}

// runReport writes the results: the table with every target, the footprint
// by process, and the traced breakdown.
func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	samplesFile := fs.String("samples", "", "file of KEY VALUE sample lines")
	machine := fs.String("machine", "", "markdown describing the machine, included as is")
	notes := fs.String("notes", "", "markdown list of what went wrong, included as is")
	eventsFile := fs.String("events", "", "podman events of the first traced session, after a launch line")
	groupList := fs.String("groups", "", "comma-separated table groups that were measured (default: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var groups []string
	for g := range strings.SplitSeq(*groupList, ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	f, err := os.Open(*samplesFile)
	if err != nil {
		return err
	}
	s, err := readSamples(f)
	f.Close()
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	if *machine != "" {
		b, err := os.ReadFile(*machine)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", strings.TrimRight(string(b), "\n"))
	}
	fmt.Fprint(w, "\n### Results\n\nEvery ratio divides the medians of the same run.\n\n")
	missed := table(s, groups, w)
	fmt.Fprintf(w, "\n%d of %d targets missed.\n", missed, countTargets(groups))
	if *notes != "" {
		if b, err := os.ReadFile(*notes); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			fmt.Fprintf(w, "\nProblems during the run:\n\n%s\n", strings.TrimRight(string(b), "\n"))
		}
	}
	startupDistributions(s, w)
	cpu(s, w)
	sessionCPU(s, w)
	dataRounds(s, w)
	smallSteps(s, w)
	dataCPU(s, w)
	relayCPU(s, w)
	streamDetails(s, w)
	footprint(s, w)
	if files := fs.Args(); len(files) > 0 {
		fmt.Fprint(w, "\n### Where a session's time goes (AGENT_SANDBOX_TRACE=1)\n\n")
		if err := traces(files, w); err != nil {
			return err
		}
	}
	if *eventsFile != "" {
		if err := events(*eventsFile, w); err != nil {
			fmt.Fprintf(w, "\n(cannot read the podman events: %v)\n", err)
		}
	}
	return nil
}

func countTargets(groups []string) int {
	n := 0
	for _, f := range figures {
		if f.target != "" && inGroups(f.group, groups) {
			n++
		}
	}
	return n
}

func inGroups(group string, groups []string) bool {
	return len(groups) == 0 || slices.Contains(groups, group)
}
