package projectdir

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Quote writes s so that pasting it into a shell gives back s as one word
// and runs nothing, and so that printing it moves no cursor and colours
// nothing: a name the agent chose is data, never a command or an escape
// sequence. Plain names stay as they are; others are single-quoted; those
// with control bytes, invalid UTF-8 or invisible formatting characters
// (bidirectional overrides) are written as $'...' with \x escapes, which
// bash and zsh read back and which no shell runs.
func Quote(s string) string {
	if s != "" && strings.Trim(s, plain) == "" {
		return s
	}
	if printable(s) {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteString("'")
	return b.String()
}

// plain are the bytes no shell gives a meaning to.
const plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-"

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || !unicode.IsPrint(r) && r != ' ' || unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}
