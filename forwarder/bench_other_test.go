//go:build !linux

package main

import "testing"

// countSwitches reports nothing where there is no getrusage to ask.
func countSwitches(*testing.B) func() { return func() {} }
