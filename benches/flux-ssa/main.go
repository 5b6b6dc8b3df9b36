// Command flux-ssa applies a directory of multi-document YAML with Flux's apply engine
// (github.com/fluxcd/pkg/ssa, ResourceManager.ApplyAllStaged), set up as kustomize-controller
// sets it up for a Kustomization: owner labels, the same apply options, SSA concurrency and
// client rate limits. It is the anchor of benches/scale.rs: Weft and Flux's engine apply the
// same objects to the same API server, behind the same counting proxy.
//
// Usage:
//
//	flux-ssa -kubeconfig PATH -dir DIR [-mode default|tuned|raw|raw-apply] [-passes N]
//
// Modes:
//   - default: kustomize-controller's defaults (--concurrent-ssa 4, client QPS 50, burst 300);
//   - tuned: no client-side rate limit and SSA concurrency 10, the most a user can ask of it;
//   - raw: no engine at all: a plain POST (create) of every object from 32 goroutines with no
//     client-side rate limit, the API server's own create rate for these objects (issue 47
//     item 1: the baseline a first pass is measured against). One pass only;
//   - raw-apply: no engine either: a server-side apply (forced, field manager `weft`,
//     `fieldValidation=Ignore` as Weft sends for the core group) of every object from 32
//     goroutines, the API server's own rate of first applies for these objects: what a first
//     pass that writes every object as an apply could reach at best. One pass only.
//
// One JSON line per pass on stdout: wall time and the change set counted by action.
// API calls are not counted here: the benchmark puts a counting proxy in front of the server.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/normalize"
	ssautils "github.com/fluxcd/pkg/ssa/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// The API group of kustomize-controller's owner labels (`<group>/name`, `<group>/namespace`).
const ownerGroup = "kustomize.toolkit.fluxcd.io"

type mode struct {
	concurrency int
	qps         float32
	burst       int
}

var modes = map[string]mode{
	// kustomize-controller's flag defaults: --concurrent-ssa=4, --kube-api-qps=50, --kube-api-burst=300.
	"default": {concurrency: 4, qps: 50, burst: 300},
	// client-go builds no rate limiter for a negative QPS.
	"tuned": {concurrency: 10, qps: -1, burst: 0},
	// Plain creates at full concurrency, no engine.
	"raw": {concurrency: rawConcurrency, qps: -1, burst: 0},
	// Plain server-side applies at full concurrency, no engine.
	"raw-apply": {concurrency: rawConcurrency, qps: -1, burst: 0},
}

// How many creates (or applies) the raw modes have in flight at once.
const rawConcurrency = 32

type passResult struct {
	Tool        string  `json:"tool"`
	Mode        string  `json:"mode"`
	Pass        int     `json:"pass"`
	Objects     int     `json:"objects"`
	WallSeconds float64 `json:"wall_seconds"`
	// Reading and parsing the YAML, apart from the apply.
	ReadSeconds float64 `json:"read_seconds"`
	Created     int     `json:"created"`
	Configured  int     `json:"configured"`
	Unchanged   int     `json:"unchanged"`
	Other       int     `json:"other"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the target cluster")
	dir := flag.String("dir", "", "directory of *.yaml / *.yml files (walked recursively)")
	modeName := flag.String("mode", "default", "default | tuned | raw | raw-apply")
	passes := flag.Int("passes", 1, "how many passes to run in this process (the first applies, the next are no-op)")
	name := flag.String("name", "bench", "name of the Kustomization the owner labels name")
	namespace := flag.String("namespace", "flux-system", "namespace of the Kustomization the owner labels name")
	fieldManager := flag.String("field-manager", "flux-bench", "server-side apply field manager")
	timeout := flag.Duration("timeout", 2*time.Hour, "deadline of all passes")
	flag.Parse()

	m, ok := modes[*modeName]
	if !ok || *dir == "" || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "usage: flux-ssa -kubeconfig PATH -dir DIR [-mode default|tuned|raw|raw-apply] [-passes N]")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *dir, *modeName, m, *passes, *name, *namespace, *fieldManager, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "flux-ssa:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, dir, modeName string, m mode, passes int, name, namespace, fieldManager string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	cfg.QPS = m.qps
	cfg.Burst = m.burst
	cfg.UserAgent = "flux-ssa-bench/" + modeName
	// Deprecation warnings would go to stderr for every object; the controller logs them too.
	cfg.WarningHandler = rest.NoWarnings{}

	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return err
	}
	// An uncached client, as kustomize-controller's impersonation client is: every Get reaches
	// the API server.
	kubeClient, err := client.New(cfg, client.Options{HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return err
	}
	poller := polling.NewStatusPoller(kubeClient, mapper, polling.Options{})

	enc := json.NewEncoder(os.Stdout)
	for pass := 1; pass <= passes; pass++ {
		start := time.Now()
		objects, err := readDir(dir)
		if err != nil {
			return err
		}
		read := time.Since(start)

		if modeName == "raw" || modeName == "raw-apply" {
			r, err := writeAll(ctx, kubeClient, objects, m.concurrency, modeName == "raw-apply")
			if err != nil {
				return fmt.Errorf("pass %d: %w", pass, err)
			}
			r.Pass, r.WallSeconds, r.ReadSeconds = pass, time.Since(start).Seconds(), read.Seconds()
			if err := enc.Encode(r); err != nil {
				return err
			}
			continue
		}

		manager := ssa.NewResourceManager(kubeClient, poller, ssa.Owner{Field: fieldManager, Group: ownerGroup})
		manager.SetOwnerLabels(objects, name, namespace)
		manager.SetConcurrency(m.concurrency)
		if err := normalize.UnstructuredList(objects); err != nil {
			return err
		}
		changes, err := manager.ApplyAllStaged(ctx, objects, applyOptions(fieldManager))
		if err != nil {
			return fmt.Errorf("pass %d: %w", pass, err)
		}

		r := passResult{
			Tool: "flux-ssa", Mode: modeName, Pass: pass, Objects: len(objects),
			WallSeconds: time.Since(start).Seconds(), ReadSeconds: read.Seconds(),
		}
		for _, e := range changes.Entries {
			switch e.Action {
			case ssa.CreatedAction:
				r.Created++
			case ssa.ConfiguredAction:
				r.Configured++
			case ssa.UnchangedAction:
				r.Unchanged++
			default:
				r.Other++
			}
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// writeAll POSTs every object once (or, with apply, server-side applies it as field manager
// `weft`, forced), `concurrency` at a time, with no engine around the calls: no dry-run, no read,
// no staging. Any failure (for a create, an object that exists included) fails the pass.
func writeAll(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, concurrency int, apply bool) (passResult, error) {
	work := make(chan *unstructured.Unstructured)
	errs := make(chan error, len(objects))
	var wg sync.WaitGroup
	for i := 0; i < concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for obj := range work {
				var err error
				if apply {
					//nolint:staticcheck // client.Apply on an unstructured object: the body as read
					err = c.Patch(ctx, obj, client.Apply, client.FieldOwner("weft"), client.ForceOwnership,
						client.FieldValidation(metav1.FieldValidationIgnore))
				} else {
					err = c.Create(ctx, obj)
				}
				if err != nil {
					errs <- fmt.Errorf("writing %s/%s: %w", obj.GetKind(), obj.GetName(), err)
				}
			}
		}()
	}
	for _, obj := range objects {
		work <- obj
	}
	close(work)
	wg.Wait()
	close(errs)
	if err, failed := <-errs; failed {
		return passResult{}, err
	}
	if apply {
		return passResult{Tool: "raw-apply", Mode: "raw-apply", Objects: len(objects), Created: len(objects)}, nil
	}
	return passResult{Tool: "raw-create", Mode: "raw", Objects: len(objects), Created: len(objects)}, nil
}

// applyOptions are the options a Kustomization without force, exclusions or drift rules gets
// from kustomize-controller: the engine's defaults, its selectors, and the metadata cleanup
// that takes fields over from kubectl and from the controller's own pre-SSA updates.
func applyOptions(fieldManager string) ssa.ApplyOptions {
	opts := ssa.DefaultApplyOptions()
	opts.ExclusionSelector = map[string]string{
		ownerGroup + "/reconcile": "disabled",
		ownerGroup + "/ssa":       "Ignore",
	}
	opts.IfNotPresentSelector = map[string]string{ownerGroup + "/ssa": "IfNotPresent"}
	opts.ForceSelector = map[string]string{ownerGroup + "/force": "enabled"}
	opts.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: fieldManager, OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: map[string]string{ownerGroup + "/ssa": "Merge"},
	}
	return opts
}

// readDir parses every YAML file under dir, in path order.
func readDir(dir string) ([]*unstructured.Unstructured, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != dir {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var objects []*unstructured.Unstructured
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		objs, err := ssautils.ReadObjects(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		objects = append(objects, objs...)
	}
	return objects, nil
}
