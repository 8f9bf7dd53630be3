//go:build !asb_mutation

package routerconf

// mutated reports whether a defence is turned off for hack/mutation-check:
// never, outside a build with the asb_mutation tag.
func mutated(string) bool { return false }
