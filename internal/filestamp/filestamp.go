// Package filestamp tells whether a polled file may have changed, for the
// three binaries that follow files written by another process (the
// launcher's allowlist, the forwarder's and routerd's config).
package filestamp

import (
	"os"
	"syscall"
	"time"
)

// Stamp is what stat says about a file: a rename over it shows as a new
// inode, an edit in place as a new size or mtime.
type Stamp struct {
	Dev, Ino uint64
	Size     int64
	MTime    time.Time
}

// Of is fi's stamp.
func Of(fi os.FileInfo) Stamp {
	s := Stamp{Size: fi.Size(), MTime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.Dev, s.Ino = uint64(st.Dev), st.Ino
	}
	return s
}
