//go:build tools

// Package tools pins k8s.io/kubernetes/cmd/kube-apiserver in this module so
// that `go build k8s.io/kubernetes/cmd/kube-apiserver` works from here.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
