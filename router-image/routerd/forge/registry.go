package forge

import "fmt"

// npmAudit are the POSTs npm audit makes to registry.npmjs.org: they send
// the project's dependency list and change nothing. They are matched
// exactly: any other spelling is a write.
var npmAudit = map[string]bool{
	"/-/npm/v1/security/advisories/bulk": true,
	"/-/npm/v1/security/audits":          true,
	"/-/npm/v1/security/audits/quick":    true,
}

// checkRegistry decides a request to a package registry: reads pass,
// writes (publish, unpublish, yank, owner and tag changes) only to a host
// the user allowed publishing to.
func checkRegistry(role Role, r Request, s Scope) Decision {
	if read(r.Method) {
		return admit("")
	}
	if err := cleanPath(r.Path); err != nil {
		return unclean(r, err)
	}
	if role == NPM && r.Method == "POST" && npmAudit[r.Path] {
		return admit("")
	}
	if s.Publish {
		return admit("")
	}
	return refuse("registry.publish", "", fmt.Sprintf("%s %s would publish or change a package, and package registries are read-only in the sandbox", r.Method, r.Path),
		"set AGENT_SANDBOX_PUBLISH to this host's name")
}
