package rlscore

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const metricsSubsystem = "rlscore"

var (
	suggestRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "suggest_requests_total",
		Help:           "POST /suggest calls by result: ok, failed (neutral scores used) or shadow (ok, not applied).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	suggestFailures = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "suggest_failures_total",
		Help:           "Suggestions that could not be used, by reason; the pod was scored neutrally.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	suggestDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      metricsSubsystem,
		Name:           "suggest_duration_seconds",
		Help:           "Duration of POST /suggest calls, successful or not.",
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		StabilityLevel: metrics.ALPHA,
	})
	inProcessDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: metricsSubsystem,
		Name:      "in_process_decisions_total",
		Help: "Pods the in-process scorer saw, by result: scored, or why it left them to the server " +
			"(no_snapshot, stale, rollout, no_model, invalid_pod, no_nodes).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	inProcessDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      metricsSubsystem,
		Name:           "in_process_score_duration_seconds",
		Help:           "Time the in-process scorer took for one pod (features, forward pass, scores).",
		Buckets:        []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05},
		StabilityLevel: metrics.ALPHA,
	})
	inProcessRefreshed = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      metricsSubsystem,
		Name:           "in_process_last_refresh_timestamp_seconds",
		Help:           "When the in-process scorer last stored a fresh copy of the server's node state (unix time).",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(suggestRequests, suggestFailures, suggestDuration, inProcessDecisions,
			inProcessDuration, inProcessRefreshed)
	})
}
