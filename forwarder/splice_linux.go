package main

import (
	"io"
	"sync"
	"syscall"
	"unsafe"
)

// Why not io.Copy, which splices too: the net package makes each splice
// through syscall.Syscall, and entering a syscall wakes the runtime's
// sysmon thread whenever it sleeps, which then polls for a while. On the
// machines this runs on (two vCPUs of a paravirtualised guest, where a
// context switch costs tens of microseconds) that made 30 or more context
// switches per relayed connection, five times nginx's, and 1.3 ms of CPU
// against nginx's 0.5 ms. Raw, non-blocking splices that wait in the
// runtime's netpoller, not in a syscall, leave sysmon asleep: 14 per
// connection (BENCHMARKS.md has the measurements).

const (
	spliceMove     = 0x1 // SPLICE_F_MOVE
	spliceNonblock = 0x2 // SPLICE_F_NONBLOCK
	// pipeSize is what each direction may hold between its two splices:
	// as large as an unprivileged process may ask for, so that a busy
	// stream moves in few calls.
	pipeSize = 1 << 20
	// maxIdlePipes bounds the empty pipes kept for the next connections.
	maxIdlePipes = 16
)

type kpipe struct{ r, w int }

var idlePipes struct {
	sync.Mutex
	free []kpipe
}

func getPipe() (kpipe, error) {
	idlePipes.Lock()
	if n := len(idlePipes.free); n > 0 {
		p := idlePipes.free[n-1]
		idlePipes.free = idlePipes.free[:n-1]
		idlePipes.Unlock()
		return p, nil
	}
	idlePipes.Unlock()
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return kpipe{}, err
	}
	// A smaller pipe still works, in more calls.
	_, _, _ = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fds[0]), syscall.F_SETPIPE_SZ, pipeSize)
	return kpipe{r: fds[0], w: fds[1]}, nil
}

// putPipe keeps an empty pipe for reuse; one that may hold data is closed.
func putPipe(p kpipe, empty bool) {
	if empty {
		idlePipes.Lock()
		if len(idlePipes.free) < maxIdlePipes {
			idlePipes.free = append(idlePipes.free, p)
			idlePipes.Unlock()
			return
		}
		idlePipes.Unlock()
	}
	_ = syscall.Close(p.r)
	_ = syscall.Close(p.w)
}

func splice(in, out int, n int) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), spliceMove|spliceNonblock)
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

// relayCopy moves src's bytes to dst until src's EOF, through a pipe,
// without a copy to user space.
func relayCopy(dst, src relayConn) error {
	rs, err := src.SyscallConn()
	if err != nil {
		return err
	}
	ws, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	p, err := getPipe()
	if err != nil {
		return err
	}
	inPipe := 0
	defer func() { putPipe(p, inPipe == 0) }()
	for {
		var n int
		var serr syscall.Errno
		if err := rs.Read(func(fd uintptr) bool {
			n, serr = splice(int(fd), p.w, pipeSize)
			return serr != syscall.EAGAIN
		}); err != nil {
			return err
		}
		if serr != 0 {
			return serr
		}
		if n == 0 {
			return nil // EOF
		}
		inPipe = n
		if err := ws.Write(func(fd uintptr) bool {
			for inPipe > 0 {
				m, e := splice(p.r, int(fd), inPipe)
				if e == syscall.EAGAIN {
					return false
				}
				if e != 0 {
					serr = e
					return true
				}
				if m == 0 {
					serr = syscall.EPIPE
					return true
				}
				inPipe -= m
			}
			return true
		}); err != nil {
			return err
		}
		if serr != 0 {
			return serr
		}
	}
}

// userIO moves bytes from src to dst through user space, where the watch
// looks at them, with raw non-blocking reads and writes that wait in the
// netpoller, as the splices do, not in a syscall.
type userIO struct{ src, dst syscall.RawConn }

func newUserIO(dst, src relayConn) (*userIO, error) {
	rs, err := src.SyscallConn()
	if err != nil {
		return nil, err
	}
	ws, err := dst.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &userIO{src: rs, dst: ws}, nil
}

// readInto reads into the free space of *h's buffer. When *h is nil, it
// takes one from pool once there are bytes to read, and gives it back
// while there are none, so a relay waiting for its client holds no
// buffer. It returns what it read and how much room there was: io.EOF
// at the end.
func (u *userIO) readInto(h **helloBuf, pool *sync.Pool) (n, free int, err error) {
	var serr syscall.Errno
	if err := u.src.Read(func(fd uintptr) bool {
		fresh := *h == nil
		if fresh {
			*h = pool.Get().(*helloBuf)
		}
		b := (*h).b
		free = cap(b) - len(b)
		n, serr = rawIO(syscall.SYS_READ, int(fd), b[len(b):cap(b)])
		if serr == syscall.EAGAIN {
			if fresh {
				(*h).release()
				*h = nil
			}
			return false
		}
		return true
	}); err != nil {
		return 0, free, err
	}
	if serr != 0 {
		return 0, free, serr
	}
	if n == 0 {
		return 0, free, io.EOF
	}
	return n, free, nil
}

// write writes all of b.
func (u *userIO) write(b []byte) error {
	var serr syscall.Errno
	if err := u.dst.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			n, e := rawIO(syscall.SYS_WRITE, int(fd), b)
			if e == syscall.EAGAIN {
				return false
			}
			if e != 0 {
				serr = e
				return true
			}
			b = b[n:]
		}
		return true
	}); err != nil {
		return err
	}
	if serr != 0 {
		return serr
	}
	return nil
}

func rawIO(trap uintptr, fd int, b []byte) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}
