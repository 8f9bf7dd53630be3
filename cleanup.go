package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// cleanupStack holds the undo of every step that created something, pushed
// the moment the thing exists, so that teardown removes exactly what was
// made, newest first, whatever step failed or was interrupted.
type cleanupStack struct {
	mu    sync.Mutex
	steps []cleanupStep
}

type cleanupStep struct {
	what string // what the undo removes, for the user if it fails
	undo func(context.Context) error
}

func (s *cleanupStack) push(what string, undo func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, cleanupStep{what, undo})
}

// pushParallel pushes one step that unwinds stacks side by side: what
// branches started side by side does not depend on each other either.
func (s *cleanupStack) pushParallel(what string, stacks ...*cleanupStack) {
	s.push(what, func(ctx context.Context) error {
		errs := make([]error, len(stacks))
		var wg sync.WaitGroup
		for i, st := range stacks {
			wg.Go(func() { errs[i] = st.unwind(ctx) })
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// unwind runs every undo, newest first, and empties the stack. Every undo
// runs even if another failed; the error names each that failed.
func (s *cleanupStack) unwind(ctx context.Context) error {
	s.mu.Lock()
	steps := s.steps
	s.steps = nil
	s.mu.Unlock()
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		if err := steps[i].undo(ctx); err != nil {
			errs = append(errs, cleanupFailed{steps[i].what, err})
		}
	}
	return errors.Join(errs...)
}

// cleanupFailed is an undo that failed: what it left behind.
type cleanupFailed struct {
	what string
	err  error
}

func (c cleanupFailed) Error() string { return fmt.Sprintf("could not remove %s: %v", c.what, c.err) }
func (c cleanupFailed) Unwrap() error { return c.err }

// leftBehind is what teardown says when it could not remove everything,
// with the command that finishes the job.
func leftBehind(err error) string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n") + "\nrun `agent-sandbox gc` to remove what this session left behind"
}
