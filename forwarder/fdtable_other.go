//go:build !linux

package main

// reserveFDs does nothing where the descriptor table is not Linux's.
func reserveFDs(int) {}
