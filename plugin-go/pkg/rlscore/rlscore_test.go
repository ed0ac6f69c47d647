package rlscore

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

var testNodes = []string{"node-a", "node-b", "node-c"}

func nodeInfos(names ...string) []fwk.NodeInfo {
	infos := make([]fwk.NodeInfo, 0, len(names))
	for _, name := range names {
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		infos = append(infos, ni)
	}
	return infos
}

func testPod(annotations map[string]string) *v1.Pod {
	req := func(cpu, mem string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Annotations: annotations},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "init", Resources: req("100m", "16Mi")}},
			Containers: []v1.Container{
				{Name: "nginx", Resources: req("200m", "64Mi")},
				{Name: "sidecar", Resources: req("50m", "32Mi")},
			},
		},
	}
}

// runPlugin runs PreScore then Score for every node, as the framework does.
func runPlugin(t *testing.T, pl *RLScore, pod *v1.Pod, names ...string) map[string]int64 {
	t.Helper()
	state := framework.NewCycleState()
	infos := nodeInfos(names...)
	if status := pl.PreScore(context.Background(), state, pod, infos); !status.IsSuccess() {
		t.Fatalf("PreScore must never fail a pod, got %v", status)
	}
	out := map[string]int64{}
	for _, ni := range infos {
		score, status := pl.Score(context.Background(), state, pod, ni)
		if !status.IsSuccess() {
			t.Fatalf("Score must never fail, got %v", status)
		}
		out[ni.Node().Name] = score
	}
	return out
}

func newTestPlugin(t *testing.T, args RLScoreArgs) *RLScore {
	t.Helper()
	p, err := New(context.Background(), &args, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p.(*RLScore)
}

func neutral(names ...string) map[string]int64 {
	out := map[string]int64{}
	for _, n := range names {
		out[n] = NeutralScore
	}
	return out
}

// respond answers every request with the same JSON body.
func respond(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { writeJSON(w, body) }
}

func writeJSON(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, body)
}

func TestScoresAndFailures(t *testing.T) {
	ok := `{"policy":"EE","model_version":"ee-1","source":"model","degraded":false,"reasons":[],"scores":{"node-a":100,"node-b":0,"node-c":37}}`
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		args       RLScoreArgs
		closed     bool
		want       map[string]int64
		wantReason string
		wantResult string
	}{
		{name: "scores mapped to nodes", handler: respond(ok),
			want: map[string]int64{"node-a": 100, "node-b": 0, "node-c": 37}, wantResult: "ok"},
		{name: "shadow mode asks but stays neutral", handler: respond(ok),
			args: RLScoreArgs{Shadow: true}, want: neutral(testNodes...), wantResult: "shadow"},
		{name: "server error", handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) },
			want: neutral(testNodes...), wantReason: ReasonHTTPStatus},
		{name: "validation error from server", handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, `{"detail":"nodes"}`, 422) },
			want: neutral(testNodes...), wantReason: ReasonHTTPStatus},
		{name: "malformed json", handler: respond(`{"scores": {"node-a": 1`),
			want: neutral(testNodes...), wantReason: ReasonMalformed},
		{name: "no scores", handler: respond(`{"policy":"EE"}`),
			want: neutral(testNodes...), wantReason: ReasonMalformed},
		{name: "scores of the wrong type", handler: respond(`{"scores":{"node-a":"high"}}`),
			want: neutral(testNodes...), wantReason: ReasonMalformed},
		{name: "partial node list", handler: respond(`{"scores":{"node-a":1,"node-b":2}}`),
			want: neutral(testNodes...), wantReason: ReasonMissingNode},
		{name: "unknown node", handler: respond(`{"scores":{"node-a":1,"node-b":2,"node-c":3,"node-z":4}}`), want: neutral(testNodes...), wantReason: ReasonUnknownNode},
		{name: "score over 100", handler: respond(`{"scores":{"node-a":101,"node-b":2,"node-c":3}}`),
			want: neutral(testNodes...), wantReason: ReasonOutOfRange},
		{name: "negative score", handler: respond(`{"scores":{"node-a":-1,"node-b":2,"node-c":3}}`),
			want: neutral(testNodes...), wantReason: ReasonOutOfRange},
		{name: "fractional score", handler: respond(`{"scores":{"node-a":2.5,"node-b":2,"node-c":3}}`),
			want: neutral(testNodes...), wantReason: ReasonOutOfRange},
		{name: "huge body", handler: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, `{"reasons":["`+strings.Repeat("x", 8<<20)+`"]}`)
		}, want: neutral(testNodes...), wantReason: ReasonTooLarge},
		{name: "timeout", args: RLScoreArgs{Timeout: metav1.Duration{Duration: 50 * time.Millisecond}},
			handler: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-time.After(2 * time.Second):
				case <-r.Context().Done():
				}
				writeJSON(w, ok)
			}, want: neutral(testNodes...), wantReason: ReasonTimeout},
		{name: "slow loris", args: RLScoreArgs{Timeout: metav1.Duration{Duration: 100 * time.Millisecond}},
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(200)
				for _, b := range []byte(ok) {
					if _, err := w.Write([]byte{b}); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					select {
					case <-time.After(20 * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
			}, want: neutral(testNodes...), wantReason: ReasonTimeout},
		{name: "connection refused", closed: true, want: neutral(testNodes...), wantReason: ReasonUnreachable},
		// the compact format (the default): one byte per node, metadata in headers
		{name: "compact scores mapped to nodes", args: RLScoreArgs{WireFormat: WireCompact},
			handler: compact(headers("EE", "model", `[]`), []byte{100, 0, 37}),
			want:    map[string]int64{"node-a": 100, "node-b": 0, "node-c": 37}, wantResult: "ok"},
		{name: "compact too few scores", args: RLScoreArgs{WireFormat: WireCompact},
			handler: compact(headers("EE", "model", `[]`), []byte{100, 0}), want: neutral(testNodes...), wantReason: ReasonMalformed},
		{name: "compact too many scores", args: RLScoreArgs{WireFormat: WireCompact},
			handler: compact(headers("EE", "model", `[]`), []byte{1, 2, 3, 4}), want: neutral(testNodes...), wantReason: ReasonMalformed},
		{name: "compact score over 100", args: RLScoreArgs{WireFormat: WireCompact},
			handler: compact(headers("EE", "model", `[]`), []byte{1, 101, 3}), want: neutral(testNodes...), wantReason: ReasonOutOfRange},
		{name: "compact without policy header", args: RLScoreArgs{WireFormat: WireCompact},
			handler: compact(headers("", "model", `[]`), []byte{1, 2, 3}), want: neutral(testNodes...), wantReason: ReasonMalformed},
		{name: "compact with broken reasons header", args: RLScoreArgs{WireFormat: WireCompact},
			handler: compact(headers("EE", "model", `["x`), []byte{1, 2, 3}), want: neutral(testNodes...), wantReason: ReasonMalformed},
		{name: "compact server error", args: RLScoreArgs{WireFormat: WireCompact},
			handler: func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }, want: neutral(testNodes...), wantReason: ReasonHTTPStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handler := tt.handler
			if handler == nil {
				handler = func(w http.ResponseWriter, r *http.Request) {}
			}
			srv := httptest.NewServer(handler)
			defer srv.Close()
			args := tt.args
			args.SuggestionURL = srv.URL + "/suggest"
			if args.WireFormat == "" {
				args.WireFormat = WireJSON
			}
			if tt.closed {
				srv.Close()
			}
			pl := newTestPlugin(t, args)
			var failuresBefore, resultBefore float64
			if tt.wantReason != "" {
				failuresBefore, _ = testutil.GetCounterMetricValue(suggestFailures.WithLabelValues(tt.wantReason))
			}
			result := tt.wantResult
			if result == "" {
				result = "failed"
			}
			resultBefore, _ = testutil.GetCounterMetricValue(suggestRequests.WithLabelValues(result))

			done := make(chan map[string]int64, 1)
			go func() { done <- runPlugin(t, pl, testPod(nil), testNodes...) }()
			var got map[string]int64
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("PreScore hung")
			}

			for node, want := range tt.want {
				if got[node] != want {
					t.Errorf("node %s: got score %d, want %d (all: %v)", node, got[node], want, got)
				}
			}
			if tt.wantReason != "" {
				after, _ := testutil.GetCounterMetricValue(suggestFailures.WithLabelValues(tt.wantReason))
				if after != failuresBefore+1 {
					t.Errorf("failures{reason=%s}: got %v, want %v", tt.wantReason, after, failuresBefore+1)
				}
			}
			after, _ := testutil.GetCounterMetricValue(suggestRequests.WithLabelValues(result))
			if after != resultBefore+1 {
				t.Errorf("requests{result=%s}: got %v, want %v", result, after, resultBefore+1)
			}
		})
	}
}

func TestRequestBody(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var bodies []SuggestRequest
	var auth []string
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		var req SuggestRequest
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want POST json", 400)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		bodies = append(bodies, req)
		auth = append(auth, r.Header.Get("Authorization"))
		scores := map[string]int{}
		for i, n := range req.Nodes {
			scores[n] = i
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"scores": scores})
	}))
	defer srv.Close()
	pl := newTestPlugin(t, RLScoreArgs{SuggestionURL: srv.URL, DefaultPolicy: "lb", BearerTokenFile: tokenFile,
		WireFormat: WireJSON})

	annotated := testPod(map[string]string{
		"rlscore.io/policy": "EL", "rlscore.io/latency-soft-ms": "20", "latencyHardConstraint": "30",
		"kubectl.kubernetes.io/last-applied-configuration": "{...}",
	})
	got := runPlugin(t, pl, annotated, testNodes...)
	runPlugin(t, pl, testPod(nil), "node-x")

	if calls != 2 {
		t.Fatalf("want exactly one request per pod (2), got %d", calls)
	}
	if got["node-a"] != 0 || got["node-c"] != 2 {
		t.Errorf("scores not mapped by node name: %v", got)
	}
	first := bodies[0]
	want := PodInfo{Name: "web-1", Namespace: "shop", CPURequestMillicores: 250, MemoryRequestBytes: 96 << 20,
		Annotations: map[string]string{"rlscore.io/policy": "EL", "rlscore.io/latency-soft-ms": "20", "latencyHardConstraint": "30"}}
	if first.Pod.Name != want.Name || first.Pod.CPURequestMillicores != want.CPURequestMillicores ||
		first.Pod.MemoryRequestBytes != want.MemoryRequestBytes || len(first.Pod.Annotations) != 3 ||
		first.Pod.Annotations["latencyHardConstraint"] != "30" || first.Pod.Namespace != "shop" {
		t.Errorf("pod in request: got %+v, want %+v", first.Pod, want)
	}
	if strings.Join(first.Nodes, ",") != "node-a,node-b,node-c" {
		t.Errorf("nodes: %v", first.Nodes)
	}
	if first.Policy != "" {
		t.Errorf("annotated pod: policy field must be left to the annotation, got %q", first.Policy)
	}
	if bodies[1].Policy != "LB" {
		t.Errorf("pod without annotation: want defaultPolicy LB, got %q", bodies[1].Policy)
	}
	if auth[0] != "Bearer tok-123" {
		t.Errorf("Authorization: got %q", auth[0])
	}
}

func headers(policy, source, reasons string) http.Header {
	h := http.Header{}
	h.Set("X-Rlscore-Policy", policy)
	h.Set("X-Rlscore-Source", source)
	h.Set("X-Rlscore-Reasons", reasons)
	return h
}

// compact answers /v1/scores with the given headers and score bytes; anything else is a 404.
func compact(h http.Header, scores []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/scores" {
			http.NotFound(w, r)
			return
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(scores)
	}
}

func TestCompactRequestBody(t *testing.T) {
	var body []byte
	var contentType string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		contentType = r.Header.Get("Content-Type")
		compact(headers("LB", "heuristic", `["no valid LB model"]`), []byte{5, 6, 7})(w, r)
	}))
	defer srv.Close()
	pl := newTestPlugin(t, RLScoreArgs{SuggestionURL: srv.URL + "/suggest", DefaultPolicy: "lb"})
	got := runPlugin(t, pl, testPod(map[string]string{"rlscore.io/latency-soft-ms": "20"}), testNodes...)
	if got["node-a"] != 5 || got["node-c"] != 7 {
		t.Errorf("scores not mapped in request order: %v", got)
	}
	head, names, found := strings.Cut(string(body), "\n")
	if !found || names != "node-a\nnode-b\nnode-c" {
		t.Fatalf("want a header line then one name per line, got %q", body)
	}
	var header struct {
		Pod    PodInfo `json:"pod"`
		Policy string  `json:"policy"`
	}
	if err := json.Unmarshal([]byte(head), &header); err != nil {
		t.Fatalf("header line is not JSON: %v (%q)", err, head)
	}
	if header.Policy != "LB" || header.Pod.Name != "web-1" || header.Pod.CPURequestMillicores != 250 ||
		header.Pod.Annotations["rlscore.io/latency-soft-ms"] != "20" {
		t.Errorf("header: %+v", header)
	}
	if contentType != "application/x-rlscore-names" {
		t.Errorf("Content-Type: %q", contentType)
	}
}

func TestScoreWithoutPreScoreIsNeutral(t *testing.T) {
	pl := newTestPlugin(t, RLScoreArgs{SuggestionURL: "http://127.0.0.1:1/suggest"})
	score, status := pl.Score(context.Background(), framework.NewCycleState(), testPod(nil), nodeInfos("n")[0])
	if !status.IsSuccess() || score != NeutralScore {
		t.Fatalf("got %d %v", score, status)
	}
}
