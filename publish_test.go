package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParsePublishedPort(t *testing.T) {
	for in, want := range map[string]publishedPort{"8000": {8000, 8000}, "8080:8000": {8080, 8000}, "65535:1": {65535, 1}} {
		if got, err := parsePublishedPort(in); err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":               `"" is not a port`,
		"0":              `"0" is not a port`,
		"70000":          `"70000" is not a port`,
		"http":           `"http" is not a port`,
		"0.0.0.0:80:80":  "only ever on the host's 127.0.0.1",
		"127.0.0.1:8000": `"127.0.0.1" is not a port`,
		"8000:":          `"" is not a port`,
		"8000/udp":       `"8000/udp" is not a port`,
		"8443:443":       "port 443 in the sandbox is the forwarder's own",
		"9000:61005":     "port 61005 in the sandbox is the forwarder's own",
	} {
		if _, err := parsePublishedPort(in); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--publish "+in+":") {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	la, err := parseLaunchArgs([]string{"--publish", "8000", "--publish=9000:90", "--exec", "true"}, nil)
	if err != nil || !slices.Equal(la.publish, []publishedPort{{8000, 8000}, {9000, 90}}) {
		t.Errorf("launch args: %+v, %v", la.publish, err)
	}
}

type fakeListener struct{ net.Listener }

func (fakeListener) Close() error { return nil }

func TestCheckPublished(t *testing.T) {
	var tried []string
	listen := func(addr string) (net.Listener, error) {
		tried = append(tried, addr)
		switch addr {
		case "127.0.0.1:8000":
			return nil, &net.OpError{Op: "listen", Err: syscall.EADDRINUSE}
		case "127.0.0.1:80":
			return nil, &net.OpError{Op: "listen", Err: syscall.EACCES}
		case "[::1]:8002":
			return nil, &net.OpError{Op: "listen", Err: syscall.EADDRINUSE}
		case "[::1]:9000":
			return nil, &net.OpError{Op: "listen", Err: syscall.EADDRNOTAVAIL}
		}
		return fakeListener{}, nil
	}
	if err := checkPublished([]publishedPort{{8001, 8001}, {9000, 90}}, listen); err != nil || !slices.Equal(tried, []string{"127.0.0.1:8001", "[::1]:8001", "127.0.0.1:9000", "[::1]:9000"}) {
		t.Errorf("free ports: %v, tried %v (want loopback's two)", err, tried)
	}
	for _, c := range []struct {
		ports []publishedPort
		want  string
	}{
		{[]publishedPort{{8000, 3000}}, "--publish 8000:3000: port 8000 on this host is taken: another program listens on it (ss -ltnp 'sport = :8000' says which)"},
		{[]publishedPort{{80, 80}}, "port 80 on this host is privileged (below 1024); pick another, as in --publish 8080:80"},
		{[]publishedPort{{8001, 1}, {8001, 2}}, "host port 8001 is given twice"},
		{[]publishedPort{{8002, 1}}, "port 8002 on this host's [::1] is taken"},
	} {
		if err := checkPublished(c.ports, listen); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.ports, err, c.want)
		}
	}
	many := make([]publishedPort, maxPublished+1)
	for i := range many {
		many[i] = publishedPort{uint16(20000 + i), 80}
	}
	if err := checkPublished(many, listen); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", maxPublished)) {
		t.Errorf("too many: %v", err)
	}
	if !errors.Is(&net.OpError{Err: syscall.EACCES}, syscall.EACCES) {
		t.Fatal("an OpError does not unwrap to its errno")
	}
}

func TestPublishedPortsOnTheForwardersNamespace(t *testing.T) {
	eng := newFakeEngine()
	cfg := testConfig(t)
	cfg.published = []publishedPort{{8080, 8000}, {8001, 8001}}
	runSession(context.Background(), eng, cfg)
	p := eng.containers[testSession+"-forwarder"]
	if got := p.Networks[testSession].StaticIPs; len(got) != 1 || got[0].String() != "10.89.7.3" {
		t.Errorf("the forwarder's address %v, want 10.89.7.3 (fixed, for the forwarder's listeners)", got)
	}
	if len(p.PortMappings) != 2 {
		t.Fatalf("port mappings %+v", p.PortMappings)
	}
	for i, m := range p.PortMappings {
		if m.HostIP != "127.0.0.1" || m.HostPort != cfg.published[i].host || m.ContainerPort != innerPort(i) || m.Protocol != "tcp" {
			t.Errorf("mapping %d: %+v, want 127.0.0.1:%d to the inner port %d", i, m, cfg.published[i].host, innerPort(i))
		}
	}
	forwards := readFile(t, cfg.tmp+"/forwards")
	for _, want := range []string{"10.89.7.3:61000=127.0.0.1:8000/publish=project.localhost:8080", "10.89.7.3:61001=127.0.0.1:8001/publish=project.localhost:8001"} {
		if !strings.Contains(forwards, want) {
			t.Errorf("forwards lack %q:\n%s", want, forwards)
		}
	}
	// Without --publish: no mapping, no fixed address.
	eng = newFakeEngine()
	cfg = testConfig(t)
	runSession(context.Background(), eng, cfg)
	if p := eng.pods[testSession]; len(p.PortMappings) != 0 || len(p.Networks[testSession].StaticIPs) != 0 || strings.Contains(readFile(t, cfg.tmp+"/forwards"), "/publish") {
		t.Errorf("a session without --publish publishes: %+v", p)
	}
	if podAddress(netip.MustParseAddr("10.89.7.2")).String() != "10.89.7.3" {
		t.Error("podAddress")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPublishedName(t *testing.T) {
	for in, want := range map[string]string{"/src/my-project": "my-project", "/src/My Project.v2": "my-project-v2", "/": "sandbox", "/src/日本": "sandbox",
		"/src/" + strings.Repeat("a", 50): strings.Repeat("a", 40), "/src/-x-": "x"} {
		if got := publishedName(in); got != want {
			t.Errorf("publishedName(%q) = %q, want %q", in, got, want)
		}
	}
}
