package main

import (
	"strings"
	"testing"
)

// A recording shaped like perf script's: the service forks conmon, conmon
// forks the exit command; threads fork too but are not processes.
const perfScript = `         swapper     0/0     PERF_RECORD_FORK(2:2):(0:0)
        kthreadd     0/0     PERF_RECORD_COMM: kthreadd:2/2
        kthreadd     0/0     PERF_RECORD_FORK(14:14):(2:2)
   agent-sandbox   100/100   PERF_RECORD_FORK(200:200):(100:100)
          podman   200/200   PERF_RECORD_COMM exec: podman:200/200
          podman   200/200   PERF_RECORD_FORK(200:201):(200:200)
          podman   200/201
          podman   200/200
          podman   200/200   PERF_RECORD_FORK(300:300):(200:200)
          conmon   300/300   PERF_RECORD_COMM exec: conmon:300/300
          conmon   300/300   PERF_RECORD_FORK(301:301):(300:300)
          podman   301/301   PERF_RECORD_COMM exec: podman:301/301
          podman   301/301
          conmon   300/300
          podman   200/200   PERF_RECORD_FORK(400:400):(200:200)
            runc   400/400   PERF_RECORD_COMM exec: runc:400/400
   runc:[2:INIT]   400/400
 tokio-runtime-w   50/51
   agent-sandbox   100/100
     ksoftirqd/0   14/14
         swapper     0/0
         swapper     0/0
           nginx   500/500
       perf-exec   90/90
`

func TestSplitPerf(t *testing.T) {
	got, err := splitPerf(strings.NewReader(perfScript), "agent-sandbox")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"service": 2, "cleanup": 1, "runc": 1, "conmon": 1, "network": 1, "launcher": 1, "kernel": 1, "idle": 2, "containers": 1, "other": 1}
	for k, v := range want {
		if got.samples[k] != v {
			t.Errorf("samples of %s = %d, want %d (all: %v)", k, got.samples[k], v, got.samples)
		}
	}
	if got.started["cleanup"] != 1 || got.started["service"] != 1 || got.started["runc"] != 1 {
		t.Errorf("processes started %v, want one service, one exit command, one runc", got.started)
	}
}

func TestSplitPerfRejectsNonsense(t *testing.T) {
	if _, err := splitPerf(strings.NewReader("not a perf line\n"), "agent-sandbox"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("err = %v, want one naming line 1", err)
	}
}
