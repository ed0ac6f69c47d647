package rlscore

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// exportModel writes m in the server's /v1/models format.
func exportModel(m *Model) []byte {
	e := exportedModel{Format: WeightsFormat, FeatureSpecVersion: FeatureSpecVersion, Policy: m.Policy,
		Version: m.Version, NodeFeatures: numNodeFeatures, PodFeatures: numPodFeatures}
	for _, l := range m.layers {
		rows := func(flat []float64) [][]float64 {
			out := make([][]float64, l.in)
			for k := range out {
				out[k] = flat[k*l.out : (k+1)*l.out]
			}
			return out
		}
		e.Layers = append(e.Layers, exportedLayer{Lambda: rows(l.lambda), Bias: l.bias, Gamma: rows(l.gamma),
			Delta: rows(l.delta)})
	}
	data, _ := json.Marshal(e)
	return data
}

func TestParseModelRefusesWhatItCannotServe(t *testing.T) {
	good := exportModel(randomModel(rand.New(rand.NewSource(1)), 8, 8))
	if _, err := ParseModel(good); err != nil {
		t.Fatalf("a valid export: %v", err)
	}
	edit := func(f func(e map[string]any)) []byte {
		var e map[string]any
		_ = json.Unmarshal(good, &e)
		f(e)
		data, _ := json.Marshal(e)
		return data
	}
	layer := func(e map[string]any, k int) map[string]any { return e["layers"].([]any)[k].(map[string]any) }
	tests := []struct {
		name, want string
		data       []byte
	}{
		{"not json", "model weights", []byte("{")},
		{"torch file", "format is", edit(func(e map[string]any) { e["format"] = "rlscore-deepsets-scorer" })},
		{"other feature spec", "feature spec 1", edit(func(e map[string]any) { e["feature_spec_version"] = 1 })},
		{"other feature count", "expects 30+3", edit(func(e map[string]any) { e["node_features"] = 30 })},
		{"unknown policy", `unknown policy "XX"`, edit(func(e map[string]any) { e["policy"] = "XX" })},
		{"one layer", "1 layers", edit(func(e map[string]any) { e["layers"] = e["layers"].([]any)[:1] })},
		{"short lambda", fmt.Sprintf("layer 0 lambda: %d rows, expected %d", numNodeFeatures+numPodFeatures-1, numNodeFeatures+numPodFeatures), edit(func(e map[string]any) {
			layer(e, 0)["lambda"] = layer(e, 0)["lambda"].([]any)[1:]
		})},
		{"ragged gamma", "layer 1 gamma: a row of 7", edit(func(e map[string]any) {
			row := layer(e, 1)["gamma"].([]any)[0].([]any)
			layer(e, 1)["gamma"].([]any)[0] = row[1:]
		})},
		{"two outputs", "layer 2 has 2 outputs", edit(func(e map[string]any) {
			layer(e, 2)["bias"] = []any{0.0, 0.0}
		})},
		{"unknown candidates", `candidates is "best-tier"`, edit(func(e map[string]any) { e["candidates"] = "best-tier" })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseModel(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want an error containing %q, got %v", tt.want, err)
			}
		})
	}
}

// fakeServer answers /v1/node-metrics and /v1/models/EE like the suggestion server (the real one
// is tested against in parity_test.go); metrics is the node-metrics body.
func fakeServer(t *testing.T, metrics func() string, model []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case nodeMetricsPath:
			_, _ = w.Write([]byte(metrics()))
		case modelsPath + "EE":
			_, _ = w.Write(model)
		default:
			http.Error(w, `{"detail":"no model"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

var metricsBody = `{"feature_spec_version": ` + fmt.Sprint(FeatureSpecVersion) + `, "default_policy": "EE", "el_default_latency_ms": {"soft": 20, "hard": 30},
 "stale_after_s": 30, "snapshot_age_s": %AGE%, "model_versions": {"EE": "ee-random", "LB": null, "EL": null},
 "nodes": {"names": ["a", "b"], "cpu_utilization": [0.5, null], "memory_utilization": [0.1, 0.2],
  "latency_ms": [5, 50], "network_receive_bytes_per_s": [1, 2], "tcp_established": [3, 4],
  "disk_utilization": [0.3, 0.4], "requested_at": [0, 0], "power_idle_watts": [null, 100],
  "power_max_watts": [null, 300]}}`

func TestLocalScorerScoresOrSaysWhyNot(t *testing.T) {
	age := "1.5"
	model := exportModel(randomModel(rand.New(rand.NewSource(2)), 16, 16))
	srv := fakeServer(t, func() string { return strings.Replace(metricsBody, "%AGE%", age, 1) }, model)
	args := &RLScoreArgs{SuggestionURL: srv.URL + "/suggest", InProcess: true}
	args.SetDefaults()
	ls := NewLocalScorer(args, NewClient(args), nil)
	nodes := nodeInfos("a", "b", "unknown")
	if _, why := ls.Score(testPod(nil), nodes, ""); why != "no_snapshot" {
		t.Fatalf("before the first refresh: %q", why)
	}
	if err := ls.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		annotations map[string]string
		requested   string
		want        string
	}{
		{"server default policy", nil, "", ""},
		{"annotated, any case", map[string]string{AnnotationPolicy: " ee "}, "", ""},
		{"requested by the args", nil, "EE", ""},
		{"heuristic-served policy", map[string]string{AnnotationPolicy: "LB"}, "", "no_model"},
		{"unknown policy", map[string]string{AnnotationPolicy: "fast"}, "", "invalid_pod"},
		{"latency not a number", map[string]string{AnnotationLatencySoft: "soon"}, "", "invalid_pod"},
		{"hex latency (Python's float refuses it)", map[string]string{AnnotationLatencyHard: "0x10"}, "", "invalid_pod"},
		{"soft above hard", map[string]string{ThesisLatencySoftAnnot: "40", ThesisLatencyHardAnnot: "30"}, "", "invalid_pod"},
		{"latency with ms suffix", map[string]string{AnnotationLatencySoft: " 20ms"}, "", ""},
		{"usage ratio", map[string]string{AnnotationUsageRatio: " 2.5 "}, "", ""},
		{"usage ratio not a number", map[string]string{AnnotationUsageRatio: "lots"}, "", "invalid_pod"},
		{"usage ratio zero", map[string]string{AnnotationUsageRatio: "0"}, "", "invalid_pod"},
		{"usage ratio above the bound", map[string]string{AnnotationUsageRatio: "101"}, "", "invalid_pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, why := ls.Score(testPod(tt.annotations), nodes, tt.requested)
			if why != tt.want {
				t.Fatalf("got %q, want %q", why, tt.want)
			}
			if why == "" && (len(d.scores) != 3 || d.policy != "EE" || d.version != "ee-random") {
				t.Fatalf("decision %+v", d)
			}
		})
	}
	if _, why := ls.Score(testPod(nil), []fwk.NodeInfo{}, ""); why != "no_nodes" {
		t.Fatalf("no nodes: %q", why)
	}
	age = "29.9" // the server's snapshot is about to go stale; the copy's own age tips it over
	if err := ls.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if _, why := ls.Score(testPod(nil), nodes, ""); why != "stale" {
		t.Fatalf("stale snapshot: %q", why)
	}
	age = "null"
	_ = ls.Refresh(context.Background())
	if _, why := ls.Score(testPod(nil), nodes, ""); why != "stale" {
		t.Fatalf("a server that never refreshed: %q", why)
	}
}

func TestPodRequestReadsTheUsageRatio(t *testing.T) {
	for _, tt := range []struct {
		annotations map[string]string
		want        float64
	}{{nil, 0}, {map[string]string{AnnotationUsageRatio: "0.3"}, 0.3}, {map[string]string{AnnotationUsageRatio: "100"}, 100}} {
		r, ok := podRequest(testPod(tt.annotations), "LB", 0, 0)
		if !ok || r.CPUUsageRatio != tt.want {
			t.Fatalf("%v: ratio %v ok %v, want %v", tt.annotations, r.CPUUsageRatio, ok, tt.want)
		}
	}
}

func TestLocalScorerLeavesAPolicyInRolloutToTheServer(t *testing.T) {
	model := exportModel(randomModel(rand.New(rand.NewSource(4)), 8, 8))
	stages := `"rollout_stages": {"EE": "none", "LB": "none", "EL": "none"}, `
	body := func() string {
		return strings.Replace(strings.Replace(metricsBody, "%AGE%", "1", 1), `"model_versions"`, stages+`"model_versions"`, 1)
	}
	srv := fakeServer(t, body, model)
	args := &RLScoreArgs{SuggestionURL: srv.URL + "/suggest", InProcess: true}
	args.SetDefaults()
	ls := NewLocalScorer(args, NewClient(args), nil)
	nodes := nodeInfos("a", "b")
	for _, tt := range []struct{ stage, want string }{
		{"none", ""}, {"shadow", "rollout"}, {"canary", "rollout"}, {"none", ""}, // promoted or rolled back
	} {
		stages = `"rollout_stages": {"EE": "` + tt.stage + `", "LB": "none", "EL": "none"}, `
		if err := ls.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, why := ls.Score(testPod(nil), nodes, ""); why != tt.want {
			t.Fatalf("stage %s: got %q, want %q", tt.stage, why, tt.want)
		}
	}
}

func TestLocalScorerRefreshRefusesBadAnswers(t *testing.T) {
	model := exportModel(randomModel(rand.New(rand.NewSource(3)), 4, 4))
	tests := []struct{ name, body, want string }{
		{"not json", "{", "node-metrics"},
		{"other feature spec", `{"feature_spec_version": 3}`, fmt.Sprintf("the server serves feature spec 3, this plugin computes %d", FeatureSpecVersion)},
		{"column too short", strings.Replace(strings.Replace(metricsBody, "%AGE%", "1", 1), `"tcp_established": [3, 4]`,
			`"tcp_established": [3]`, 1), "nodes.tcp_established has 1 entries for 2 names"},
		{"bad settings", strings.Replace(strings.Replace(metricsBody, "%AGE%", "1", 1), `"stale_after_s": 30`,
			`"stale_after_s": -1`, 1), "invalid settings"},
		{"negative recent peak", strings.Replace(strings.Replace(metricsBody, "%AGE%", "1", 1), `"stale_after_s": 30`,
			`"stale_after_s": 30, "recent_peak_cpu_requested_millicores": -5`, 1),
			"recent_peak_cpu_requested_millicores is -5"},
		{"negative cluster requests", strings.Replace(strings.Replace(metricsBody, "%AGE%", "1", 1), `"stale_after_s": 30`,
			`"stale_after_s": 30, "cluster_cpu_requested_millicores": -1`, 1), "cluster_cpu_requested_millicores is -1"},
		{"cluster requests beyond a float", strings.Replace(strings.Replace(metricsBody, "%AGE%", "1", 1),
			`"stale_after_s": 30`, `"stale_after_s": 30, "cluster_cpu_requested_millicores": 1e999`, 1), "node-metrics"},
		{"broken model", strings.Replace(strings.Replace(metricsBody, "%AGE%", "1", 1), `"LB": null`, `"LB": "lb-x"`, 1),
			"HTTP 404"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeServer(t, func() string { return tt.body }, model)
			args := &RLScoreArgs{SuggestionURL: srv.URL + "/suggest", InProcess: true}
			args.SetDefaults()
			ls := NewLocalScorer(args, NewClient(args), nil)
			err := ls.Refresh(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want an error containing %q, got %v", tt.want, err)
			}
		})
	}
}

// The cluster's cpu requests for recent_peak_to_come come from the scheduler's snapshot of this
// cycle, every node's (not only the feasible ones handed to Score), and from the server's last
// answer only outside a scheduler.
func TestLocalScorerTakesTheClustersRequestsFromTheSchedulersSnapshot(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cpu := func(milli int64) v1.ResourceList {
		return v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(milli, resource.DecimalSI)}
	}
	var nodes []*v1.Node
	var pods []*v1.Pod
	for i, used := range []int64{3000, 0, 1250} {
		name := fmt.Sprintf("n%d", i)
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: v1.NodeStatus{Allocatable: cpu(8000), Capacity: cpu(8000)}})
		if used > 0 {
			pods = append(pods, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + name, Namespace: "default",
				UID: types.UID("p-" + name)}, Spec: v1.PodSpec{NodeName: name,
				Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: cpu(used)}}}}})
		}
	}
	f := snapshotFramework(ctx, t, pods, nodes)
	args := &RLScoreArgs{SuggestionURL: "http://127.0.0.1:1/suggest"}
	st := &scoringState{clusterRequested: 99}
	if got := NewLocalScorer(args, nil, f).clusterRequested(st); got != 4250 {
		t.Errorf("in a scheduler: %v millicores, want the snapshot's 4250", got)
	}
	if got := NewLocalScorer(args, nil, nil).clusterRequested(st); got != 99 {
		t.Errorf("outside a scheduler: %v millicores, want the server's 99", got)
	}
}

// snapshotFramework is a scheduler framework whose snapshot of the cycle holds these pods and nodes.
func snapshotFramework(ctx context.Context, t testing.TB, pods []*v1.Pod, nodes []*v1.Node) fwk.Handle {
	client := fake.NewClientset()
	f, err := frameworkruntime.NewFramework(ctx, frameworkruntime.Registry{}, &schedulerapi.KubeSchedulerProfile{
		SchedulerName: "test"}, frameworkruntime.WithSnapshotSharedLister(internalcache.NewSnapshot(pods, nodes)),
		frameworkruntime.WithClientSet(client), frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Only a model that reads recent_peak_to_come makes the in-process scorer sum the whole snapshot
// per pod; a version-2 model (served with zero weight on the column) does not need it.
func TestParseModelKnowsWhetherTheModelReadsTheRecentPeak(t *testing.T) {
	reads := randomModel(rand.New(rand.NewSource(5)), 4, 4)
	blind := randomModel(rand.New(rand.NewSource(5)), 4, 4)
	first := blind.layers[0]
	for _, w := range [][]float64{first.lambda, first.gamma, first.delta} {
		clear(w[recentPeakToComeColumn*first.out : (recentPeakToComeColumn+1)*first.out])
	}
	for _, c := range []struct {
		name  string
		model *Model
		want  bool
	}{{"reads it", reads, true}, {"zero weight on it", blind, false}} {
		m, err := ParseModel(exportModel(c.model))
		if err != nil {
			t.Fatal(err)
		}
		if m.readsRecentPeak != c.want {
			t.Errorf("%s: readsRecentPeak %v, want %v", c.name, m.readsRecentPeak, c.want)
		}
	}
}
