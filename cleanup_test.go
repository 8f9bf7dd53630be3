package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestCleanupStackUnwindsNewestFirstAndReportsFailures(t *testing.T) {
	var (
		mu   sync.Mutex
		done []string
	)
	undo := func(name string, err error) func(context.Context) error {
		return func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			done = append(done, name)
			return err
		}
	}
	var s, left, right cleanupStack
	s.push("a", undo("a", nil))
	s.push("b", undo("b", errors.New("busy")))
	left.push("l1", undo("l1", nil))
	left.push("l2", undo("l2", nil))
	right.push("r1", undo("r1", errors.New("gone away")))
	s.pushParallel("both", &left, &right)
	s.push("c", undo("c", nil))

	err := s.unwind(context.Background())
	if done[0] != "c" || done[len(done)-2] != "b" || done[len(done)-1] != "a" {
		t.Errorf("undone in order %v, want c first, then the parallel pair, then b and a", done)
	}
	pair := done[1:4]
	if l1, l2 := slices.Index(pair, "l1"), slices.Index(pair, "l2"); l1 < 0 || l2 < 0 || l2 > l1 || !slices.Contains(pair, "r1") {
		t.Errorf("the parallel branches undid %v, want each newest first", pair)
	}
	for _, want := range []string{"could not remove b: busy", "could not remove r1: gone away"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, lacks %q", err, want)
		}
	}
	if msg := leftBehind(err); !strings.HasSuffix(msg, "run `agent-sandbox gc` to remove what this session left behind") {
		t.Errorf("leftBehind = %q, want the next step last", msg)
	}
	done = nil
	if err := s.unwind(context.Background()); err != nil || len(done) != 0 {
		t.Errorf("a second unwind undid %v (%v): the stack must be empty", done, err)
	}
}
