package rlscore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// The in-process scorer: the server's model weights and measured node state, fetched in the
// background, and the features and forward pass computed here, so a pod costs no HTTP exchange.
// Whatever it cannot do exactly as the server would (no snapshot yet, a stale one, a policy served
// by the heuristic, annotations the server would refuse) it leaves to the HTTP path.

const (
	nodeMetricsPath = "/v1/node-metrics"
	modelsPath      = "/v1/models/"
	// maxMetricsBytes bounds one /v1/node-metrics answer (about 200 bytes a node).
	maxMetricsBytes = 64 << 20
)

// scoringState is one fetch of /v1/node-metrics plus the models it names; never modified.
type scoringState struct {
	fetchedAt     time.Time
	snapshotAge   float64 // seconds, at fetch time; NaN before the server's first refresh
	staleAfter    time.Duration
	defaultPolicy string
	elSoft        float64
	elHard        float64
	index         map[string]int
	metrics       nodeMetricColumns
	// the cluster's cpu requests (millicores) as the server's watch saw them, and their recent peak;
	// NaN unknown
	clusterRequested, recentPeak float64
	models                       map[string]*Model // a policy without an entry is served by the server's heuristic
	// inRollout holds the policies with a candidate in shadow or canary: only the server compares
	// the two models and sends a canary share of pods to the candidate, so their pods go over HTTP.
	inRollout map[string]bool
}

// nodeMetricColumns is the server's per-node measured state; NaN is unknown.
type nodeMetricColumns struct {
	CPUUtilization          nullFloats `json:"cpu_utilization"`
	MemoryUtilization       nullFloats `json:"memory_utilization"`
	LatencyMs               nullFloats `json:"latency_ms"`
	NetworkReceiveBytesPerS nullFloats `json:"network_receive_bytes_per_s"`
	TCPEstablished          nullFloats `json:"tcp_established"`
	DiskUtilization         nullFloats `json:"disk_utilization"`
	RequestedAt             nullFloats `json:"requested_at"`
	PowerIdleWatts          nullFloats `json:"power_idle_watts"`
	PowerMaxWatts           nullFloats `json:"power_max_watts"`
	// absent from older servers: unknown for every node
	CPUUtilizationStddev nullFloats `json:"cpu_utilization_stddev"`
}

// nullFloats decodes a JSON list of numbers and nulls, null becoming NaN.
type nullFloats []float64

func (f *nullFloats) UnmarshalJSON(data []byte) error {
	var raw []*float64
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	out := make([]float64, len(raw))
	for i, v := range raw {
		out[i] = math.NaN()
		if v != nil {
			out[i] = *v
		}
	}
	*f = out
	return nil
}

type nodeMetricsResponse struct {
	FeatureSpecVersion int                           `json:"feature_spec_version"`
	DefaultPolicy      string                        `json:"default_policy"`
	ELDefault          *struct{ Soft, Hard float64 } `json:"el_default_latency_ms"` // null: no limit for EL pods without annotations
	StaleAfterS        float64                       `json:"stale_after_s"`
	SnapshotAgeS       *float64                      `json:"snapshot_age_s"`
	ModelVersions      map[string]*string            `json:"model_versions"`
	RolloutStages      map[string]string             `json:"rollout_stages"` // absent from older servers: none
	ClusterRequested   *float64                      `json:"cluster_cpu_requested_millicores"`
	RecentPeak         *float64                      `json:"recent_peak_cpu_requested_millicores"`
	Nodes              struct {
		Names []string `json:"names"`
		nodeMetricColumns
	} `json:"nodes"`
}

// LocalScorer scores pods in the scheduler from a background copy of the server's state.
type LocalScorer struct {
	client   *Client
	base     string // the server's root URL
	interval time.Duration
	parallel Parallel   // nil: serial
	handle   fwk.Handle // nil outside a scheduler
	state    atomic.Pointer[scoringState]
	scratch  sync.Pool
}

type localScratch struct {
	nodes    NodeState
	features Features
	forward  forwardScratch
	values   []float64
	scores   []int64
}

// NewLocalScorer does not fetch; call Run. With a handle, large node sets are scored on the
// scheduler's parallelizer.
func NewLocalScorer(args *RLScoreArgs, client *Client, handle fwk.Handle) *LocalScorer {
	u, _ := url.Parse(args.SuggestionURL) // validated
	u.Path = strings.TrimSuffix(u.Path, suggestPath)
	u.RawQuery = ""
	ls := &LocalScorer{client: client, base: u.String(), interval: args.InProcessRefreshInterval.Duration,
		handle: handle, scratch: sync.Pool{New: func() any { return &localScratch{} }}}
	if handle != nil && handle.Parallelizer() != nil {
		parallelizer := handle.Parallelizer()
		ls.parallel = func(pieces int, piece func(int)) {
			parallelizer.Until(context.Background(), pieces, piece, Name)
		}
	}
	return ls
}

// Run refreshes until ctx ends.
func (ls *LocalScorer) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName(Name)
	var lastErr string
	for {
		err := ls.Refresh(ctx)
		switch {
		case err != nil && err.Error() != lastErr:
			logger.Info("RLScore in-process scorer: refresh failed, pods go to the suggestion server until it works",
				"err", err)
			lastErr = err.Error()
		case err == nil && lastErr != "":
			logger.Info("RLScore in-process scorer: refresh works again")
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(ls.interval):
		}
	}
}

func (ls *LocalScorer) get(ctx context.Context, path string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ls.base+path, nil)
	if err != nil {
		return nil, err
	}
	if token := ls.client.bearerToken(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// not the scoring client: its timeout is the per-pod one, far too short for a large snapshot
	resp, err := ls.client.background.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("GET %s: answer over %d bytes", path, limit)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, snippet(data))
	}
	return data, nil
}

// Refresh fetches the node metrics, and the weights of every model whose version changed.
func (ls *LocalScorer) Refresh(ctx context.Context) error {
	data, err := ls.get(ctx, nodeMetricsPath, maxMetricsBytes)
	if err != nil {
		return err
	}
	var r nodeMetricsResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("GET %s: %w", nodeMetricsPath, err)
	}
	if r.FeatureSpecVersion != FeatureSpecVersion {
		return fmt.Errorf("the server serves feature spec %d, this plugin computes %d", r.FeatureSpecVersion,
			FeatureSpecVersion)
	}
	n := len(r.Nodes.Names)
	m := r.Nodes.nodeMetricColumns
	for name, col := range map[string][]float64{"cpu_utilization": m.CPUUtilization, "memory_utilization": m.MemoryUtilization,
		"latency_ms": m.LatencyMs, "network_receive_bytes_per_s": m.NetworkReceiveBytesPerS,
		"tcp_established": m.TCPEstablished, "disk_utilization": m.DiskUtilization, "requested_at": m.RequestedAt,
		"power_idle_watts": m.PowerIdleWatts, "power_max_watts": m.PowerMaxWatts} {
		if len(col) != n {
			return fmt.Errorf("GET %s: nodes.%s has %d entries for %d names", nodeMetricsPath, name, len(col), n)
		}
	}
	var elSoft, elHard float64 // 0: no limit
	if r.ELDefault != nil {
		elSoft, elHard = r.ELDefault.Soft, r.ELDefault.Hard
	}
	if !isPolicy(r.DefaultPolicy) || (r.ELDefault != nil && (!(elSoft > 0) || !(elHard >= elSoft))) ||
		!(r.StaleAfterS > 0) {
		return fmt.Errorf("GET %s: invalid settings (default_policy %q, el_default_latency_ms %v, stale_after_s %v)",
			nodeMetricsPath, r.DefaultPolicy, r.ELDefault, r.StaleAfterS)
	}
	if m.CPUUtilizationStddev == nil {
		m.CPUUtilizationStddev = make(nullFloats, n)
		for i := range m.CPUUtilizationStddev {
			m.CPUUtilizationStddev[i] = math.NaN()
		}
	} else if len(m.CPUUtilizationStddev) != n {
		return fmt.Errorf("GET %s: nodes.cpu_utilization_stddev has %d entries for %d names", nodeMetricsPath,
			len(m.CPUUtilizationStddev), n)
	}
	st := &scoringState{fetchedAt: time.Now(), snapshotAge: math.NaN(),
		staleAfter:    time.Duration(r.StaleAfterS * float64(time.Second)),
		defaultPolicy: r.DefaultPolicy, elSoft: elSoft, elHard: elHard,
		index: make(map[string]int, n), metrics: m, models: map[string]*Model{}, inRollout: map[string]bool{}}
	if r.SnapshotAgeS != nil {
		st.snapshotAge = *r.SnapshotAgeS
	}
	for _, sum := range []struct {
		name string
		in   *float64
		out  *float64
	}{{"cluster_cpu_requested_millicores", r.ClusterRequested, &st.clusterRequested},
		{"recent_peak_cpu_requested_millicores", r.RecentPeak, &st.recentPeak}} {
		*sum.out = math.NaN()
		if sum.in != nil { // JSON has no infinity: a value beyond a float's range fails to decode
			if !(*sum.in >= 0) {
				return fmt.Errorf("GET %s: %s is %v, expected a number >= 0", nodeMetricsPath, sum.name, *sum.in)
			}
			*sum.out = *sum.in
		}
	}
	for i, name := range r.Nodes.Names {
		st.index[name] = i
	}
	previous := ls.state.Load()
	var problems []string
	for _, policy := range Policies {
		if stage := r.RolloutStages[policy]; stage == "shadow" || stage == "canary" {
			st.inRollout[policy] = true
			continue
		}
		version := r.ModelVersions[policy]
		if version == nil {
			continue // the heuristic serves it: only the server runs that
		}
		if previous != nil && previous.models[policy] != nil && previous.models[policy].Version == *version {
			st.models[policy] = previous.models[policy]
			continue
		}
		model, err := ls.fetchModel(ctx, policy)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		st.models[policy] = model
		klog.FromContext(ctx).Info("RLScore in-process scorer: model loaded", "policy", policy, "version", model.Version)
	}
	ls.state.Store(st)
	inProcessRefreshed.Set(float64(st.fetchedAt.UnixNano()) / 1e9)
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

func (ls *LocalScorer) fetchModel(ctx context.Context, policy string) (*Model, error) {
	data, err := ls.get(ctx, modelsPath+policy, maxMetricsBytes)
	if err != nil {
		return nil, err
	}
	model, err := ParseModel(data)
	if err != nil {
		return nil, err
	}
	if model.Policy != policy {
		return nil, fmt.Errorf("GET %s%s: holds policy %s", modelsPath, policy, model.Policy)
	}
	return model, nil
}

// localDecision is an in-process answer.
type localDecision struct {
	scores  map[string]int64
	policy  string
	version string
}

// Score returns the scores of nodes for pod, or a reason (no_snapshot, stale, rollout, no_model,
// invalid_pod, no_nodes) why the HTTP path must answer.
func (ls *LocalScorer) Score(pod *v1.Pod, nodes []fwk.NodeInfo, requestedPolicy string) (localDecision, string) {
	st := ls.state.Load()
	if st == nil {
		return localDecision{}, "no_snapshot"
	}
	age := st.snapshotAge + time.Since(st.fetchedAt).Seconds()
	if math.IsNaN(st.snapshotAge) || age > st.staleAfter.Seconds() {
		return localDecision{}, "stale"
	}
	policy := requestedPolicy
	if policy == "" {
		policy = st.defaultPolicy
		if raw, ok := pod.Annotations[AnnotationPolicy]; ok {
			policy = strings.ToUpper(strings.TrimSpace(raw))
			if !isPolicy(policy) {
				return localDecision{}, "invalid_pod"
			}
		}
	}
	if st.inRollout[policy] {
		return localDecision{}, "rollout"
	}
	model := st.models[policy]
	if model == nil {
		return localDecision{}, "no_model"
	}
	request, ok := podRequest(pod, policy, st.elSoft, st.elHard)
	if !ok {
		return localDecision{}, "invalid_pod"
	}

	scratch := ls.scratch.Get().(*localScratch)
	defer ls.scratch.Put(scratch)
	s := &scratch.nodes
	s.Resize(len(nodes))
	names := make([]string, 0, len(nodes))
	cols := &st.metrics
	for _, info := range nodes {
		node := info.Node()
		if node == nil {
			continue
		}
		i := len(names)
		names = append(names, node.Name)
		alloc, req := info.GetAllocatable(), info.GetRequested()
		s.CPUCapacity[i], s.MemoryCapacity[i] = float64(alloc.GetMilliCPU()), float64(alloc.GetMemory())
		s.MaxPods[i] = float64(alloc.GetAllowedPodNumber())
		s.CPURequested[i], s.MemoryRequested[i] = float64(req.GetMilliCPU()), float64(req.GetMemory())
		s.Pods[i] = float64(len(info.GetPods()))
		row, known := st.index[node.Name]
		if !known {
			for _, col := range []*[]float64{&s.CPUUtilization, &s.MemoryUtilization, &s.LatencyMs,
				&s.NetworkReceiveBytesPerS, &s.TCPEstablished, &s.DiskUtilization, &s.PowerIdleWatts,
				&s.PowerMaxWatts, &s.CPURequestedSinceMetrics, &s.CPUUtilizationStddev} {
				(*col)[i] = math.NaN()
			}
			continue
		}
		s.CPUUtilization[i], s.MemoryUtilization[i] = cols.CPUUtilization[row], cols.MemoryUtilization[row]
		s.LatencyMs[i] = cols.LatencyMs[row]
		s.NetworkReceiveBytesPerS[i], s.TCPEstablished[i] = cols.NetworkReceiveBytesPerS[row], cols.TCPEstablished[row]
		s.DiskUtilization[i] = cols.DiskUtilization[row]
		s.PowerIdleWatts[i], s.PowerMaxWatts[i] = cols.PowerIdleWatts[row], cols.PowerMaxWatts[row]
		s.CPUUtilizationStddev[i] = cols.CPUUtilizationStddev[row]
		// requests bound since the metrics were read: the utilization cannot show them yet
		s.CPURequestedSinceMetrics[i] = math.Max(s.CPURequested[i]-cols.RequestedAt[row], 0)
	}
	if len(names) == 0 {
		return localDecision{}, "no_nodes"
	}
	s.Resize(len(names))
	s.ClusterCPURequested, s.RecentPeakCPURequested = math.NaN(), st.recentPeak
	if model.readsRecentPeak {
		s.ClusterCPURequested = ls.clusterRequested(st)
	}
	scratch.features.skipRules = !model.readsRules
	NodeFeatures(s, request, &scratch.features)
	scratch.values = grow(scratch.values, len(names))
	model.Values(s, request, &scratch.features, scratch.values, &scratch.forward, ls.parallel)
	if cap(scratch.scores) < len(names) {
		scratch.scores = make([]int64, len(names))
	}
	scores := scratch.scores[:len(names)]
	ToNodeScores(scratch.values, scores)
	out := make(map[string]int64, len(names))
	for i, name := range names {
		out[name] = scores[i]
	}
	return localDecision{scores: out, policy: policy, version: model.Version}, ""
}

// clusterRequested is the cpu requests of every node in the scheduler's snapshot of this cycle,
// which is newer than the server's last answer; outside a scheduler, the server's figure.
func (ls *LocalScorer) clusterRequested(st *scoringState) float64 {
	if ls.handle == nil || ls.handle.SnapshotSharedLister() == nil {
		return st.clusterRequested
	}
	infos, err := ls.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return st.clusterRequested
	}
	total := 0.0
	for _, info := range infos {
		total += float64(info.GetRequested().GetMilliCPU())
	}
	return total
}

// podRequest reads the pod as suggestion_server/pods.py does; ok=false where the server would
// answer 422 (the HTTP path then reports it as usual).
func podRequest(pod *v1.Pod, policy string, elSoft, elHard float64) (PodRequest, bool) {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	r := PodRequest{CPUMillicores: float64(requests.Cpu().MilliValue()), MemoryBytes: float64(requests.Memory().Value())}
	soft, okSoft := latencyLimit(pod.Annotations, AnnotationLatencySoft, ThesisLatencySoftAnnot)
	hard, okHard := latencyLimit(pod.Annotations, AnnotationLatencyHard, ThesisLatencyHardAnnot)
	ratio, okRatio := usageRatio(pod.Annotations)
	if !okSoft || !okHard || !okRatio || (soft > 0 && hard > 0 && soft > hard) {
		return r, false
	}
	r.CPUUsageRatio = ratio
	switch {
	case policy != "EL":
	case soft == 0 && hard == 0:
		r.LatencySoftMs, r.LatencyHardMs = elSoft, elHard
	default:
		r.LatencySoftMs, r.LatencyHardMs = soft, hard
	}
	return r, true
}

// maxUsageRatio is suggestion_server/pods.py's MAX_USAGE_RATIO.
const maxUsageRatio = 100.0

// usageRatio is the cpu-usage-ratio annotation (0 when absent); ok=false when it is not a number in
// (0, maxUsageRatio], where the server answers 422.
func usageRatio(annotations map[string]string) (float64, bool) {
	raw, found := annotations[AnnotationUsageRatio]
	if !found {
		return 0, true
	}
	value, ok := positiveNumber(strings.TrimSpace(raw))
	return value, ok && value <= maxUsageRatio
}

// positiveNumber is text as a finite number > 0 in the notation Python's float() reads too (anything
// else: the server decides).
func positiveNumber(text string) (float64, bool) {
	if !decimal.MatchString(text) {
		return 0, false
	}
	value, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(value) || math.IsInf(value, 0) || value <= 0 {
		return 0, false
	}
	return value, true
}

var decimal = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// latencyLimit is the annotation's milliseconds (0 when absent); ok=false when it is not a finite
// number > 0.
func latencyLimit(annotations map[string]string, primary, fallback string) (float64, bool) {
	raw, found := annotations[primary]
	if !found {
		raw, found = annotations[fallback]
	}
	if !found {
		return 0, true
	}
	return positiveNumber(strings.TrimSuffix(strings.TrimSpace(raw), "ms"))
}
