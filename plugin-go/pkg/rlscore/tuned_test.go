package rlscore_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedulermetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/rlscore/rlscore/plugin-go/pkg/rlscore"
)

// loadTunedProfile loads a configuration written by rlscore-tune with kube-scheduler's own loader
// and validation, and returns its rl-tuned profile.
func loadTunedProfile(t *testing.T, path string) *schedulerapi.KubeSchedulerProfile {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	cfg, err := options.LoadConfigFromFile(logger, path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	if errs := validation.ValidateKubeSchedulerConfiguration(cfg); errs != nil {
		t.Fatalf("validating %s: %v", path, errs)
	}
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == "rl-tuned" {
			return &cfg.Profiles[i]
		}
	}
	t.Fatalf("%s has no rl-tuned profile", path)
	return nil
}

// tunedCase is one state written by tests/test_tuned_profile.py: nodes with what they already
// run, a pod, and the total score Python's kube_scores.node_scores gives each node.
type tunedNode struct {
	Name            string `json:"name"`
	CPUMilli        int64  `json:"cpu_milli"`
	MemoryBytes     int64  `json:"memory_bytes"`
	RequestedCPU    int64  `json:"requested_cpu_milli"`
	RequestedMemory int64  `json:"requested_memory_bytes"`
}

type tunedCase struct {
	Config string      `json:"config"` // the KubeSchedulerConfiguration file
	Nodes  []tunedNode `json:"nodes"`
	Pod    struct {
		CPUMilli    int64 `json:"cpu_milli"`
		MemoryBytes int64 `json:"memory_bytes"`
	} `json:"pod"`
	Expected map[string]int64 `json:"expected"`
}

func requests(cpuMilli, memory int64) v1.ResourceList {
	return v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI)}
}

// resourceScores runs the profile's PreScore and Score plugins (the real framework, the in-tree
// plugins with their configured args and weights) and returns, per node, the weighted sum of the
// resource plugins' scores.
func resourceScores(t *testing.T, prof *schedulerapi.KubeSchedulerProfile, c tunedCase) (map[string]int64, map[string]int32) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	schedulermetrics.Register() // the framework instruments its plugins (once per process)
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i, n := range c.Nodes {
		alloc := requests(n.CPUMilli, n.MemoryBytes)
		alloc[v1.ResourcePods] = resource.MustParse("110")
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name},
			Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc}})
		if n.RequestedCPU > 0 || n.RequestedMemory > 0 { // what the node runs, as one pod
			pods = append(pods, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("running-%d", i),
				Namespace: "default", UID: types.UID(fmt.Sprintf("running-%d", i))},
				Spec: v1.PodSpec{NodeName: n.Name, Containers: []v1.Container{{Name: "c",
					Resources: v1.ResourceRequirements{Requests: requests(n.RequestedCPU, n.RequestedMemory)}}}}})
		}
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "incoming", Namespace: "default", UID: "incoming"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c",
			Resources: v1.ResourceRequirements{Requests: requests(c.Pod.CPUMilli, c.Pod.MemoryBytes)}}}}}
	snapshot := internalcache.NewSnapshot(pods, nodes)
	client := fake.NewClientset()
	registry := plugins.NewInTreeRegistry()
	if err := registry.Merge(frameworkruntime.Registry{rlscore.Name: rlscore.New}); err != nil {
		t.Fatal(err)
	}
	// DynamicResources needs the scheduler's DRA manager, which a bare framework lacks; it scores
	// no node for pods without resource claims, so it is left out here.
	prof = prof.DeepCopy()
	kept := prof.Plugins.MultiPoint.Enabled[:0]
	for _, p := range prof.Plugins.MultiPoint.Enabled {
		if p.Name != "DynamicResources" {
			kept = append(kept, p)
		}
	}
	prof.Plugins.MultiPoint.Enabled = kept
	f, err := frameworkruntime.NewFramework(ctx, registry, prof,
		frameworkruntime.WithSnapshotSharedLister(snapshot), frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)))
	if err != nil {
		t.Fatalf("building the rl-tuned framework: %v", err)
	}
	infos, err := snapshot.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	if st := f.RunPreScorePlugins(ctx, state, pod, infos); !st.IsSuccess() && !st.IsSkip() {
		t.Fatalf("PreScore: %v", st)
	}
	scores, st := f.RunScorePlugins(ctx, state, pod, infos)
	if !st.IsSuccess() {
		t.Fatalf("Score: %v", st)
	}
	weights := map[string]int32{}
	for _, p := range f.ListPlugins().Score.Enabled {
		weights[p.Name] = p.Weight
	}
	out := map[string]int64{}
	for _, ns := range scores {
		for _, ps := range ns.Scores {
			if ps.Name == "NodeResourcesFit" || ps.Name == "NodeResourcesBalancedAllocation" {
				out[ns.Name] += ps.Score
			}
		}
	}
	return out, weights
}

// TestTunedExamplesLoad: the profiles rlscore-tune wrote for the README load with kube-scheduler's
// own loader, keep the default plugins they do not tune, and build a working framework.
func TestTunedExamplesLoad(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(examples, "rl-tuned-*.yaml"))
	if len(paths) == 0 {
		t.Fatal("no examples/scheduler-config/rl-tuned-*.yaml")
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			prof := loadTunedProfile(t, path)
			c := tunedCase{Nodes: []tunedNode{{Name: "node-a", CPUMilli: 4000, MemoryBytes: 8 << 30,
				RequestedCPU: 1000, RequestedMemory: 1 << 30}}}
			c.Pod.CPUMilli, c.Pod.MemoryBytes = 250, 64<<20
			s, got := resourceScores(t, prof, c)
			if s["node-a"] <= 0 {
				t.Errorf("rl-tuned gave no resource score: %v", s)
			}
			for _, kept := range []string{"TaintToleration", "NodeAffinity", "PodTopologySpread", "ImageLocality"} {
				if _, ok := got[kept]; !ok {
					t.Errorf("default score plugin %s missing from rl-tuned: %v", kept, got)
				}
			}
			if got["NodeResourcesFit"] < 1 {
				t.Errorf("NodeResourcesFit not scoring: %v", got)
			}
		})
	}
}

// TestTunedProfileScoresMatchPython: for configurations and states Python drew at random, the real
// framework's resource scores equal the simulator's (agent/tune/kube_scores.py). Run by
// tests/test_tuned_profile.py with RLSCORE_TUNED_PARITY_FILE; skipped without it.
func TestTunedProfileScoresMatchPython(t *testing.T) {
	path := os.Getenv("RLSCORE_TUNED_PARITY_FILE")
	if path == "" {
		t.Skip("RLSCORE_TUNED_PARITY_FILE not set (tests/test_tuned_profile.py sets it)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []tunedCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	profiles := map[string]*schedulerapi.KubeSchedulerProfile{}
	mismatches := 0
	for i, c := range cases {
		prof, ok := profiles[c.Config]
		if !ok {
			prof = loadTunedProfile(t, c.Config)
			profiles[c.Config] = prof
		}
		got, _ := resourceScores(t, prof, c)
		for name, want := range c.Expected {
			if got[name] != want {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("case %d (%s) node %s: framework %d, python %d", i, filepath.Base(c.Config), name, got[name], want)
				}
			}
		}
	}
	t.Logf("%d cases, %d configurations, %d mismatches", len(cases), len(profiles), mismatches)
}
