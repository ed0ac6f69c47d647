package rlscore

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/parallelize"
	schedulermetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// TestGolden checks the port against Python's core, the reference: testdata/golden.json.gz holds what
// Python computes on random states (every feature column, every servable rule, each fixture model's
// values, a selector's logits and pick, the integer scores). `python -m tests.golden` (make golden)
// writes it; tests/test_golden.py fails when it is out of date with the Python code.

type goldenCase struct {
	Nodes       map[string]nullFloats                            `json:"nodes"`
	Now         *float64                                         `json:"cluster_requested"`
	Peak        *float64                                         `json:"recent_peak"`
	Pod         struct{ CPU, Memory, Soft, Hard, Usage float64 } `json:"pod"`
	Features    []float64                                        `json:"features"`
	PodFeatures []float64                                        `json:"pod_features"`
	Rules       map[string]nullFloats                            `json:"rules"` // every servable rule's values (null: not finite)
	Models      map[string]struct {
		Values nullFloats `json:"values"`
		Scores []int64    `json:"scores"`
		Rule   string     `json:"rule"` // a selector's pick, and its logits
		Logits []float64  `json:"logits"`
	} `json:"models"`
}

// closeTo: equal within 1e-9 (relative above 1), or both not finite.
func closeTo(got, want float64) bool {
	if !finite(want) {
		return !finite(got)
	}
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

// decodeGolden decodes testdata/golden.json.gz into file.
func decodeGolden(t *testing.T, file any) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(zr).Decode(file); err != nil {
		t.Fatal(err)
	}
}

func readGolden(t *testing.T) (map[string]*Model, []goldenCase, []string) {
	t.Helper()
	var file struct {
		NodeFeatures []string                   `json:"node_features"`
		Models       map[string]json.RawMessage `json:"models"`
		Cases        []goldenCase               `json:"cases"`
	}
	decodeGolden(t, &file)
	models := map[string]*Model{}
	for name, raw := range file.Models {
		m, err := ParseModel(raw)
		if err != nil {
			t.Fatalf("golden model %s: %v (after a feature spec change: make golden)", name, err)
		}
		models[name] = m
	}
	if len(file.Cases) == 0 || len(models) == 0 {
		t.Fatal("no golden cases or models")
	}
	return models, file.Cases, file.NodeFeatures
}

func TestGolden(t *testing.T) {
	models, cases, names := readGolden(t)
	if len(names) != numNodeFeatures {
		t.Fatalf("golden fixtures have %d node features, the plugin computes %d", len(names), numNodeFeatures)
	}
	for k, name := range ruleFeatures {
		if names[numStateFeatures+k] != "rule:"+name {
			t.Fatalf("feature column %d is %s in the fixtures, rule:%s here", numStateFeatures+k, names[numStateFeatures+k], name)
		}
	}
	parallel := schedulerParallel(4)
	var features Features
	var scratch forwardScratch
	var worst float64
	nodes, rulesChecked, picks := 0, 0, map[string]bool{}
	for k, c := range cases {
		s := nodeStateOf(t, c.Nodes)
		s.ClusterCPURequested, s.RecentPeakCPURequested = math.NaN(), math.NaN()
		if c.Now != nil {
			s.ClusterCPURequested = *c.Now
		}
		if c.Peak != nil {
			s.RecentPeakCPURequested = *c.Peak
		}
		n := s.Len()
		nodes += n
		pod := PodRequest{CPUMillicores: c.Pod.CPU, MemoryBytes: c.Pod.Memory, LatencySoftMs: c.Pod.Soft,
			LatencyHardMs: c.Pod.Hard, CPUUsageRatio: c.Pod.Usage}
		features.skipRules = false
		NodeFeatures(s, pod, &features)
		for i, want := range c.Features {
			if features.Nodes[i] != want {
				t.Fatalf("case %d (%d nodes): node %d feature %s: go %v, python %v", k, n,
					i/numNodeFeatures, names[i%numNodeFeatures], features.Nodes[i], want)
			}
		}
		for i, want := range c.PodFeatures {
			if features.Pod[i] != want {
				t.Fatalf("case %d: pod feature %d: go %v, python %v", k, i, features.Pod[i], want)
			}
		}
		for name, want := range c.Rules {
			rule, ok := rules[name]
			if !ok {
				t.Fatalf("case %d: the plugin does not compute rule %q", k, name)
			}
			got := make([]float64, n)
			rule(s, pod, got)
			for i := range want {
				if !closeTo(got[i], want[i]) {
					t.Fatalf("case %d (%d nodes): rule %s, node %d: go %v, python %v", k, n, name, i, got[i], want[i])
				}
			}
			rulesChecked++
		}
		for name, answer := range c.Models {
			model, ok := models[name]
			if !ok {
				t.Fatalf("case %d: no model %q", k, name)
			}
			values := make([]float64, n)
			picked := model.Values(s, pod, &features, values, &scratch, nil)
			if answer.Rule != "" {
				if picked < 0 || model.Rules()[picked] != answer.Rule {
					t.Fatalf("case %d (%s, %d nodes): the selector picks %d of %v, python %s", k, name, n, picked,
						model.Rules(), answer.Rule)
				}
				picks[answer.Rule] = true
				for i, want := range answer.Logits {
					if !closeTo(scratch.logits[i], want) {
						t.Fatalf("case %d (%s): logit %d: go %v, python %v", k, name, i, scratch.logits[i], want)
					}
				}
			}
			inParallel := make([]float64, n)
			model.Values(s, pod, &features, inParallel, &forwardScratch{}, parallel.Until)
			for i := range values {
				if values[i] != inParallel[i] {
					t.Fatalf("case %d (%s): node %d: in parallel %v, serial %v", k, name, i, inParallel[i], values[i])
				}
			}
			low, high := math.Inf(1), math.Inf(-1)
			for i, want := range answer.Values {
				if !closeTo(values[i], want) {
					t.Fatalf("case %d (%s, %d nodes): node %d: value go %v, python %v", k, name, n, i, values[i], want)
				}
				if finite(want) {
					worst = math.Max(worst, math.Abs(values[i]-want))
					low, high = math.Min(low, want), math.Max(high, want)
				}
			}
			scores := make([]int64, n)
			ToNodeScores(values, scores)
			for i, want := range answer.Scores {
				if scores[i] != want {
					// only where Python's scaled value sits on a rounding boundary, or on the tie's edge
					// next to the best, may 1e-15 flip it
					scaled := (answer.Values[i] - low) / (high - low) * 100
					onTieEdge := math.Abs(high-scoreTie-answer.Values[i]) < 1e-12
					if (math.Abs(scaled-math.Floor(scaled)-0.5) > 1e-6 && !onTieEdge) || absInt(scores[i]-want) > 1 {
						t.Fatalf("case %d (%s, %d nodes): node %d: score go %d, python %d", k, name, n, i, scores[i], want)
					}
				}
			}
		}
	}
	if len(picks) < 4 {
		t.Fatalf("the selectors picked %v only: their picks would hardly be tested", picks)
	}
	t.Logf("golden: %d cases, %d nodes: features and scores equal, largest |value difference| %.2g; %d rule runs equal; picks %d rules",
		len(cases), nodes, worst, rulesChecked, len(picks))
}

// schedulerParallel runs pieces on the scheduler's own parallelizer.
type schedulerParallel int

func (p schedulerParallel) Until(pieces int, piece func(int)) {
	schedulermetrics.Register() // the parallelizer counts its goroutines there; registers once
	parallelize.NewParallelizer(int(p)).Until(context.Background(), pieces, piece, Name)
}

func absInt(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func nodeStateOf(t *testing.T, cols map[string]nullFloats) *NodeState {
	t.Helper()
	s := &NodeState{}
	for name, dst := range map[string]*[]float64{"cpu_capacity": &s.CPUCapacity, "memory_capacity": &s.MemoryCapacity,
		"max_pods": &s.MaxPods, "cpu_requested": &s.CPURequested, "memory_requested": &s.MemoryRequested,
		"pods": &s.Pods, "cpu_utilization": &s.CPUUtilization, "memory_utilization": &s.MemoryUtilization,
		"latency_ms": &s.LatencyMs, "power_idle_watts": &s.PowerIdleWatts, "power_max_watts": &s.PowerMaxWatts,
		"network_receive_bytes_per_s": &s.NetworkReceiveBytesPerS, "tcp_established": &s.TCPEstablished,
		"disk_utilization": &s.DiskUtilization, "cpu_requested_since_metrics": &s.CPURequestedSinceMetrics,
		"cpu_utilization_stddev": &s.CPUUtilizationStddev} {
		col, ok := cols[name]
		if !ok {
			t.Fatalf("case without %s", name)
		}
		*dst = col
	}
	return s
}

type clusterFile struct {
	Server string `json:"server"`
	Nodes  []struct {
		Name          string     `json:"name"`
		CPUMillicores int64      `json:"cpu_millicores"`
		MemoryBytes   int64      `json:"memory_bytes"`
		MaxPods       int64      `json:"max_pods"`
		Pods          [][2]int64 `json:"pods"` // cpu millicores, memory bytes
	} `json:"nodes"`
	Pods []struct {
		Name, Namespace string
		CPU, Memory     int64
		Annotations     map[string]string
	} `json:"pods"`
	Expected map[string]map[string]int64 `json:"expected"`
}

func requestsPod(name string, cpu, memory int64, annotations map[string]string) *v1.Pod {
	requests := v1.ResourceList{}
	if cpu > 0 {
		requests[v1.ResourceCPU] = *resource.NewMilliQuantity(cpu, resource.DecimalSI)
	}
	if memory > 0 {
		requests[v1.ResourceMemory] = *resource.NewQuantity(memory, resource.BinarySI)
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
		Annotations: annotations},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: requests}}}}}
}

func TestLocalScorerMatchesServer(t *testing.T) {
	path := os.Getenv("RLSCORE_PARITY_CLUSTER")
	if path == "" {
		t.Skip("RLSCORE_PARITY_CLUSTER unset: run tests/test_go_scorer_parity.py")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cluster clusterFile
	if err := json.Unmarshal(data, &cluster); err != nil {
		t.Fatal(err)
	}
	infos := make([]fwk.NodeInfo, 0, len(cluster.Nodes))
	for _, n := range cluster.Nodes {
		var pods []*v1.Pod
		for k, p := range n.Pods {
			pod := requestsPod(fmt.Sprintf("%s-%d", n.Name, k), p[0], p[1], nil)
			pod.Spec.NodeName = n.Name
			pods = append(pods, pod)
		}
		info := framework.NewNodeInfo(pods...)
		info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(n.CPUMillicores, resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(n.MemoryBytes, resource.BinarySI),
			v1.ResourcePods:   *resource.NewQuantity(n.MaxPods, resource.DecimalSI)}}})
		infos = append(infos, info)
	}
	args := &RLScoreArgs{SuggestionURL: cluster.Server + "/suggest", InProcess: true}
	args.SetDefaults()
	scorer := NewLocalScorer(args, NewClient(args), nil)
	if err := scorer.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range cluster.Pods {
		decision, why := scorer.Score(requestsPod(p.Name, p.CPU, p.Memory, p.Annotations), infos, "")
		if why != "" {
			t.Fatalf("pod %s: left to the server: %s", p.Name, why)
		}
		want := cluster.Expected[p.Name]
		if len(decision.scores) != len(want) {
			t.Fatalf("pod %s: %d scores, server gave %d", p.Name, len(decision.scores), len(want))
		}
		for name, score := range want {
			if got := decision.scores[name]; got != score {
				t.Fatalf("pod %s (%s) node %s: in process %d, server %d", p.Name, decision.policy, name, got, score)
			}
		}
		t.Logf("parity: pod %s policy %s model %s: %d nodes as the server scores them", p.Name, decision.policy,
			decision.version, len(want))
	}
}
