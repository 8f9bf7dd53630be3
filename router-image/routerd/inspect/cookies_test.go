package inspect

import (
	"strconv"
	"testing"
)

func TestJar(t *testing.T) {
	j := newJar()
	j.remember("a.test", []string{"s=1; Path=/", "t=\"q\"", "old=x; Expires=Thu, 01 Jan 1970 00:00:00 GMT", "bad"})
	for _, tc := range []struct {
		host, cookie, kept string
		dropped            bool
	}{
		{"a.test", "s=1", "s=1", false},
		{"a.test", "s=1; t=\"q\"", "s=1; t=\"q\"", false},
		{"a.test", "s=2", "", true},
		{"a.test", "s=1; evil=x; old=x", "s=1", true},
		{"b.test", "s=1", "", true},
	} {
		kept, dropped := j.filter(tc.host, []string{tc.cookie})
		if kept != tc.kept || dropped != tc.dropped {
			t.Errorf("%s %q: kept %q dropped %v, want %q %v", tc.host, tc.cookie, kept, dropped, tc.kept, tc.dropped)
		}
	}
	j.remember("a.test", []string{"s=2"})
	if kept, _ := j.filter("a.test", []string{"s=2"}); kept != "s=2" {
		t.Errorf("a later cookie did not replace the first: %q", kept)
	}
	j.remember("a.test", []string{"s=; Max-Age=0"})
	if kept, _ := j.filter("a.test", []string{"s=2"}); kept != "" {
		t.Errorf("a deleted cookie passed: %q", kept)
	}
	for i := range maxCookiesPerHost + 10 {
		j.remember("c.test", []string{"n" + strconv.Itoa(i) + "=v"})
	}
	if n := len(j.hosts["c.test"]); n != maxCookiesPerHost {
		t.Errorf("%d cookies held for one host, want at most %d", n, maxCookiesPerHost)
	}
	if j.bytes <= 0 || j.bytes > maxJarBytes {
		t.Errorf("jar bytes %d", j.bytes)
	}
}
