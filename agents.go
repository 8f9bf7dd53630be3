package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
)

// Agents by name (--agent, AGENT_SANDBOX_AGENT): each has its command,
// its image (Claude Code's is the sandbox image; the others are built on
// first use from their recipe under recipes/, which travels in the
// binary), the hosts it needs (added for the session only, never written
// to the user's allowlist) and the API whose key the router adds for it.

// agentPreset is one agent --agent names.
type agentPreset struct {
	name    string
	command []string
	// recipe is its image's build context under recipes/, built FROM the
	// sandbox image; "" runs the sandbox image itself.
	recipe string
	// provider is the API whose key it uses (credentials.go).
	provider *apiProvider
}

// defaultAgent is the agent a session runs unless told otherwise.
const defaultAgent = "claude"

var agentPresets = []agentPreset{
	{name: "claude", command: []string{"claude"}, provider: anthropicAPI},
	{name: "codex", command: []string{"codex"}, recipe: "codex", provider: openaiAPI},
	{name: "gemini", command: []string{"gemini"}, recipe: "gemini", provider: geminiAPI},
}

// lookupAgent is the agent called name; from says where the name came
// from, for the refusal.
func lookupAgent(name, from string) (agentPreset, error) {
	var names []string
	for _, a := range agentPresets {
		if a.name == name {
			return a, nil
		}
		names = append(names, a.name)
	}
	return agentPreset{}, fmt.Errorf("%s %s: not an agent agent-sandbox knows; pick one of %s", from, name, strings.Join(names, ", "))
}

// imageName is the agent's image: agent-sandbox's own, named as the main
// images are.
func (a agentPreset) imageName() string {
	if releaseBuild() {
		return registry + "/agent-sandbox-" + a.recipe + ":" + version
	}
	return "localhost/agent-sandbox-" + a.recipe + ":dev"
}

// image is the agent's image as ensureImages builds or pulls it: from its
// recipe, on the session's sandbox image.
func (a agentPreset) image(sandbox string) sessionImage {
	n := a.imageName()
	return sessionImage{role: a.name + " agent", name: n, dflt: n, env: "--agent " + a.name,
		dir: path.Join("recipes", a.recipe), hostCA: true, base: sandbox}
}

// hosts are the hosts the agent needs, from its recipe's list. With a key
// for its API (the router adds it, or --env passes it in), that is the
// API host alone: the sign-in hosts, which take data into whatever account
// signs in, are for a session without one. Where AGENT_SANDBOX_API_HOSTS
// points the API elsewhere (a proxy, the tests' fake), that host stands in
// for the whole list: the sign-in hosts belong to the real API.
func (a agentPreset) hosts(api map[*apiProvider]string, keyed bool) ([]allowlist.Entry, error) {
	if a.recipe == "" {
		return nil, nil
	}
	if h, ok := api[a.provider]; ok && (h != a.provider.host || keyed) {
		return []allowlist.Entry{{Host: h, Port: allowlist.TLSPort}}, nil
	}
	name := path.Join("recipes", a.recipe, "allowed-hosts")
	b, err := fs.ReadFile(imageContexts, name)
	if err != nil {
		return nil, fmt.Errorf("this agent-sandbox lacks %s: rebuild it with make build", name)
	}
	return allowlist.Parse(bytes.NewReader(b), name)
}

// hasKey says whether the session has a key for provider's API: in the
// launcher's environment or stored (the router adds it), or passed in
// with --env. A stored key that cannot be read counts: the session's
// credential check refuses it later, with its fix.
func hasKey(set settings, passed map[string]string, provider *apiProvider, api map[*apiProvider]string) bool {
	kinds := providerKinds(provider)
	if handedIn(provider, kinds, passed) {
		return true
	}
	c, err := findCredential(set.lookup, set.secretsDir(), kinds, api[provider])
	return c != nil || err != nil
}

// notIn are the hosts that entries does not list (by host and port),
// each once.
func notIn(entries, hosts []allowlist.Entry) []allowlist.Entry {
	have := map[allowlist.Entry]bool{}
	for _, e := range entries {
		have[e.Key()] = true
	}
	var out []allowlist.Entry
	for _, h := range hosts {
		if !have[h.Key()] {
			have[h.Key()] = true
			out = append(out, h)
		}
	}
	return out
}

// withAgentHosts is entries plus those of hosts not already in it: the
// list a session with an agent preset runs with, after every edit too.
func withAgentHosts(entries, hosts []allowlist.Entry) []allowlist.Entry {
	return append(slices.Clone(entries), notIn(entries, hosts)...)
}

// agentHostsLine says which hosts the agent's preset added to listed.
func agentHostsLine(a agentPreset, hosts, listed []allowlist.Entry) string {
	var names []string
	for _, h := range notIn(listed, hosts) {
		names = append(names, h.Line())
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("agent %s: allowed for this session, not written to your allowlist: %s", a.name, strings.Join(names, ", "))
}

// pickAgent sets the agent's preset, image, command and hosts: --agent's,
// else AGENT_SANDBOX_AGENT's, else Claude Code.
func (cfg *sessionConfig) pickAgent(set settings, la launchArgs) error {
	name, from := la.agent, "--agent"
	if name == "" {
		name, from = set.agent, "AGENT_SANDBOX_AGENT"
	}
	if name == "" {
		name = defaultAgent
	}
	a, err := lookupAgent(name, from)
	if err != nil {
		return err
	}
	cfg.agent, cfg.image = a, set.image
	if !la.exec {
		// The agent's own command, with the arguments given.
		cfg.cmd = append(slices.Clone(a.command), la.cmd[1:]...)
	}
	if a.recipe == "" {
		return nil
	}
	if dflt, _ := defaultImageNames(); set.image != dflt {
		return fmt.Errorf("%s %s runs its own image, built on agent-sandbox's, but AGENT_SANDBOX_IMAGE names %s: unset one of them", from, a.name, set.image)
	}
	cfg.image = a.imageName()
	api := set.parsed.apiHosts
	if cfg.agentHosts, err = a.hosts(api, hasKey(set, la.env, a.provider, api)); err != nil {
		return err
	}
	cfg.listed = cfg.entries
	cfg.entries = withAgentHosts(cfg.entries, cfg.agentHosts)
	return nil
}

// agentImages are the images the session needs beyond the two: its
// agent's, if that has one of its own.
func (cfg sessionConfig) agentImages(set settings) []sessionImage {
	if cfg.agent.recipe == "" {
		return nil
	}
	return []sessionImage{cfg.agent.image(set.image)}
}
