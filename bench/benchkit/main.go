// benchkit holds the Go parts of the benchmark that bench/run drives: the
// test PKI, the data-path upstream (fake DNS for *.test names and a TLS blob
// server), the data-path client, and the report that turns raw samples into
// BENCHMARKS.md's table. It is built static so the same binary runs on the
// host and inside the project's images.
package main

import (
	"fmt"
	"os"
)

var commands = map[string]func(args []string) error{
	"pki":       runPKI,
	"serve":     runServe,
	"client":    runClient,
	"hyperfine": runHyperfine,
	"report":    runReport,
	"perfsplit": runPerfSplit,
}

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: benchkit pki|serve|client|hyperfine|report|perfsplit [flags] (see bench/run)")
		os.Exit(2)
	}
	if err := commands[os.Args[1]](os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "benchkit %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
