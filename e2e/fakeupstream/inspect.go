package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

// What the credential-stripping rows read: every HTTPS request's headers,
// cookies a host set itself, and writes (a publish's PUT, a REST POST) that
// carry a token the way real clients do.

const (
	// headersLogMax bounds the headers (and the request target) of one
	// "https headers" line.
	headersLogMax = 16 << 10
	// writeBodyMax bounds what a write reads of its body.
	writeBodyMax = 64 << 20
)

// logHeaders logs every header of a request, values included, sorted by
// name, with the request target as it came (query included) and the
// userinfo an absolute-form target held.
func (s *tlsServer) logHeaders(r *http.Request) {
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		for _, v := range r.Header[name] {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(name)
			b.WriteString(": ")
			b.WriteString(v)
		}
	}
	target := r.RequestURI
	if target == "" {
		target = r.URL.RequestURI()
	}
	extra := ""
	if r.URL.User != nil {
		extra = fmt.Sprintf(" userinfo=%q", r.URL.User.String())
	}
	// Basic credentials decoded too, so that a nonce git sent from a URL's
	// userinfo is found by a plain search.
	if user, pass, ok := r.BasicAuth(); ok {
		extra += fmt.Sprintf(" basic=%q", bound(user+":"+pass, headersLogMax))
	}
	s.log.printf("https headers method=%s host=%q proto=%s path=%q%s headers=%q",
		r.Method, r.Host, r.Proto, bound(target, headersLogMax), extra, bound(b.String(), headersLogMax))
}

// bound cuts s to limit bytes, saying how much it left out.
func bound(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	return fmt.Sprintf("%s...[%d more bytes]", s[:limit], len(s)-limit)
}

// isWriteMethod: the methods the fake answers as a write on its plain paths.
func isWriteMethod(m string) bool {
	switch m {
	case http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// write reads a PUT, POST, PATCH or DELETE's whole body (up to
// writeBodyMax), logs its size and answers {"ok":true,...}: a registry
// publish or a REST call that worked, whatever it carried.
func (s *tlsServer) write(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, writeBodyMax))
	over := false
	if err == nil && n == writeBodyMax {
		var one [1]byte
		if k, _ := r.Body.Read(one[:]); k > 0 {
			over = true
		}
	}
	suffix := ""
	switch {
	case over:
		suffix = " over-limit=true"
	case err != nil:
		suffix = fmt.Sprintf(" read-error=%q", err.Error())
	}
	s.log.printf("https write method=%s host=%q path=%q bytes=%d%s", r.Method, r.Host, r.URL.RequestURI(), n, suffix)
	w.Header().Set("Content-Type", "application/json")
	if over {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": !over, "method": r.Method, "path": r.URL.RequestURI(), "bytes": n})
}

// setCookiePath answers with the cookie its query names, so that a row can
// tell a cookie the host set (which a client may send back) from one the
// agent made up.
const setCookiePath = "/set-cookie"

func (s *tlsServer) setCookie(w http.ResponseWriter, r *http.Request) {
	name, value := r.URL.Query().Get("name"), r.URL.Query().Get("value")
	err := (&http.Cookie{Name: name, Value: value}).Valid()
	if err == nil && strings.ContainsAny(value, " ,") {
		err = fmt.Errorf("cookie value %q needs quoting", value)
	}
	if err != nil {
		s.log.printf("cookie refused host=%q name=%q err=%q", r.Host, name, err.Error())
		http.Error(w, "set-cookie: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.log.printf("cookie set host=%q name=%q", r.Host, name)
	w.Header().Set("Set-Cookie", name+"="+value+"; Path=/; Secure; HttpOnly")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "name": name})
}
