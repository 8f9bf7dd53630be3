//go:build !asb_mutation

package main

// mutated reports whether a defence is turned off for hack/mutation-check.
// Only a binary built with the asb_mutation tag can turn one off; in any
// other build this is false and the compiler drops the branch.
func mutated(string) bool { return false }

// mutating is false outside a mutation-check build. A hook written
// `if mutating && mutated(NAME)` is dropped before the function is
// compiled at all, so that it cannot even change the order of the
// function's instructions, as a hook inlined to false still can
// (openProject's was).
const mutating = false
