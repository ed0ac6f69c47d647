package rlscore

import (
	"math"
	"sort"
)

// The per-node features of rlscore/core/features.py (FEATURE_SPEC_VERSION 4), for the in-process scorer.
// This is a port, column for column, of the one function training and serving share; the parity
// test (tests/test_go_scorer_parity.py, which drives TestParityWithPython) proves both give the
// same features, Q-values and scores on random states. Change both together and bump the version.

// FeatureSpecVersion is the feature layout this build computes; a model of another version is refused.
const FeatureSpecVersion = 5

// ruleFeatures are the rules whose standing on each node is a feature column (RULE_FEATURES), in order.
var ruleFeatures = [...]string{
	"most-allocated", "least-allocated", "best-fit", "efficient-first", "one-step-ee",
	"one-step-lb", "least-utilized", "headroom-balance", "target-load-packing", "load-variation-risk-balancing",
	"latency-fit", "latency-pack", "one-step-el", "headroom-informed",
}

const (
	numStateFeatures            = 32
	numNodeFeatures             = numStateFeatures + len(ruleFeatures)
	recentPeakToComeColumn      = 31
	colActive                   = 11
	colMeetsSoft                = 19
	colMeetsHard                = 20
	numPodFeatures              = 3
	featureClip                 = 4.0
	noLimitLatencyScaleMs       = 100.0
	latencyTierNone        int8 = 0
	latencyTierHard        int8 = 1
	latencyTierSoft        int8 = 2
)

// NodeState holds the candidate nodes, one slice entry per node; NaN is unknown.
type NodeState struct {
	CPUCapacity, MemoryCapacity, MaxPods                     []float64
	CPURequested, MemoryRequested, Pods                      []float64
	CPUUtilization, MemoryUtilization, LatencyMs             []float64
	PowerIdleWatts, PowerMaxWatts                            []float64
	NetworkReceiveBytesPerS, TCPEstablished, DiskUtilization []float64
	CPURequestedSinceMetrics                                 []float64
	// CPUUtilizationStddev is the cpu utilization's standard deviation over time (read by
	// LoadVariationRiskBalancing when a gate picks it; no feature reads it).
	CPUUtilizationStddev []float64
	// ClusterCPURequested is the cluster's sum of cpu requests now (millicores, every node, not
	// only these) and RecentPeakCPURequested its largest within the server's recent-peak window;
	// NaN is unknown.
	ClusterCPURequested, RecentPeakCPURequested float64
}

// Len is the number of nodes.
func (s *NodeState) Len() int { return len(s.CPUCapacity) }

// Resize makes every column n long, reusing the backing arrays where they are large enough.
func (s *NodeState) Resize(n int) {
	for _, col := range s.columns() {
		if cap(*col) < n {
			*col = make([]float64, n)
		}
		*col = (*col)[:n]
	}
}

func (s *NodeState) columns() []*[]float64 {
	return []*[]float64{&s.CPUCapacity, &s.MemoryCapacity, &s.MaxPods, &s.CPURequested, &s.MemoryRequested,
		&s.Pods, &s.CPUUtilization, &s.MemoryUtilization, &s.LatencyMs, &s.PowerIdleWatts, &s.PowerMaxWatts,
		&s.NetworkReceiveBytesPerS, &s.TCPEstablished, &s.DiskUtilization, &s.CPURequestedSinceMetrics,
		&s.CPUUtilizationStddev}
}

// PodRequest is the pod as the scorer sees it; a latency limit of 0 means none.
type PodRequest struct {
	CPUMillicores, MemoryBytes   float64
	LatencySoftMs, LatencyHardMs float64
	CPUUsageRatio                float64 // cpu its workload uses per cpu requested; 0: unknown
}

func (p PodRequest) hasLatencyLimits() bool { return p.LatencySoftMs > 0 || p.LatencyHardMs > 0 }

// softLimit is the soft limit, or the hard one when only that is given (+Inf when neither).
func (p PodRequest) softLimit() float64 {
	switch {
	case p.LatencySoftMs > 0:
		return p.LatencySoftMs
	case p.LatencyHardMs > 0:
		return p.LatencyHardMs
	}
	return math.Inf(1)
}

func (p PodRequest) hardLimit() float64 {
	switch {
	case p.LatencyHardMs > 0:
		return p.LatencyHardMs
	case p.LatencySoftMs > 0:
		return p.LatencySoftMs
	}
	return math.Inf(1)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// share is numerator / denominator, featureClip where the denominator is not positive.
func share(num, den float64) float64 {
	if den > 0 {
		return num / den
	}
	return featureClip
}

// relativeToMax writes values / the largest known value (0 where unknown or when none is > 0).
func relativeToMax(out []float64, stride, col int, values []float64, known []bool) {
	top, any := 0.0, false
	for i, v := range values {
		if known[i] && (!any || v > top) {
			top, any = v, true
		}
	}
	for i, v := range values {
		r := 0.0
		if any && top > 0 && known[i] {
			r = v / top
		}
		out[i*stride+col] = r
	}
}

// minOver writes the lowest known positive value / values (0 where unknown).
func minOver(out []float64, stride, col int, values []float64, known []bool) {
	low, any := 0.0, false
	for i, v := range values {
		if known[i] && v > 0 && (!any || v < low) {
			low, any = v, true
		}
	}
	for i, v := range values {
		r := 0.0
		if any && known[i] && v > 0 {
			r = low / v
		}
		out[i*stride+col] = r
	}
}

// nanMax is numpy's max: NaN when any value is NaN.
func nanMax(values []float64) float64 {
	top := math.Inf(-1)
	for _, v := range values {
		if math.IsNaN(v) {
			return v
		}
		if v > top {
			top = v
		}
	}
	return top
}

// Features is the scratch space of one NodeFeatures call, reusable across calls.
type Features struct {
	Nodes   []float64 // n x numNodeFeatures, row-major
	Pod     [numPodFeatures]float64
	scratch []float64
	known   []bool
	tiers   []int8
	sorted  []float64
	// skipRules leaves the rule-standing columns at 0: for a model whose first layer reads none of
	// them (one trained on an earlier feature version), which then decides the same without them.
	skipRules bool
}

// NodeFeatures fills f with the features of placing pod on each node of s (all candidates): the
// same values as rlscore.core.features.node_features, rounded to float32 as it returns them.
func NodeFeatures(s *NodeState, pod PodRequest, f *Features) {
	n := s.Len()
	const F = numNodeFeatures
	if cap(f.Nodes) < n*F {
		f.Nodes = make([]float64, n*F)
		f.scratch = make([]float64, n)
		f.known = make([]bool, n)
		f.tiers = make([]int8, n)
		f.sorted = make([]float64, 0, n)
	}
	out := f.Nodes[:n*F]
	f.Nodes = out
	scratch, known, tiers := f.scratch[:n], f.known[:n], f.tiers[:n]

	topCPU, topMem := nanMax(s.CPUCapacity), nanMax(s.MemoryCapacity)
	if !(topCPU > 0) {
		topCPU = math.Inf(1)
	}
	if !(topMem > 0) {
		topMem = math.Inf(1)
	}
	for i := 0; i < n; i++ {
		row := out[i*F : i*F+F]
		cpuCap, memCap := s.CPUCapacity[i], s.MemoryCapacity[i]
		cpuShare := share(s.CPURequested[i], cpuCap)
		memShare := share(s.MemoryRequested[i], memCap)
		podCPU := share(pod.CPUMillicores, cpuCap)
		podMem := share(pod.MemoryBytes, memCap)
		row[0], row[1], row[2] = cpuShare, memShare, share(s.Pods[i], s.MaxPods[i])
		row[3], row[4], row[5], row[6] = cpuShare+podCPU, memShare+podMem, podCPU, podMem
		cpuUtil, memUtil := s.CPUUtilization[i], s.MemoryUtilization[i]
		utilKnown := finite(cpuUtil)
		if utilKnown {
			row[7] = cpuUtil
			since := share(s.CPURequestedSinceMetrics[i], cpuCap)
			if math.IsNaN(since) {
				since = 0
			}
			row[10] = since
		} else {
			row[7], row[10] = cpuShare, 0
		}
		if finite(memUtil) {
			row[8] = memUtil
		} else {
			row[8] = memShare
		}
		row[9] = b2f(utilKnown)
		row[colActive] = b2f(s.Pods[i] > 0)
		row[12], row[13] = cpuCap/topCPU, memCap/topMem
		row[14] = (cpuCap - s.CPURequested[i] - pod.CPUMillicores) / topCPU
		row[15] = (memCap - s.MemoryRequested[i] - pod.MemoryBytes) / topMem
		row[16] = podCPU*(1-cpuShare) + podMem*(1-memShare)
	}

	// latency
	scale := pod.hardLimit()
	if math.IsInf(scale, 1) {
		scale = noLimitLatencyScaleMs
	}
	soft, hard := pod.softLimit(), pod.hardLimit()
	limited := pod.hasLatencyLimits()
	best, anyKnown := 0.0, false
	sorted := f.sorted[:0]
	meetHard, meetSoft := 0, 0
	for i := 0; i < n; i++ {
		lat := s.LatencyMs[i]
		known[i] = finite(lat)
		tiers[i] = latencyTierNone
		if known[i] {
			if lat <= hard {
				tiers[i] = latencyTierHard
			}
			if lat <= soft {
				tiers[i] = latencyTierSoft
			}
			if !anyKnown || lat < best {
				best = lat
			}
			anyKnown = true
			sorted = append(sorted, lat)
		}
		if tiers[i] >= latencyTierHard {
			meetHard++
		}
		if tiers[i] >= latencyTierSoft {
			meetSoft++
		}
	}
	sort.Float64s(sorted)
	f.sorted = sorted
	for i := 0; i < n; i++ {
		row := out[i*F : i*F+F]
		lat := s.LatencyMs[i]
		row[17] = b2f(known[i])
		row[colMeetsSoft] = b2f(tiers[i] >= latencyTierSoft && limited)
		row[colMeetsHard] = b2f(tiers[i] >= latencyTierHard && limited)
		if known[i] {
			row[18] = lat / scale
			row[21] = (lat - best) / scale
			// searchsorted(side="left"): how many known latencies are below this one
			row[22] = float64(sort.SearchFloat64s(sorted, lat)) / float64(n)
		} else {
			row[18], row[21], row[22] = featureClip, featureClip, 1
		}
	}

	// power model
	for i := 0; i < n; i++ {
		idle, peak, cpuCap := s.PowerIdleWatts[i], s.PowerMaxWatts[i], s.CPUCapacity[i]
		known[i] = finite(idle) && finite(peak) && peak >= idle && cpuCap > 0
		out[i*F+23] = b2f(known[i])
		scratch[i] = 0
		if known[i] {
			scratch[i] = idle
		}
	}
	relativeToMax(out, F, 24, scratch, known)
	for i := 0; i < n; i++ {
		scratch[i] = 0
		if known[i] {
			scratch[i] = s.PowerMaxWatts[i] / (s.CPUCapacity[i] / 1000)
		}
	}
	minOver(out, F, 25, scratch, known)
	for i := 0; i < n; i++ {
		scratch[i] = 0
		if known[i] {
			scratch[i] = (s.PowerMaxWatts[i] - s.PowerIdleWatts[i]) / (s.CPUCapacity[i] / 1000)
		}
	}
	minOver(out, F, 26, scratch, known)

	// the thesis's further metrics
	for c, values := range [][]float64{s.NetworkReceiveBytesPerS, s.TCPEstablished} {
		for i, v := range values {
			known[i] = finite(v)
			scratch[i] = 0
			if known[i] {
				scratch[i] = v
			}
		}
		relativeToMax(out, F, 27+c, scratch, known)
	}
	for i := 0; i < n; i++ {
		disk := s.DiskUtilization[i]
		out[i*F+29] = 0
		if finite(disk) {
			out[i*F+29] = disk
		}
		out[i*F+30] = b2f(finite(s.NetworkReceiveBytesPerS[i]) && finite(s.TCPEstablished[i]) && finite(disk))
	}
	// recent_peak_to_come: the recent peak's part not bound now, at least the pod, over each node's
	// size; the candidates' requests stand in for the cluster's, summed in index order as
	// rlscore/core/features.py's cumsum does
	now := s.ClusterCPURequested
	if !finite(now) {
		now = 0
		for i := 0; i < n; i++ {
			now += s.CPURequested[i]
		}
	}
	toCome := pod.CPUMillicores
	if peak := s.RecentPeakCPURequested; finite(peak) && peak-now > toCome {
		toCome = peak - now
	}
	for i := 0; i < n; i++ {
		out[i*F+recentPeakToComeColumn] = share(toCome, s.CPUCapacity[i])
	}

	for i, v := range out {
		switch {
		case math.IsNaN(v):
			v = featureClip
		case v < 0:
			v = 0
		case v > featureClip:
			v = featureClip
		}
		out[i] = float64(float32(v))
	}
	if f.skipRules {
		for i := 0; i < n; i++ {
			clear(out[i*F+numStateFeatures : i*F+F])
		}
	} else {
		ruleStandings(s, pod, f)
	}
	if limited && n > 0 {
		f.Pod = [numPodFeatures]float64{1, float64(float32(float64(meetHard) / float64(n))),
			float64(float32(float64(meetSoft) / float64(n)))}
	} else {
		f.Pod = [numPodFeatures]float64{0, 1, 1}
	}
}

// ruleStandings fills the rule columns: per rule of ruleFeatures, 1 - the share of the other nodes
// the rule values higher by more than scoreTie (NaN counts as the lowest), as float32, as
// rlscore.core.features.standing computes it.
func ruleStandings(s *NodeState, pod PodRequest, f *Features) {
	n := s.Len()
	if n == 0 {
		return
	}
	const F = numNodeFeatures
	values, sorted := f.scratch[:n], f.sorted[:n]
	others := float64(max(n-1, 1))
	for k, name := range ruleFeatures {
		rules[name](s, pod, values)
		for i, v := range values {
			if math.IsNaN(v) {
				values[i] = math.Inf(-1)
			}
		}
		copy(sorted, values)
		sort.Float64s(sorted)
		for i, v := range values {
			higher := n - upperBound(sorted, v+scoreTie)
			f.Nodes[i*F+numStateFeatures+k] = float64(float32(1 - float64(higher)/others))
		}
	}
}

// upperBound is the number of entries of sorted (ascending) that are <= x.
func upperBound(sorted []float64, x float64) int {
	lo, hi := 0, len(sorted)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if sorted[mid] <= x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
