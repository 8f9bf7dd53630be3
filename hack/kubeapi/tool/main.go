// Command kubeapi-tool is the test harness's client for the local
// kube-apiserver that hack/kubeapi/run starts.
//
//	kubeapi-tool ports N
//	    prints N free TCP ports on 127.0.0.1, one a line.
//	kubeapi-tool apply -server URL -token-file F -ca-file F [-namespace NS]
//	    [-strict-warnings] FILE_OR_DIR...
//	    server-side applies (fieldValidation=Strict) every object of every
//	    YAML or JSON document in the files (directories: their *.yaml, *.yml
//	    and *.json files, recursively, in lexical order) and prints one line
//	    per object: "accepted KIND/NAME" or "REJECTED KIND/NAME: MESSAGE",
//	    plus "warning KIND/NAME: MESSAGE" for each warning the server sent.
//	    Exit status 1 if any object was rejected.
//
// Every namespace that a namespaced object lands in (its metadata.namespace,
// or -namespace when it has none) is first made to enforce the restricted Pod
// Security level (labels owned by the field manager "kubeapi-harness") and
// given its "default" ServiceAccount, which kube-controller-manager would
// otherwise make and without which the ServiceAccount admission plugin
// rejects every Pod.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

const (
	fieldManager   = "agent-sandbox-test"
	harnessManager = "kubeapi-harness"
	// PodSecurity's warnings (a workload whose pod template violates the
	// enforced level, or a Pod in a namespace with a warn label) read
	// `would violate PodSecurity "restricted:latest": ...`.
	podSecurityWarning = "violate PodSecurity"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "ports":
		n := 1
		if len(os.Args) > 2 {
			var err error
			if n, err = strconv.Atoi(os.Args[2]); err != nil || n < 1 {
				usage()
			}
		}
		if err := ports(os.Stdout, n); err != nil {
			fmt.Fprintln(os.Stderr, "kubeapi-tool:", err)
			os.Exit(2)
		}
	case "apply":
		os.Exit(applyMain(os.Args[2:]))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kubeapi-tool ports N | kubeapi-tool apply -server URL -token-file F -ca-file F [-namespace NS] [-strict-warnings] FILE_OR_DIR...")
	os.Exit(2)
}

// ports holds n listeners open at once so the ports differ, then frees them.
func ports(w io.Writer, n int) error {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		fmt.Fprintln(w, l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

// warnings collects the Warning headers of the requests in flight; the
// applier makes one request at a time.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// doc is one object to apply, or a document that could not be read.
type doc struct {
	where string // file and document number, for messages
	raw   []byte // the document as written, sent as is (YAML or JSON)
	obj   *unstructured.Unstructured
	err   error
}

func (d doc) label() string {
	if d.obj == nil || d.obj.GetKind() == "" {
		return d.where
	}
	name := d.obj.GetName()
	if name == "" {
		name = "(no name)"
	}
	return d.obj.GetKind() + "/" + name
}

type applier struct {
	dyn        dynamic.Interface
	mapper     *restmapper.DeferredDiscoveryRESTMapper
	warn       *warnings
	defaultNS  string
	strictWarn bool
	namespaces map[string]error
	out        io.Writer
}

func applyMain(args []string) int {
	fl := flag.NewFlagSet("apply", flag.ExitOnError)
	server := fl.String("server", "", "API server URL (https://127.0.0.1:PORT)")
	tokenFile := fl.String("token-file", "", "file holding a bearer token")
	caFile := fl.String("ca-file", "", "CA bundle for the server's certificate")
	ns := fl.String("namespace", "agent-sandbox", "namespace for namespaced objects that name none")
	strictWarn := fl.Bool("strict-warnings", false, "count a PodSecurity warning as a rejection")
	fl.Parse(args)
	if *server == "" || *tokenFile == "" || *caFile == "" || fl.NArg() == 0 {
		fl.Usage()
		return 2
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi-tool:", err)
		return 2
	}
	w := &warnings{}
	cfg := &rest.Config{
		Host:            *server,
		BearerToken:     strings.TrimSpace(string(token)),
		TLSClientConfig: rest.TLSClientConfig{CAFile: *caFile},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
		WarningHandler:  w,
		UserAgent:       "agent-sandbox-kubeapi-test",
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi-tool:", err)
		return 2
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi-tool:", err)
		return 2
	}
	docs, err := readPaths(fl.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi-tool:", err)
		return 2
	}
	a := &applier{
		dyn:        dyn,
		mapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco)),
		warn:       w,
		defaultNS:  *ns,
		strictWarn: *strictWarn,
		namespaces: map[string]error{},
		out:        os.Stdout,
	}
	ctx := context.Background()
	accepted, rejected := 0, 0
	for _, d := range docs {
		if a.apply(ctx, d) {
			accepted++
		} else {
			rejected++
		}
	}
	fmt.Fprintf(os.Stdout, "==> kubeapi: %d accepted, %d rejected\n", accepted, rejected)
	if len(docs) == 0 {
		fmt.Fprintln(os.Stdout, "REJECTED (nothing): no objects in", strings.Join(fl.Args(), " "))
		return 1
	}
	if rejected > 0 {
		return 1
	}
	return 0
}

// apply applies one document and prints its line(s); it reports acceptance.
func (a *applier) apply(ctx context.Context, d doc) bool {
	reject := func(msg string) bool {
		fmt.Fprintf(a.out, "REJECTED %s: %s\n", d.label(), oneLine(msg))
		return false
	}
	if d.err != nil {
		return reject(d.err.Error())
	}
	gvk := d.obj.GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		return reject("apiVersion and kind are required")
	}
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// A CustomResourceDefinition applied earlier may have added it.
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return reject("the server does not serve it: " + err.Error())
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := d.obj.GetNamespace()
		if ns == "" {
			ns = a.defaultNS
		}
		if err := a.ensureNamespace(ctx, ns); err != nil {
			return reject(fmt.Sprintf("namespace %s cannot be made to enforce pod-security restricted:latest: %v", ns, err))
		}
		ri = a.dyn.Resource(mapping.Resource).Namespace(ns)
	}
	if d.obj.GetName() == "" {
		return reject("metadata.name is required for server-side apply")
	}
	a.warn.take()
	_, err = ri.Patch(ctx, d.obj.GetName(), types.ApplyPatchType, d.raw, metav1.PatchOptions{
		FieldManager:    fieldManager,
		FieldValidation: metav1.FieldValidationStrict,
	})
	ws := a.warn.take()
	for _, m := range ws {
		fmt.Fprintf(a.out, "warning %s: %s\n", d.label(), oneLine(m))
	}
	if err != nil {
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return reject(st.Status().Message)
		}
		return reject(err.Error())
	}
	if a.strictWarn {
		for _, m := range ws {
			if strings.Contains(m, podSecurityWarning) {
				return reject("PodSecurity warning (KUBEAPI_STRICT_WARNINGS=1): " + m)
			}
		}
	}
	fmt.Fprintf(a.out, "accepted %s\n", d.label())
	return true
}

// ensureNamespace makes ns enforce (and warn at) the restricted Pod Security
// level and gives it its default ServiceAccount, once per run.
func (a *applier) ensureNamespace(ctx context.Context, ns string) error {
	if err, done := a.namespaces[ns]; done {
		return err
	}
	nsObj := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q,"labels":{
		"pod-security.kubernetes.io/enforce":"restricted",
		"pod-security.kubernetes.io/enforce-version":"latest",
		"pod-security.kubernetes.io/warn":"restricted",
		"pod-security.kubernetes.io/warn-version":"latest"}}}`, ns)
	saObj := fmt.Sprintf(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default","namespace":%q}}`, ns)
	// Not forced: a Namespace in the manifests that sets another level
	// conflicts with these labels, and that is reported as a rejection.
	opts := metav1.PatchOptions{FieldManager: harnessManager, FieldValidation: metav1.FieldValidationStrict}
	nsRes := a.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	saRes := a.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace(ns)
	_, err := nsRes.Patch(ctx, ns, types.ApplyPatchType, []byte(nsObj), opts)
	if err == nil {
		_, err = saRes.Patch(ctx, "default", types.ApplyPatchType, []byte(saObj), opts)
	}
	a.warn.take()
	a.namespaces[ns] = err
	if err == nil {
		fmt.Fprintf(a.out, "==> kubeapi: namespace %s enforces pod-security restricted:latest\n", ns)
	}
	return err
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// readPaths reads every document of the files, and of the YAML and JSON
// files under the directories, in order.
func readPaths(paths []string) ([]doc, error) {
	var docs []doc
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			ds, err := readFile(p)
			if err != nil {
				return nil, err
			}
			docs = append(docs, ds...)
			continue
		}
		err = filepath.WalkDir(p, func(f string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(f)) {
			case ".yaml", ".yml", ".json":
				if e.Type().IsRegular() {
					ds, err := readFile(f)
					if err != nil {
						return err
					}
					docs = append(docs, ds...)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return docs, nil
}

// readFile splits a file into its `---` separated documents; empty and
// comment-only documents are skipped, and a List is expanded into its items.
func readFile(path string) ([]doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var docs []doc
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for n := 1; ; n++ {
		raw, err := r.Read()
		if err == io.EOF {
			break
		}
		where := fmt.Sprintf("%s#%d", path, n)
		if err != nil {
			docs = append(docs, doc{where: where, err: fmt.Errorf("reading %s: %w", where, err)})
			break
		}
		var m map[string]any
		if err := yaml.Unmarshal(raw, &m); err != nil {
			docs = append(docs, doc{where: where, err: fmt.Errorf("parsing %s: %w", where, err)})
			continue
		}
		if len(m) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: m}
		if items, ok := m["items"].([]any); ok && strings.HasSuffix(obj.GetKind(), "List") {
			for i, it := range items {
				im, ok := it.(map[string]any)
				w := fmt.Sprintf("%s.items[%d]", where, i)
				if !ok {
					docs = append(docs, doc{where: w, err: fmt.Errorf("%s is not an object", w)})
					continue
				}
				b, err := yaml.Marshal(im)
				docs = append(docs, doc{where: w, raw: b, obj: &unstructured.Unstructured{Object: im}, err: err})
			}
			continue
		}
		docs = append(docs, doc{where: where, raw: bytes.TrimSpace(raw), obj: obj})
	}
	return docs, nil
}
