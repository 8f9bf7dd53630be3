//go:build asb_mutation

package main

// mutation names the one defence this binary is built without, set with
// -ldflags "-X main.mutation=NAME" by hack/mutation-check, which builds it
// into a derived router image to check that the security rows catch each
// one. Never in a release.
var mutation string

func mutated(name string) bool { return mutation == name }
