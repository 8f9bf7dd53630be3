//go:build !asb_mutation

package main

// mutated reports whether a defence is turned off for hack/mutation-check.
// Only a binary built with the asb_mutation tag can turn one off; in any
// other build this is false and the compiler drops the branch.
func mutated(string) bool { return false }
