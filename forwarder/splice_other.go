//go:build !linux

package main

import (
	"io"
	"sync"
)

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

// readInto reads into the free space of *h's buffer, taken from pool
// when *h is nil, and returns what it read and how much room there was.
func (u *userIO) readInto(h **helloBuf, pool *sync.Pool) (n, free int, err error) {
	if *h == nil {
		*h = pool.Get().(*helloBuf)
	}
	b := (*h).b
	free = cap(b) - len(b)
	n, err = u.src.Read(b[len(b):cap(b)])
	if n > 0 {
		// Bytes first; the error comes again at the next read.
		err = nil
	}
	return n, free, err
}

func (u *userIO) write(b []byte) error {
	_, err := u.dst.Write(b)
	return err
}
