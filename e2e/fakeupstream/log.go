package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// eventLog writes one line per received thing. The suite greps it for nonces,
// so every line is flushed before the reply goes out: a client that saw an
// answer can rely on the line already being in the file.
type eventLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *eventLog) printf(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	// A stray newline would split one event and hide half of it from greps.
	line = strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(line)
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), line)
}
