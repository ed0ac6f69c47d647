package rlscore

import (
	"math"
)

// The hand-written scorers of rlscore/core/rules.py (and the one-step costs of agent/sim/outcomes.py
// they use), for a rule selector served in process: the selector picks one, and its values are the answer.
// Each is a port, operation for operation, so the values equal Python's (the parity test,
// tests/test_go_scorer_parity.py, compares every rule on random states). Every rule writes one
// value per node of s into out (len(out) == s.Len()); higher is better; NaN is what numpy gives.

const (
	maxNodeScore          = 100.0
	defaultMilliCPU       = 100.0
	defaultMemoryBytes    = 200.0 * 1024 * 1024
	targetUtilization     = 40.0
	requestsMultiplier    = 1.5
	hotUtilization        = 0.85
	lbHotWeight           = 10.0
	elHardWeight          = 10.0
	elSoftWeight          = 3.0
	elEnergyWeight        = 0.1
	unknownIdleWPerCore   = 110.0 / 16
	unknownMaxWPerCore    = 380.0 / 16
	latencyFitTierGap     = 1e6 // more than anything latency-fit(-running) adds inside a tier
	latencyFitFarMs       = 1e5
	runningBonus          = 2e5
	latencyEdgeMs         = 1.0
	edgeOffset            = 4e5
	unknownLatencyPenalty = -1e9
	headroomBurst         = 3.0
	headroomLimit         = 0.8
	headroomOffset        = 1000.0
	usageMargin           = 1.5
)

// rule is one hand-written scorer.
type rule func(s *NodeState, pod PodRequest, out []float64)

// rules are the scorers a rule selector may name (agent.learn.model_io.servable_heuristics).
var rules = map[string]rule{
	"default-scheduler":             defaultScheduler,
	"least-allocated":               leastAllocated,
	"most-allocated":                mostAllocated,
	"balanced-allocation":           balancedAllocation,
	"latency-greedy":                latencyGreedy,
	"latency-pack":                  latencyPack,
	"latency-fit":                   latencyFit,
	"latency-fit-running":           latencyFitRunning,
	"least-utilized":                leastUtilized,
	"target-load-packing":           targetLoadPacking,
	"load-variation-risk-balancing": loadVariationRiskBalancing,
	"best-fit":                      bestFit,
	"tetris":                        tetris,
	"efficient-first":               efficientFirst,
	"one-step-ee":                   oneStep("EE"),
	"one-step-lb":                   oneStep("LB"),
	"one-step-el":                   oneStep("EL"),
	"headroom-balance":              headroomBalance,
	"headroom-informed":             headroomInformed,
}

// nanToNum is numpy's nan_to_num: NaN becomes nan, the infinities the largest finite floats.
func nanToNum(v, nan float64) float64 {
	switch {
	case math.IsNaN(v):
		return nan
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	}
	return v
}

// clip01 is np.clip(v, 0, 1), NaN staying NaN.
func clip01(v float64) float64 { return math.Min(math.Max(v, 0), 1) }

// requestedAfter is the node's requests with the pod's (kube-scheduler's non-zero defaults for a
// pod without requests).
func requestedAfter(s *NodeState, pod PodRequest, i int) (cpu, mem float64) {
	podCPU, podMem := pod.CPUMillicores, pod.MemoryBytes
	if podCPU == 0 {
		podCPU = defaultMilliCPU
	}
	if podMem == 0 {
		podMem = defaultMemoryBytes
	}
	return s.CPURequested[i] + podCPU, s.MemoryRequested[i] + podMem
}

// perResource is one resource's NodeResourcesFit score: the used (most) or free share, x100, floored.
func perResource(requested, capacity float64, most bool) float64 {
	if !(capacity > 0) {
		return 0
	}
	req := math.Min(requested, capacity)
	used := capacity - req
	if most {
		used = req
	}
	return math.Floor(used * maxNodeScore / capacity)
}

func allocated(s *NodeState, pod PodRequest, out []float64, most bool) {
	for i := range out {
		cpu, mem := requestedAfter(s, pod, i)
		total := perResource(cpu, s.CPUCapacity[i], most) + perResource(mem, s.MemoryCapacity[i], most)
		out[i] = math.Floor(total / 2)
	}
}

func leastAllocated(s *NodeState, pod PodRequest, out []float64) { allocated(s, pod, out, false) }

func mostAllocated(s *NodeState, pod PodRequest, out []float64) { allocated(s, pod, out, true) }

func balancedAllocation(s *NodeState, pod PodRequest, out []float64) {
	for i := range out {
		cpu, mem := requestedAfter(s, pod, i)
		std := math.Abs(math.Min(cpu/s.CPUCapacity[i], 1)-math.Min(mem/s.MemoryCapacity[i], 1)) / 2
		out[i] = math.Floor((1 - nanToNum(std, 1)) * maxNodeScore)
	}
}

func defaultScheduler(s *NodeState, pod PodRequest, out []float64) {
	leastAllocated(s, pod, out)
	for i := range out {
		cpu, mem := requestedAfter(s, pod, i)
		std := math.Abs(math.Min(cpu/s.CPUCapacity[i], 1)-math.Min(mem/s.MemoryCapacity[i], 1)) / 2
		out[i] += math.Floor((1 - nanToNum(std, 1)) * maxNodeScore)
	}
}

// latencyTier is rlscore.core.features.latency_tiers for one node.
func latencyTier(latency float64, pod PodRequest) float64 {
	tier := latencyTierNone
	if finite(latency) {
		if latency <= pod.hardLimit() {
			tier = latencyTierHard
		}
		if latency <= pod.softLimit() {
			tier = latencyTierSoft
		}
	}
	return float64(tier)
}

func latencyGreedy(s *NodeState, pod PodRequest, out []float64) {
	for i, lat := range s.LatencyMs {
		out[i] = unknownLatencyPenalty
		if finite(lat) {
			out[i] = -lat
		}
	}
}

func latencyPack(s *NodeState, pod PodRequest, out []float64) {
	mostAllocated(s, pod, out)
	for i, lat := range s.LatencyMs {
		out[i] = latencyTier(lat, pod)*1000 + out[i]
	}
}

func latencyFit(s *NodeState, pod PodRequest, out []float64) {
	for i, lat := range s.LatencyMs {
		out[i] = latencyTier(lat, pod)*latencyFitTierGap + latencyFitFar(lat)
	}
}

// latencyFitFar is latency-fit's order inside a tier: the farthest first, unknown latency last.
func latencyFitFar(lat float64) float64 {
	if !finite(lat) {
		return -1.0
	}
	return math.Min(lat, latencyFitFarMs)
}

// latencyFitRunning is latency-fit with the running nodes of the pod's best tier first (runningBonus
// lifts them over the tier's empty nodes and keeps them below the next tier). A node within
// latencyEdgeMs of its tier's limit comes last in the tier, nearest first: the probe's latency is
// seconds old, and latency drifts over the limit.
func latencyFitRunning(s *NodeState, pod PodRequest, out []float64) {
	soft, hard := pod.softLimit(), pod.hardLimit()
	for i, lat := range s.LatencyMs {
		tier := latencyTier(lat, pod)
		limit := hard
		if tier == float64(latencyTierSoft) {
			limit = soft
		}
		far := latencyFitFar(lat)
		if tier > float64(latencyTierNone) && lat > limit-latencyEdgeMs {
			far = -edgeOffset - math.Min(lat, latencyFitFarMs)
		}
		out[i] = tier*latencyFitTierGap + far
		if s.Pods[i] > 0 {
			out[i] += runningBonus
		}
	}
}

// measuredCPU is heuristics._measured_cpu: measured utilization plus the requests bound since the
// measurement (x recentUsage), the request share where no utilization is known.
func measuredCPU(s *NodeState, i int, recentUsage float64) float64 {
	capacity := s.CPUCapacity[i]
	if util := s.CPUUtilization[i]; finite(util) {
		return util + recentUsage*nanToNum(s.CPURequestedSinceMetrics[i]/capacity, 0)
	}
	return nanToNum(s.CPURequested[i]/capacity, 1)
}

func leastUtilized(s *NodeState, pod PodRequest, out []float64) {
	for i := range out {
		out[i] = -measuredCPU(s, i, 1)
	}
}

func targetLoadPacking(s *NodeState, pod PodRequest, out []float64) {
	for i := range out {
		out[i] = targetLoadPackingAt(s, pod, i)
	}
}

// targetLoadPackingAt is TargetLoadPacking's value for node i.
func targetLoadPackingAt(s *NodeState, pod PodRequest, i int) float64 {
	predicted := 100.0 * (measuredCPU(s, i, requestsMultiplier) + pod.CPUMillicores*requestsMultiplier/s.CPUCapacity[i])
	switch {
	case predicted > 100:
		return 0
	case predicted > targetUtilization:
		return math.RoundToEven(targetUtilization * (100.0 - predicted) / (100.0 - targetUtilization))
	default:
		return math.RoundToEven((100.0-targetUtilization)*predicted/targetUtilization + targetUtilization)
	}
}

func loadVariationRiskBalancing(s *NodeState, pod PodRequest, out []float64) {
	for i := range out {
		cpuMean := measuredCPU(s, i, 1) + pod.CPUMillicores/s.CPUCapacity[i]
		memMean := nanToNum(s.MemoryRequested[i]/s.MemoryCapacity[i], 1)
		if util := s.MemoryUtilization[i]; finite(util) {
			memMean = util
		}
		memMean += pod.MemoryBytes / s.MemoryCapacity[i]
		std := nanToNum(s.CPUUtilizationStddev[i], 0)
		cpuRisk, memRisk := clip01((cpuMean+std)/2), clip01(memMean/2)
		out[i] = math.Floor(maxNodeScore * (1 - math.Max(cpuRisk, memRisk)))
	}
}

// scaleOf is Python's max(float(values.max()), 1.0): NaN when a value is NaN.
func scaleOf(values []float64) float64 {
	top := nanMax(values)
	if 1.0 > top {
		return 1.0
	}
	return top
}

func bestFit(s *NodeState, pod PodRequest, out []float64) {
	cpuScale, memScale := scaleOf(s.CPUCapacity), scaleOf(s.MemoryCapacity)
	for i := range out {
		freeCPU := (s.CPUCapacity[i] - s.CPURequested[i] - pod.CPUMillicores) / cpuScale
		freeMem := (s.MemoryCapacity[i] - s.MemoryRequested[i] - pod.MemoryBytes) / memScale
		out[i] = -(freeCPU + freeMem)
	}
}

func tetris(s *NodeState, pod PodRequest, out []float64) {
	for i := range out {
		freeCPU := 1.0 - s.CPURequested[i]/s.CPUCapacity[i]
		freeMem := 1.0 - s.MemoryRequested[i]/s.MemoryCapacity[i]
		out[i] = nanToNum(pod.CPUMillicores/s.CPUCapacity[i]*freeCPU+pod.MemoryBytes/s.MemoryCapacity[i]*freeMem, -1)
	}
}

func efficientFirst(s *NodeState, pod PodRequest, out []float64) {
	mostAllocated(s, pod, out)
	wattsPerCore := func(i int) float64 {
		cores := math.Inf(1)
		if s.CPUCapacity[i] > 0 {
			cores = s.CPUCapacity[i]
		}
		return s.PowerMaxWatts[i] / (cores / 1000.0)
	}
	anyKnown := false
	for i := range out {
		if finite(wattsPerCore(i)) {
			anyKnown = true
			break
		}
	}
	for i := range out {
		rank := 0.0
		if anyKnown {
			rank = -1e6
			if w := wattsPerCore(i); finite(w) {
				rank = -(math.RoundToEven(w*1000.0) / 1000.0)
			}
		}
		out[i] = rank*1000.0 + out[i]
	}
}

// oneStep is the policy's objective charged for each placement alone (outcomes.placement_costs),
// negated: lowest cost wins.
func oneStep(policy string) rule {
	return func(s *NodeState, pod PodRequest, out []float64) {
		placementCosts(policy, s, pod, out)
		for i := range out {
			out[i] = -out[i]
		}
	}
}

// placementCosts is agent.sim.outcomes.placement_costs.
func placementCosts(policy string, s *NodeState, pod PodRequest, out []float64) {
	n := len(out)
	used := func(i int, capacity float64) float64 {
		if util := s.CPUUtilization[i]; finite(util) {
			return util
		}
		return s.CPURequested[i] / capacity
	}
	if policy == "LB" {
		// the CV of the request shares after placing on each node, from their sum and sum of squares
		total, squares := 0.0, 0.0
		for i := 0; i < n; i++ {
			before := s.CPURequested[i] / math.Max(s.CPUCapacity[i], 1e-9)
			total += before
			squares += before * before
		}
		cvBefore := 0.0
		if mean := total / float64(n); !(total <= 0) && mean != 0 { // as objectives.cv: NaN goes on
			cvBefore = math.Sqrt(math.Max(squares/float64(n)-mean*mean, 0)) / mean
		}
		for i := 0; i < n; i++ {
			capacity := math.Max(s.CPUCapacity[i], 1e-9)
			before, podShare := s.CPURequested[i]/capacity, pod.CPUMillicores/capacity
			mean := (total + podShare) / float64(n)
			spread := math.Sqrt(math.Max((squares+2.0*before*podShare+podShare*podShare)/float64(n)-mean*mean, 0))
			afterCV := 0.0
			if mean > 0 {
				afterCV = spread / mean
			}
			out[i] = lbHotWeight*b2f(used(i, capacity)+podShare > hotUtilization)/float64(n) + afterCV - cvBefore
		}
		return
	}
	idle := func(i int) float64 {
		if w := s.PowerIdleWatts[i]; finite(w) {
			return w
		}
		return unknownIdleWPerCore * (s.CPUCapacity[i] / 1000.0)
	}
	peak := func(i int) float64 {
		if w := s.PowerMaxWatts[i]; finite(w) {
			return w
		}
		return unknownMaxWPerCore * (s.CPUCapacity[i] / 1000.0)
	}
	peakMean := 0.0
	for i := 0; i < n; i++ {
		peakMean += peak(i)
	}
	peakMean = math.Max(peakMean/float64(n), 1e-9)
	limited := pod.hasLatencyLimits()
	for i := 0; i < n; i++ {
		capacity := math.Max(s.CPUCapacity[i], 1e-9)
		podShare := pod.CPUMillicores / capacity
		switchOn := 0.0
		if s.Pods[i] == 0 {
			switchOn = idle(i)
		}
		energy := (switchOn + (peak(i)-idle(i))*math.Max(0, math.Min(podShare, 1.0-used(i, capacity)))) / peakMean
		if policy == "EE" {
			out[i] = energy
			continue
		}
		violations := 0.0
		if lat := s.LatencyMs[i]; limited && finite(lat) {
			violations = elHardWeight*b2f(lat > pod.hardLimit()) + elSoftWeight*b2f(lat > pod.softLimit())
		}
		out[i] = violations + elEnergyWeight*energy
	}
}

// headroomBalance is heuristics.headroom_balance: LB's one-step rule on the nodes with room for the pod
// to use headroomBurst x its request on measured load, TargetLoadPacking's order below them.
func headroomBalance(s *NodeState, pod PodRequest, out []float64) {
	headroomValues(s, pod, out, headroomBurst)
}

// headroomInformed is rules.headroom_informed: headroom-balance with room for usageMargin x what the
// pod's workload is known to use (its cpu usage ratio) instead of headroomBurst, where that is known.
func headroomInformed(s *NodeState, pod PodRequest, out []float64) {
	burst := headroomBurst
	if pod.CPUUsageRatio > 0 {
		burst = usageMargin * pod.CPUUsageRatio
	}
	headroomValues(s, pod, out, burst)
}

func headroomValues(s *NodeState, pod PodRequest, out []float64, burst float64) {
	placementCosts("LB", s, pod, out)
	for i := range out {
		load := measuredCPU(s, i, requestsMultiplier) + burst*pod.CPUMillicores/s.CPUCapacity[i]
		if load < headroomLimit {
			out[i] = headroomOffset - out[i]
		} else {
			out[i] = targetLoadPackingAt(s, pod, i) - headroomOffset
		}
	}
}
