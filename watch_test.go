package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/podman"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestWatchDenialsFollowsEveryRouter(t *testing.T) {
	eng := newFakeEngine()
	lbl := func(dir string) map[string]string {
		return map[string]string{labelSession: "s", labelOwner: "1@1", labelDir: dir}
	}
	eng.labelled = []podman.Object{
		{Kind: "container", Name: "s1-router", Labels: lbl("/src/one"), Running: true},
		{Kind: "container", Name: "s1-claude", Labels: lbl("/src/one"), Running: true},
		{Kind: "pod", Name: "s1", Labels: lbl("/src/one"), Running: false},
		{Kind: "container", Name: "s2-router", Labels: lbl("/src/two"), Running: true},
		{Kind: "container", Name: "s3-router", Labels: lbl("/src/three"), Running: false}, // created, not yet running
	}
	eng.logs = map[string]string{
		"s1-router": "dnsmasq[1]: config denied.test is NXDOMAIN\ndnsmasq[1]: config allowed.test is 127.0.0.1\n",
		"s3-router": "dnsmasq[1]: config early.test is NXDOMAIN\n",
		"s2-router": `10.89.2.3 port=443 sni="sneaky.test" upstream="-" status=500 sent=0 received=0` + "\ndnsmasq[1]: config \\027]0;x is NXDOMAIN\n",
	}
	out := &lockedBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := watchDenials(ctx, eng, out, time.Now(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		" /src/one: blocked lookup of denied.test\n",
		" /src/two: blocked connection to sneaky.test\n",
		" /src/two: blocked lookup of (a name that is not a host name)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "allowed.test") || strings.Count(got, "\n") != 3 {
		t.Errorf("output has more than the three denials:\n%s", got)
	}
	follows := 0
	for _, c := range eng.calls {
		if strings.HasPrefix(c, "FollowLogs ") {
			follows++
		}
	}
	if follows != 2 {
		t.Errorf("followed %d containers, want each router once: %v", follows, eng.calls)
	}
}
