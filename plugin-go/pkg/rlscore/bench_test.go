package rlscore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// BenchmarkPreScoreScore measures one scheduling cycle of the plugin (PreScore + Score for every
// node) against a local server that answers from a canned body. The server's own handler time is
// reported separately and subtracted, giving the plugin's overhead per pod.
func BenchmarkPreScoreScore(b *testing.B) {
	for _, bench := range []struct {
		wire  string
		nodes int
	}{{WireJSON, 100}, {WireJSON, 1000}, {WireJSON, 5000}, {WireCompact, 100}, {WireCompact, 1000}, {WireCompact, 5000}} {
		n := bench.nodes
		b.Run(fmt.Sprintf("wire=%s/nodes=%d", bench.wire, n), func(b *testing.B) {
			names := make([]string, n)
			scores := make(map[string]int, n)
			for i := range names {
				names[i] = fmt.Sprintf("node-%05d", i)
				scores[names[i]] = i % 101
			}
			body, _ := json.Marshal(map[string]any{"policy": "EE", "source": "model", "scores": scores})
			compactBody := make([]byte, n)
			for i := range compactBody {
				compactBody[i] = byte(i % 101)
			}
			var serverNanos atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				if r.URL.Path == "/v1/scores" {
					_, _ = io.Copy(io.Discard, r.Body) // a real server reads the body too
					w.Header().Set("X-Rlscore-Policy", "EE")
					w.Header().Set("X-Rlscore-Source", "model")
					_, _ = w.Write(compactBody)
				} else {
					var req SuggestRequest
					_ = json.NewDecoder(r.Body).Decode(&req)
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write(body)
				}
				serverNanos.Add(time.Since(start).Nanoseconds())
			}))
			defer srv.Close()
			p, err := New(context.Background(), &RLScoreArgs{SuggestionURL: srv.URL + "/suggest", WireFormat: bench.wire,
				Timeout: metav1.Duration{Duration: 2 * time.Second}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			benchCycles(b, p.(*RLScore), nodeInfos(names...))
			total := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			server := float64(serverNanos.Load()) / float64(b.N)
			b.ReportMetric(server/1e6, "server-ms/op")
			b.ReportMetric((total-server)/1e6, "plugin-ms/op")
		})
	}
}

// benchCycles times b.N scheduling cycles of the plugin (PreScore, then Score for every node) for
// an EE pod, and fails when a cycle scored every node neutrally (it measured the failure path).
func benchCycles(b *testing.B, pl *RLScore, infos []fwk.NodeInfo) {
	benchPodCycles(b, pl, infos, testPod(map[string]string{AnnotationPolicy: "EE"}))
}

func benchPodCycles(b *testing.B, pl *RLScore, infos []fwk.NodeInfo, pod *v1.Pod) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		state := framework.NewCycleState()
		pl.PreScore(ctx, state, pod, infos)
		neutral := 0
		for _, ni := range infos {
			if s, _ := pl.Score(ctx, state, pod, ni); s == NeutralScore {
				neutral++
			}
		}
		if neutral == len(infos) {
			b.Fatal("every node scored neutrally: the benchmark measured the failure path")
		}
	}
	b.StopTimer()
}

// randomModel is a model of the shipped architecture with random weights: the forward pass costs
// the same whatever the values, and like the shipped networks it reads every input column (the rule
// standings included), so the benchmark pays for computing them.
func randomModel(rng *rand.Rand, hidden ...int) *Model {
	m := &Model{Policy: "EE", Version: "ee-random"}
	in := numNodeFeatures + numPodFeatures
	for _, out := range append(hidden, 1) {
		scale := 1 / math.Sqrt(float64(in))
		m.layers = append(m.layers, layer{in: in, out: out, lambda: randomWeights(rng, in*out, scale),
			gamma: randomWeights(rng, in*out, scale), delta: randomWeights(rng, in*out, scale),
			bias: make([]float64, out)})
		in = out
	}
	m.noteInputs()
	return m
}

func randomWeights(rng *rand.Rand, size int, scale float64) []float64 {
	w := make([]float64, size)
	for i := range w {
		w[i] = rng.NormFloat64() * scale
	}
	return w
}

// randomSelector is a rule selector of the shipped LB's architecture (a 64x64 trunk, a 64-wide head)
// over LB's two rules, with random weights.
func randomSelector(rng *rand.Rand) *Model {
	m := randomModel(rng, 64, 64)
	m.layers = m.layers[:2] // the trunk: the node scorer's output layer is the head's place
	names := []string{"headroom-balance", "one-step-lb"}
	m.selector = &selectorHead{names: names, rules: []rule{rules[names[0]], rules[names[1]]}, hidden: 64,
		w1: randomWeights(rng, 128*64, 1.0/8), b1: randomWeights(rng, 64, 1.0/8),
		w2: randomWeights(rng, 64*2, 1.0/8), b2: randomWeights(rng, 2, 1.0/8)}
	return m
}

// BenchmarkInProcessPreScoreScore measures one scheduling cycle of the plugin scoring in process
// (features, forward pass, scores; PreScore + Score for every node) on a random cluster, with a
// node scorer, with a rule selector (its forward pass, then the rule it picks), and with a node scorer
// that ranks inside the pod's best latency tier (an EL pod with 20/30 ms limits; EL's shipped model), and
// one that ranks the running nodes first (every other node empty).
func BenchmarkInProcessPreScoreScore(b *testing.B) {
	for _, bench := range []struct {
		nodes    int
		parallel bool
		kind     string
	}{{100, false, "scorer"}, {1000, false, "scorer"}, {1000, true, "scorer"}, {5000, false, "scorer"},
		{5000, true, "scorer"}, {100, false, "selector"}, {1000, false, "selector"}, {5000, false, "selector"},
		{1000, false, "tier-scorer"}, {5000, false, "tier-scorer"}, {1000, false, "running-scorer"}} {
		n := bench.nodes
		b.Run(fmt.Sprintf("model=%s/nodes=%d/parallel=%v", bench.kind, n, bench.parallel), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			model, policy := randomModel(rng, 64, 64), "EE"
			switch bench.kind {
			case "selector":
				model = randomSelector(rng)
			case "tier-scorer":
				model.Policy, model.candidates, policy = "EL", CandidatesBestLatencyTier, "EL"
			case "running-scorer":
				model.candidates = CandidatesRunningFirst
			}
			args := &RLScoreArgs{SuggestionURL: "http://unused:8000/suggest", InProcess: true}
			args.SetDefaults()
			pl := &RLScore{args: args, client: NewClient(args)}
			pl.local = NewLocalScorer(args, pl.client, nil)
			if bench.parallel { // as in the scheduler: its parallelizer, 16 workers
				pl.local.parallel = schedulerParallel(16).Until
			}
			st := &scoringState{fetchedAt: time.Now(), snapshotAge: 0, staleAfter: time.Hour, defaultPolicy: "EE",
				elSoft: 20, elHard: 30, index: map[string]int{}, models: map[string]*Model{policy: model}}
			infos := make([]fwk.NodeInfo, n)
			cols := &st.metrics
			for i := range infos {
				name := fmt.Sprintf("node-%05d", i)
				st.index[name] = i
				pod := requestsPod(name+"-p", int64(rng.Intn(3000)), int64(rng.Intn(4096))<<20, nil)
				info := framework.NewNodeInfo(pod)
				if bench.kind == "running-scorer" && i%2 == 1 {
					info = framework.NewNodeInfo()
				}
				info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
					v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("16Gi"),
					v1.ResourcePods: resource.MustParse("110")}}})
				infos[i] = info
				for _, col := range []*nullFloats{&cols.CPUUtilization, &cols.MemoryUtilization, &cols.DiskUtilization,
					&cols.CPUUtilizationStddev} {
					*col = append(*col, rng.Float64())
				}
				cols.LatencyMs = append(cols.LatencyMs, 1+rng.Float64()*80)
				cols.NetworkReceiveBytesPerS = append(cols.NetworkReceiveBytesPerS, rng.Float64()*1e7)
				cols.TCPEstablished = append(cols.TCPEstablished, float64(rng.Intn(500)))
				cols.RequestedAt = append(cols.RequestedAt, 0)
				cols.PowerIdleWatts = append(cols.PowerIdleWatts, 80+rng.Float64()*40)
				cols.PowerMaxWatts = append(cols.PowerMaxWatts, 250+rng.Float64()*100)
			}
			pl.local.state.Store(st)
			annotations := map[string]string{AnnotationPolicy: policy}
			if policy == "EL" {
				annotations[AnnotationLatencySoft], annotations[AnnotationLatencyHard] = "20", "30"
			}
			benchPodCycles(b, pl, infos, testPod(annotations))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "plugin-ms/op")
		})
	}
}

// BenchmarkClusterRequestedFromSnapshot measures what a model that reads recent_peak_to_come adds
// to each pod's cycle in process: the sum of every node's cpu requests in the scheduler's snapshot
// (one pod per node).
func BenchmarkClusterRequestedFromSnapshot(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			nodes, pods := make([]*v1.Node, n), make([]*v1.Pod, n)
			for i := range nodes {
				name := fmt.Sprintf("node-%05d", i)
				nodes[i] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{
					Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("8")}}}
				pods[i] = requestsPod(name+"-p", 250+int64(i%4)*250, 1<<30, nil)
				pods[i].Spec.NodeName = name
			}
			ls := NewLocalScorer(&RLScoreArgs{SuggestionURL: "http://unused:8000/suggest"}, nil,
				snapshotFramework(ctx, b, pods, nodes))
			st := &scoringState{}
			want := float64(n/4) * (250 + 500 + 750 + 1000)
			b.ResetTimer()
			for range b.N {
				if got := ls.clusterRequested(st); got != want {
					b.Fatalf("sum %v, want %v", got, want)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "us/pod")
		})
	}
}
