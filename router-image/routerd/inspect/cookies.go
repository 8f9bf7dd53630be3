package inspect

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// A cookie is a credential like any other, and the agent may have brought
// someone's. The only cookies that pass are the ones the same host set in
// this session through the proxy: a site the agent logs in to, or one that
// keeps state between pages, still works.

const (
	// maxCookiesPerHost, maxCookieHosts and maxJarBytes bound the jar's
	// memory (a wildcard admits any number of hosts); what does not fit
	// is not remembered, so it is removed when sent back.
	maxCookiesPerHost = 256
	maxCookieHosts    = 1024
	maxJarBytes       = 8 << 20
	// maxCookieSize is what browsers keep of one cookie.
	maxCookieSize = 4096
)

// jar remembers, per host, the cookies its responses set.
type jar struct {
	mu    sync.Mutex
	hosts map[string]map[string]jarCookie
	bytes int // of the names and values held
}

type jarCookie struct {
	value   string
	expires time.Time // zero: until the session ends
}

func newJar() *jar { return &jar{hosts: map[string]map[string]jarCookie{}} }

// remember takes in the Set-Cookie lines of a response from host. A later
// cookie of the same name replaces the earlier; an expired one deletes it.
func (j *jar) remember(host string, lines []string) {
	now := time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, line := range lines {
		c, err := http.ParseSetCookie(line)
		if err != nil || len(c.Name)+len(c.Value) > maxCookieSize || strings.ContainsAny(c.Value, ", \t") {
			// A value with a comma or a space could read as a second
			// cookie to a server that splits on them.
			continue
		}
		var expires time.Time
		switch {
		case c.MaxAge < 0:
			expires = now // Max-Age=0 or less: delete
		case c.MaxAge > 0:
			expires = now.Add(time.Duration(c.MaxAge) * time.Second)
		case !c.Expires.IsZero():
			expires = c.Expires
		}
		cs := j.hosts[host]
		old, had := cs[c.Name]
		if had {
			// A later cookie of the name replaces it, an expired one
			// deletes it.
			delete(cs, c.Name)
			j.bytes -= len(c.Name) + len(old.value)
		}
		if !expires.IsZero() && !expires.After(now) {
			continue
		}
		if cs == nil {
			if len(j.hosts) >= maxCookieHosts {
				continue
			}
			cs = map[string]jarCookie{}
			j.hosts[host] = cs
		}
		if len(cs) >= maxCookiesPerHost || j.bytes+len(c.Name)+len(c.Value) > maxJarBytes {
			continue
		}
		cs[c.Name] = jarCookie{value: c.Value, expires: expires}
		j.bytes += len(c.Name) + len(c.Value)
	}
}

// filter keeps of the Cookie header values the name=value pairs host set
// and that have not expired, as they were sent, and reports whether it
// dropped any.
func (j *jar) filter(host string, values []string) (kept string, dropped bool) {
	now := time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	cs := j.hosts[host]
	var keep []string
	for _, v := range values {
		for pair := range strings.SplitSeq(v, ";") {
			pair = strings.TrimSpace(pair)
			if pair == "" {
				continue
			}
			name, value, _ := strings.Cut(pair, "=")
			// Set-Cookie's value is read without its quotes, a Cookie's
			// is sent with them.
			if len(value) > 1 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			c, ok := cs[strings.TrimSpace(name)]
			if ok && c.value == value && (c.expires.IsZero() || c.expires.After(now)) {
				keep = append(keep, pair)
				continue
			}
			dropped = true
		}
	}
	return strings.Join(keep, "; "), dropped
}
