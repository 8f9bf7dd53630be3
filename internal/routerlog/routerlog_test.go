package routerlog

import "testing"

// Lines as routerd, nginx and dnsmasq write them (their formats are in
// router-image/routerd and the planner's log_format), each read back.
func TestParse(t *testing.T) {
	if d, ok := ParseDenial("dnsmasq[7]: config evil.example is NXDOMAIN\r"); !ok || d != (Denial{Host: "evil.example", Lookup: true}) {
		t.Errorf("dnsmasq denial: %+v %v", d, ok)
	}
	if d, ok := ParseDenial(`tls client=10.89.0.1 port=443 sni="evil.example" upstream="-" status=200`); !ok || d != (Denial{Host: "evil.example"}) {
		t.Errorf("nginx denial: %+v %v", d, ok)
	}
	for _, line := range []string{
		`tls client=10.89.0.1 port=443 sni="" upstream="-" status=200`,
		`tls client=10.89.0.1 port=443 sni="allowed.example" upstream="10.0.0.1:443" status=200`,
		"dnsmasq[7]: reply allowed.example is 10.0.0.1",
	} {
		if d, ok := ParseDenial(line); ok {
			t.Errorf("%q reads as a denial of %q", line, d.Host)
		}
	}
	if h, ok := CredentialRequest(" credentials host=api.anthropic.test method=POST status=200"); !ok || h != "api.anthropic.test" {
		t.Errorf("credential request: %q %v", h, ok)
	}
	if h, removed, ok := Inspected(`inspect host=api.github.test method=GET path="/x\"y" proto=HTTP/1.1 status=200 removed="authorization,x-api-key"`); !ok || h != "api.github.test" || removed != "authorization,x-api-key" {
		t.Errorf("inspected: %q %q %v", h, removed, ok)
	}
	r, ok := APIRefused(`api-refused host=api.anthropic.test method="POST" path="/v1/files" rule=files.endpoint status=403`)
	if !ok || r != (Refusal{Host: "api.anthropic.test", Method: "POST", Path: "/v1/files", Rule: "files.endpoint"}) {
		t.Errorf("api refusal: %+v %v", r, ok)
	}
	if h, ok := APITrimmed(`api-changed host=api.anthropic.test path="/v1/messages" note="web_fetch allowed_domains trimmed to [\"x\"]"`); !ok || h != "api.anthropic.test" {
		t.Errorf("api trimmed: %q %v", h, ok)
	}
	if _, ok := APITrimmed(`api-changed host=api.anthropic.test path="/v1/messages" note="other"`); ok {
		t.Error("a change that trimmed nothing reads as trimmed")
	}
	r, ok = ForgeRefused(`forge-refused host=api.github.test method="DELETE" path="/repos/o/r" rule=repo.delete repo=o/r status=403`)
	if !ok || r != (Refusal{Host: "api.github.test", Method: "DELETE", Path: "/repos/o/r", Rule: "repo.delete", Repo: "o/r"}) {
		t.Errorf("forge refusal: %+v %v", r, ok)
	}
	if h, repo, ok := ForgeWrote(`forge-wrote host=github.test method="POST" path="/o/r.git/git-receive-pack" repo=o/r`); !ok || h != "github.test" || repo != "o/r" {
		t.Errorf("forge write: %q %q %v", h, repo, ok)
	}
}

// What the agent chose is echoed only when it cannot write to the
// terminal: no escape, no space, no control character.
func TestPrintable(t *testing.T) {
	for s, want := range map[string]bool{"api.example.test": true, "a.b.": true, "\x1b[2Jx.test": false, "a b.test": false, "": false} {
		if PrintableHost(s) != want {
			t.Errorf("PrintableHost(%q) = %v", s, !want)
		}
	}
	if !PrintableRequest("GET", "/v1/messages") || PrintableRequest("GET\x1b", "/x") || PrintableRequest("GET", "/x\ny") || PrintableRequest("GET", "x") {
		t.Error("PrintableRequest lets through what it must not, or refuses a plain request")
	}
	if !PrintableHeader("x-api-key") || PrintableHeader("x\x1b") {
		t.Error("PrintableHeader")
	}
}
