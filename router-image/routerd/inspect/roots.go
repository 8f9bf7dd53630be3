package inspect

import (
	"crypto/x509"
	"fmt"
	"sync"

	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
)

// rootsKey says which file, as stat saw it, a pool was read from.
type rootsKey struct {
	path  string
	stamp filestamp.Stamp
}

// roots is the pool upstream certificates are verified with, parsed from
// the bundle on first use.
type roots struct {
	key  rootsKey
	once sync.Once
	data []byte
	pool *x509.CertPool
	err  error
}

func newRoots(key rootsKey, data []byte) *roots { return &roots{key: key, data: data} }

func (r *roots) get() (*x509.CertPool, error) {
	r.once.Do(func() {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(r.data) {
			r.err = fmt.Errorf("trusted CA bundle %s holds no certificate", r.key.path)
		} else {
			r.pool = pool
		}
		r.data = nil
	})
	return r.pool, r.err
}
