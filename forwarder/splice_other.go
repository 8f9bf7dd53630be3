//go:build !linux

package main

import "io"

// relayCopy is io.Copy where there is no splice(2); the forwarder runs on
// Linux, this keeps the package building elsewhere.
func relayCopy(dst, src relayConn) error {
	_, err := io.Copy(dst, src)
	return err
}

// userIO moves bytes from src to dst through user space, where the watch
// looks at them.
type userIO struct{ src, dst relayConn }

func newUserIO(dst, src relayConn) (*userIO, error) { return &userIO{src: src, dst: dst}, nil }

func (u *userIO) read(b []byte) (int, error) { return u.src.Read(b) }

func (u *userIO) write(b []byte) error {
	_, err := u.dst.Write(b)
	return err
}
