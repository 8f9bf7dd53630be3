//go:build asb_mutation

package main

import (
	"github.com/agent-sandbox/agent-sandbox/internal/apiservice"
	"github.com/agent-sandbox/agent-sandbox/internal/projectdir"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
)

// mutation names the one defence this binary is built without, set with
// -ldflags "-X main.mutation=NAME" by hack/mutation-check, which checks
// that the security rows catch each one. Never in a release.
var mutation string

func mutated(name string) bool { return mutation == name }

// mutating: see mutation_off.go.
const mutating = true

// The launch dir's defences, podman's lookup and the router's plan live in
// their own packages.
func init() {
	projectdir.Mutate(mutation)
	apiservice.Mutate(mutation)
	routerconf.Mutate(mutation)
}
