package inspect

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"sync/atomic"
)

// listen opens the unix socket nginx passes connections to. nginx's
// workers may run as another uid, so it is open to every uid: only the
// router's own processes see /tmp.
func listen(path string, cfg *tls.Config, conns *connSet) (net.Listener, error) {
	// A socket left by an earlier routerd in this container.
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("inspect: %w", err)
	}
	return &tlsListener{Listener: ln, cfg: cfg, conns: conns}, nil
}

// tlsListener hands out the accepted connections as TLS servers, each
// tracked with its name so that a reload can close it.
type tlsListener struct {
	net.Listener
	cfg   *tls.Config
	conns *connSet
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	t := &tracked{Conn: c, set: l.conns}
	l.conns.add(t)
	return tls.Server(t, l.cfg), nil
}

// tracked is an accepted connection and the name its ClientHello asked
// for (nil before the hello).
type tracked struct {
	net.Conn
	set  *connSet
	name atomic.Pointer[string]
}

func (t *tracked) Close() error {
	t.set.remove(t)
	err := t.Conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// connSet is the open connections.
type connSet struct {
	mu sync.Mutex
	m  map[*tracked]struct{}
}

func (s *connSet) add(t *tracked) {
	s.mu.Lock()
	s.m[t] = struct{}{}
	s.mu.Unlock()
}

func (s *connSet) remove(t *tracked) {
	s.mu.Lock()
	delete(s.m, t)
	s.mu.Unlock()
}

// closeIf closes the connections whose name cut picks and says how many
// it closed.
func (s *connSet) closeIf(cut func(name string) bool) int {
	var doomed []*tracked
	s.mu.Lock()
	for t := range s.m {
		if n := t.name.Load(); n != nil && cut(*n) {
			doomed = append(doomed, t)
		}
	}
	s.mu.Unlock()
	for _, t := range doomed {
		_ = t.Close()
	}
	return len(doomed)
}
