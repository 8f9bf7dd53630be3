package routerlog

import (
	"strings"
	"testing"
)

func TestLogExcerptKeepsTheErrorBehindShutdownNotices(t *testing.T) {
	// What a router whose dnsmasq could not load its config wrote: the
	// error, routerd's note, then nginx's shutdown notices.
	log := strings.Join([]string{
		"routerd: dns front on 10.88.5.2:53",
		"dnsmasq: error at line 12 of /tmp/bad-dnsmasq.conf",
		"routerd: dnsmasq exited: exit status 1",
		"2026/12/01 10:00:00 [notice] 7#7: signal 15 (SIGTERM) received from 1, exiting",
		"2026/12/01 10:00:00 [notice] 9#9: exiting",
		"2026/12/01 10:00:00 [notice] 9#9: exit",
		"2026/12/01 10:00:00 [notice] 10#10: exiting",
		"2026/12/01 10:00:00 [notice] 10#10: exit",
		"2026/12/01 10:00:00 [notice] 7#7: signal 17 (SIGCHLD) received from 9",
		"2026/12/01 10:00:00 [notice] 7#7: worker process 9 exited with code 0",
		"2026/12/01 10:00:00 [notice] 7#7: signal 29 (SIGIO) received",
		"2026/12/01 10:00:00 [notice] 7#7: signal 17 (SIGCHLD) received from 10",
		"2026/12/01 10:00:00 [notice] 7#7: worker process 10 exited with code 0",
		"2026/12/01 10:00:00 [notice] 7#7: exit",
	}, "\n")
	got := Excerpt(log, 5)
	for _, want := range []string{"bad-dnsmasq.conf", "dnsmasq exited", "[notice] 7#7: exit"} {
		if !strings.Contains(got, want) {
			t.Errorf("excerpt lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "dns front on") {
		t.Errorf("excerpt kept a line that says nothing failed and is not among the last:\n%s", got)
	}
	if i, j := strings.Index(got, "bad-dnsmasq.conf"), strings.Index(got, "[notice] 7#7: exit"); i > j {
		t.Errorf("excerpt is out of order:\n%s", got)
	}
	if !strings.Contains(got, "\n...\n") {
		t.Errorf("excerpt does not mark the lines it left out:\n%s", got)
	}
}

func TestLogExcerptOfAShortLogIsTheLog(t *testing.T) {
	log := "routerd: cannot start nginx: exec: not found\n"
	if got := Excerpt(log, 10); got != strings.TrimSpace(log) {
		t.Errorf("Excerpt = %q, want the whole log", got)
	}
}

func TestLogExcerptBoundsTheErrors(t *testing.T) {
	var lines []string
	for range 50 {
		lines = append(lines, "forwarder: relay failed: connection refused")
	}
	if got := strings.Count(Excerpt(strings.Join(lines, "\n"), 10), "\n") + 1; got > 10 {
		t.Errorf("excerpt has %d lines, want at most 10", got)
	}
}
