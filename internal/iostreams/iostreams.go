// Package iostreams is the command's standard streams and what is known of
// the terminal behind them, built once in main and carried down to whoever
// reads or writes them (the agent's attach, a prompt, a progress line); and
// the one writer of the `agent-sandbox:` prefix that marks every line the
// launcher, rather than the agent, prints.
package iostreams

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// Prefix starts every line of the launcher's own, so that the user can
// tell it from the agent's output on the same terminal.
const Prefix = "agent-sandbox: "

// Streams are a command's stdin, stdout and stderr. Tests build one over
// buffers; a stream that is an *os.File on a terminal says so.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// System is the process's own streams.
func System() *Streams {
	return &Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}
}

// fd is the file descriptor behind a stream, if it has one.
func fd(stream any) (int, bool) {
	f, ok := stream.(*os.File)
	if !ok || f == nil {
		return -1, false
	}
	return int(f.Fd()), true
}

// InFd is stdin's file descriptor, if it is a file.
func (s *Streams) InFd() (int, bool) { return fd(s.In) }

// OutFd is stdout's file descriptor, if it is a file.
func (s *Streams) OutFd() (int, bool) { return fd(s.Out) }

// Interactive says both stdin and stdout are a terminal: the agent gets a
// terminal of its own, in raw mode, sized like this one.
func (s *Streams) Interactive() bool {
	in, ok1 := s.InFd()
	out, ok2 := s.OutFd()
	return ok1 && ok2 && term.IsTerminal(in) && term.IsTerminal(out)
}

// Size is the terminal's size on stdout.
func (s *Streams) Size() (width, height int, ok bool) {
	out, isFile := s.OutFd()
	if !isFile {
		return 0, 0, false
	}
	w, h, err := term.GetSize(out)
	return w, h, err == nil
}

// IsTerminal reports whether w is a terminal: one that gets a progress
// line redrawn in place, rather than a line per step.
func IsTerminal(w io.Writer) bool {
	f, ok := fd(w)
	return ok && term.IsTerminal(f)
}

// Width is the width of the terminal w is, if it is one.
func Width(w io.Writer) (int, bool) {
	f, ok := fd(w)
	if !ok {
		return 0, false
	}
	width, _, err := term.GetSize(f)
	return width, err == nil
}

// Say writes one line for the user, with the prefix.
func Say(w io.Writer, format string, a ...any) {
	fmt.Fprint(w, Prefixed(fmt.Sprintf(format, a...)))
}

// Prefixed is text with the prefix on each of its lines and a newline at
// its end: a report of several lines reads as the launcher's throughout.
// No text is no line.
func Prefixed(text string) string {
	if text == "" {
		return ""
	}
	text = strings.TrimSuffix(text, "\n")
	return Prefix + strings.ReplaceAll(text, "\n", "\n"+Prefix) + "\n"
}
