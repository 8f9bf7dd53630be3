// Package trace prints how long each step of a session took, when
// AGENT_SANDBOX_TRACE is set: the first thing to look at when start-up is
// slow.
package trace

import (
	"io"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
)

// Tracer times the steps of one session or command from its start.
type Tracer struct {
	start time.Time
	On    bool
	Out   io.Writer
}

// New starts the clock; with on false no step is printed.
func New(on bool, out io.Writer) *Tracer {
	return &Tracer{start: time.Now(), On: on, Out: out}
}

// Step returns a func that reports the step's duration when called.
func (t *Tracer) Step(name string) func() {
	if !t.On {
		return func() {}
	}
	begin := time.Now()
	return func() {
		iostreams.Say(t.Out, "trace %6.1fms %6.1fms %s",
			float64(time.Since(t.start).Microseconds())/1000, float64(time.Since(begin).Microseconds())/1000, name)
	}
}
