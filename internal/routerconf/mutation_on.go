//go:build asb_mutation

package routerconf

// mutation names the one defence of this package that a mutation-check
// build turns off (hack/mutation-check); set through the launcher's own.
var mutation string

// Mutate turns off the defence name, in an asb_mutation build only.
func Mutate(name string) { mutation = name }

func mutated(name string) bool { return mutation == name }
