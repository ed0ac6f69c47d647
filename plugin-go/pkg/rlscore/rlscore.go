// Package rlscore is a score plugin that asks the rlscore suggestion server, once per pod, for a
// learned score of every feasible node. Any failure scores every node the same, so the other score
// plugins decide and the scheduler keeps scheduling.
package rlscore

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

const (
	// Name is the plugin's name in KubeSchedulerConfiguration.
	Name = "RLScore"
	// NeutralScore is given to every node when no usable suggestion exists.
	NeutralScore = fwk.MaxNodeScore / 2
	stateKey     = fwk.StateKey(Name)
	// failureWarningInterval limits the unconditional warning about failures to one a minute.
	failureWarningInterval = time.Minute
)

var (
	_ fwk.PreScorePlugin = &RLScore{}
	_ fwk.ScorePlugin    = &RLScore{}
)

// RLScore implements PreScore (one /suggest call per pod) and Score (a lookup).
type RLScore struct {
	args   *RLScoreArgs
	client *Client
	local  *LocalScorer // nil unless args.InProcess

	failuresSinceWarning atomic.Int64
	lastWarning          atomic.Int64 // unix nanoseconds
}

// suggestion is what PreScore leaves in the CycleState for Score.
type suggestion struct {
	scores map[string]int64 // nil: score every node neutrally
}

func (s *suggestion) Clone() fwk.StateData { return s }

// New is the plugin factory registered with the scheduler.
func New(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	if err := CheckFiles(args); err != nil {
		return nil, err
	}
	registerMetrics()
	pl := &RLScore{args: args, client: NewClient(args)}
	if args.InProcess {
		pl.local = NewLocalScorer(args, pl.client, handle)
		go pl.local.Run(ctx)
	}
	return pl, nil
}

// Name returns the plugin name.
func (pl *RLScore) Name() string { return Name }

// PreScore scores all feasible nodes at once: in process when configured and possible, otherwise
// in one request to the server.
func (pl *RLScore) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	logger := klog.FromContext(ctx)
	requestedPolicy := ""
	if _, annotated := pod.Annotations[AnnotationPolicy]; !annotated && pl.args.DefaultPolicy != "" {
		requestedPolicy = pl.args.DefaultPolicy
	}
	if pl.local != nil {
		start := time.Now()
		decision, why := pl.local.Score(pod, nodes, requestedPolicy)
		if why == "" {
			inProcessDuration.Observe(time.Since(start).Seconds())
			inProcessDecisions.WithLabelValues("scored").Inc()
			pl.apply(logger, state, pod, decision.scores, &SuggestResponse{Policy: decision.policy,
				ModelVersion: decision.version, Source: "model"})
			return nil
		}
		inProcessDecisions.WithLabelValues(why).Inc()
	}

	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if node := n.Node(); node != nil {
			names = append(names, node.Name)
		}
	}
	req := &SuggestRequest{Pod: PodInfoFor(pod), Nodes: names, Policy: requestedPolicy}

	ctx, cancel := context.WithTimeout(ctx, pl.args.Timeout.Duration)
	defer cancel()
	start := time.Now()
	scores, resp, err := pl.client.Suggest(ctx, req)
	suggestDuration.Observe(time.Since(start).Seconds())

	if err != nil {
		reason := ReasonInternal
		if se, ok := err.(*SuggestError); ok {
			reason = se.Reason
		}
		suggestRequests.WithLabelValues("failed").Inc()
		suggestFailures.WithLabelValues(reason).Inc()
		logger.V(4).Info("RLScore: no usable suggestion, scoring nodes neutrally",
			"pod", klog.KObj(pod), "nodes", len(names), "reason", reason, "err", err)
		pl.warnAboutFailures(logger, reason, err)
		state.Write(stateKey, &suggestion{})
		return nil
	}

	if pl.args.Shadow {
		suggestRequests.WithLabelValues("shadow").Inc()
	} else {
		suggestRequests.WithLabelValues("ok").Inc()
	}
	pl.apply(logger, state, pod, scores, resp)
	return nil
}

// apply stores the scores for Score (neutral ones in shadow mode, after logging the preference).
func (pl *RLScore) apply(logger klog.Logger, state fwk.CycleState, pod *v1.Pod, scores map[string]int64,
	resp *SuggestResponse) {
	if pl.args.Shadow {
		logger.V(2).Info("RLScore shadow: would have preferred", "pod", klog.KObj(pod), "node", bestNode(scores),
			"policy", resp.Policy, "modelVersion", resp.ModelVersion, "source", resp.Source,
			"degraded", resp.Degraded)
		state.Write(stateKey, &suggestion{})
		return
	}
	if v := logger.V(4); v.Enabled() { // finding the best node costs a pass over all nodes
		v.Info("RLScore suggestion", "pod", klog.KObj(pod), "best", bestNode(scores), "policy", resp.Policy,
			"modelVersion", resp.ModelVersion, "source", resp.Source, "degraded", resp.Degraded,
			"reasons", strings.Join(resp.Reasons, ","))
	}
	state.Write(stateKey, &suggestion{scores: scores})
}

// warnAboutFailures logs at most one warning a minute, with the count since the last one, so a
// dead server is visible at default verbosity without a line per pod.
func (pl *RLScore) warnAboutFailures(logger klog.Logger, reason string, err error) {
	count := pl.failuresSinceWarning.Add(1)
	now := time.Now().UnixNano()
	last := pl.lastWarning.Load()
	if now-last < int64(failureWarningInterval) || !pl.lastWarning.CompareAndSwap(last, now) {
		return
	}
	pl.failuresSinceWarning.Add(-count)
	logger.Info("RLScore: suggestion server unusable, pods are scored neutrally",
		"failuresSinceLastWarning", count, "lastReason", reason, "lastError", err.Error(),
		"url", pl.args.SuggestionURL)
}

// Score returns the stored suggestion for this node.
func (pl *RLScore) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return NeutralScore, nil
	}
	s, ok := data.(*suggestion)
	if !ok || s.scores == nil {
		return NeutralScore, nil
	}
	node := nodeInfo.Node()
	if node == nil {
		return NeutralScore, nil
	}
	score, ok := s.scores[node.Name]
	if !ok {
		return NeutralScore, nil
	}
	return score, nil
}

// ScoreExtensions: scores are already 0..100, no normalization needed.
func (pl *RLScore) ScoreExtensions() fwk.ScoreExtensions { return nil }

func bestNode(scores map[string]int64) string {
	best, bestScore := "", int64(-1)
	for name, s := range scores {
		if s > bestScore || (s == bestScore && name < best) {
			best, bestScore = name, s
		}
	}
	return best
}
