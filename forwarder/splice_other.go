//go:build !linux

package main

import "io"

// relayCopy is io.Copy where there is no splice(2); the forwarder runs on
// Linux, this keeps the package building elsewhere.
func relayCopy(dst, src relayConn) error {
	_, err := io.Copy(dst, src)
	return err
}
