package rlscore

import (
	"encoding/json"
	"fmt"
	"math"
)

// WeightsFormat names the plain-JSON export of a served node scorer (GET /v1/models/{policy}), and
// SelectorWeightsFormat that of a rule selector (agent/learn/network.py's RuleSelector): the same trunk,
// pooled into one logit per hand-written rule; the rule it picks scores the nodes (rules.go).
const (
	WeightsFormat         = "rlscore-deepsets-weights"
	SelectorWeightsFormat = "rlscore-rule-selector-weights"
	// AnchoredWeightsFormat is a node scorer anchored on a rule selector (rlscore.core.model's anchor):
	// its values are the network's plus weight x each node's standing under the rule the selector picks.
	AnchoredWeightsFormat = "rlscore-anchored-weights"
)

// maxSelectorRules bounds a selector's rules, as the server's loader does.
const maxSelectorRules = 32

// maxHiddenUnits bounds a layer, as the server's loader does.
const maxHiddenUnits = 4096

// layer is one permutation-equivariant layer: x Lambda + bias - max(x) Gamma - mean(x) Delta, the
// matrices stored [in][out] row-major.
type layer struct {
	in, out              int
	lambda, gamma, delta []float64
	bias                 []float64
}

// Model is the DeepSets node scorer of one policy, as the server's NumpyScorer computes it
// (float64 on the float32 features), or a rule selector as its NumpySelector does.
type Model struct {
	Policy   string
	Version  string
	layers   []layer
	selector *selectorHead // nil: a node scorer, whose last layer gives one value per node
	// readsRecentPeak: some first-layer weight on recent_peak_to_come is not zero. The column needs
	// the whole cluster's requests, a sum over every node per pod; a model of an earlier feature spec
	// (zero weight on it) decides the same without them.
	readsRecentPeak bool
	// readsRules: some first-layer weight on a rule-standing column is not zero (false for a model
	// of an earlier feature version, whose weights on those columns are 0).
	readsRules bool
	// candidates: what the network ranks ("" every candidate, else one of the Candidates* sets); every
	// other node ranks below the ranked ones.
	candidates string
	// anchor: the rule selector an anchored node scorer adds weight x its pick's standing from (nil: none);
	// anchorColumns[k] is the standing column of the selector's k-th rule; anchorBest: the weight goes to
	// the rule's best nodes only (standing 1), not to every node in proportion to its standing.
	anchor        *Model
	anchorWeight  float64
	anchorBest    bool
	anchorColumns []int
}

// anchorBestTolerance: a standing this close to 1 is the rule's best (rlscore.core.model.ANCHOR_BEST_TOLERANCE).
const anchorBestTolerance = 1e-6

// maxAnchorWeight bounds an anchor's weight (rlscore.core.model.MAX_ANCHOR_WEIGHT).
const maxAnchorWeight = 1000.0

// The restrictions of what a node scorer ranks (rlscore.core.features.CANDIDATE_SETS): only the candidates
// in the pod's best latency tier; only the running nodes while one of them is a candidate; the running
// nodes of the best latency tier while one of them is a candidate.
const (
	CandidatesBestLatencyTier             = "best-latency-tier"
	CandidatesRunningFirst                = "running-first"
	CandidatesBestLatencyTierRunningFirst = "best-latency-tier-running-first"
)

// isCandidateSet says whether a model file's "candidates" names a set this plugin ranks.
func isCandidateSet(c string) bool {
	return c == CandidatesBestLatencyTier || c == CandidatesRunningFirst || c == CandidatesBestLatencyTierRunningFirst
}

// readsInput says whether any first-layer weight on input column c is not zero.
func (m *Model) readsInput(c int) bool {
	first := m.layers[0]
	for _, w := range [][]float64{first.lambda, first.gamma, first.delta} {
		for _, v := range w[c*first.out : (c+1)*first.out] {
			if v != 0 {
				return true
			}
		}
	}
	return false
}

type exportedLayer struct {
	Lambda [][]float64 `json:"lambda"`
	Bias   []float64   `json:"bias"`
	Gamma  [][]float64 `json:"gamma"`
	Delta  [][]float64 `json:"delta"`
}

type exportedLinear struct {
	Weight [][]float64 `json:"weight"`
	Bias   []float64   `json:"bias"`
}

type exportedModel struct {
	Format             string           `json:"format"`
	FeatureSpecVersion int              `json:"feature_spec_version"`
	Policy             string           `json:"policy"`
	Version            string           `json:"version"`
	NodeFeatures       int              `json:"node_features"`
	PodFeatures        int              `json:"pod_features"`
	Layers             []exportedLayer  `json:"layers"`
	Rules              []string         `json:"rules"`      // a selector's
	Head               []exportedLinear `json:"head"`       // a selector's: [mean, max] -> hidden -> one logit per rule
	Candidates         string           `json:"candidates"` // a node scorer's: "" (every candidate) or best-latency-tier
	Anchor             *exportedAnchor  `json:"anchor"`     // an anchored node scorer's
}

// exportedAnchor is an anchored scorer's selector (a selector's export) with its weight and what the
// weight multiplies ("standing" or "best").
type exportedAnchor struct {
	exportedModel
	Weight float64 `json:"weight"`
	On     string  `json:"on"`
}

// selectorHead is a rule selector's part after the trunk: two linear layers over the pooled trunk, one
// logit per rule, the matrices stored [in][out] row-major.
type selectorHead struct {
	names  []string
	rules  []rule
	hidden int
	w1, b1 []float64
	w2, b2 []float64
}

// ParseModel validates an exported model: format, feature spec, shapes that chain from the features
// to one output (a node scorer) or to one logit per rule this build computes (a selector), finite
// weights. Anything else is an error that says what is wrong.
func ParseModel(data []byte) (*Model, error) {
	var e exportedModel
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("model weights: %w", err)
	}
	if e.Format != AnchoredWeightsFormat {
		if e.Anchor != nil {
			return nil, fmt.Errorf("model %s: format %q names no anchor", e.Version, e.Format)
		}
		return parseExported(e)
	}
	if e.Anchor == nil {
		return nil, fmt.Errorf("model %s: an anchored scorer without its anchor", e.Version)
	}
	a := e.Anchor
	e.Format, e.Anchor = WeightsFormat, nil
	m, err := parseExported(e)
	if err != nil {
		return nil, err
	}
	switch {
	case m.candidates != "":
		return nil, fmt.Errorf("model %s: an anchored scorer ranks every candidate", e.Version)
	case a.Format != SelectorWeightsFormat || a.Anchor != nil:
		return nil, fmt.Errorf("model %s: its anchor's format is %q, expected %q", e.Version, a.Format,
			SelectorWeightsFormat)
	case a.Policy != e.Policy:
		return nil, fmt.Errorf("model %s: its anchor is of policy %q, the scorer of %q", e.Version, a.Policy, e.Policy)
	case !finite(a.Weight) || a.Weight < 0 || a.Weight > maxAnchorWeight:
		return nil, fmt.Errorf("model %s: anchor weight %v, expected 0..%v", e.Version, a.Weight, maxAnchorWeight)
	case a.On != "standing" && a.On != "best":
		return nil, fmt.Errorf("model %s: the anchor's term is %.20q, expected \"standing\" or \"best\"", e.Version, a.On)
	}
	if m.anchor, err = parseExported(a.exportedModel); err != nil {
		return nil, fmt.Errorf("model %s: anchor: %w", e.Version, err)
	}
	for _, name := range m.anchor.selector.names {
		column := -1
		for k, r := range ruleFeatures {
			if r == name {
				column = numStateFeatures + k
			}
		}
		if column < 0 {
			return nil, fmt.Errorf("model %s: the anchor picks %q, which has no standing column", e.Version, name)
		}
		m.anchorColumns = append(m.anchorColumns, column)
	}
	m.anchorWeight, m.anchorBest = a.Weight, a.On == "best"
	m.readsRules = true // the anchor's term reads the standing columns whatever the network's weights on them
	m.readsRecentPeak = m.readsRecentPeak || m.anchor.readsRecentPeak
	return m, nil
}

// parseExported is ParseModel for a node scorer or a selector (not anchored).
func parseExported(e exportedModel) (*Model, error) {
	isGate := e.Format == SelectorWeightsFormat
	switch {
	case e.Format != WeightsFormat && !isGate:
		return nil, fmt.Errorf("model weights: format is %q, expected %q, %q or %q", e.Format, WeightsFormat,
			SelectorWeightsFormat, AnchoredWeightsFormat)
	case e.FeatureSpecVersion != FeatureSpecVersion:
		return nil, fmt.Errorf("model %s: trained on feature spec %d, this plugin computes %d",
			e.Version, e.FeatureSpecVersion, FeatureSpecVersion)
	case e.NodeFeatures != numNodeFeatures || e.PodFeatures != numPodFeatures:
		return nil, fmt.Errorf("model %s: expects %d+%d features, this plugin computes %d+%d", e.Version,
			e.NodeFeatures, e.PodFeatures, numNodeFeatures, numPodFeatures)
	case !isPolicy(e.Policy):
		return nil, fmt.Errorf("model %s: unknown policy %q", e.Version, e.Policy)
	case !isGate && (len(e.Layers) < 2 || len(e.Layers) > 9):
		return nil, fmt.Errorf("model %s: %d layers, expected 2..9", e.Version, len(e.Layers))
	case isGate && (len(e.Layers) < 1 || len(e.Layers) > 8):
		return nil, fmt.Errorf("selector %s: %d trunk layers, expected 1..8", e.Version, len(e.Layers))
	case e.Candidates != "" && !isCandidateSet(e.Candidates):
		return nil, fmt.Errorf("model %s: candidates is %.40q, expected %q, %q, %q or none", e.Version, e.Candidates,
			CandidatesBestLatencyTier, CandidatesRunningFirst, CandidatesBestLatencyTierRunningFirst)
	case isGate && e.Candidates != "":
		return nil, fmt.Errorf("selector %s: names candidates, a selector's are its rules' own", e.Version)
	}
	m := &Model{Policy: e.Policy, Version: e.Version, candidates: e.Candidates}
	in := numNodeFeatures + numPodFeatures
	for k, l := range e.Layers {
		out := len(l.Bias)
		if out < 1 || out > maxHiddenUnits || (!isGate && k == len(e.Layers)-1 && out != 1) {
			return nil, fmt.Errorf("model %s: layer %d has %d outputs", e.Version, k, out)
		}
		lam, err := matrix(l.Lambda, in, out)
		if err != nil {
			return nil, fmt.Errorf("model %s: layer %d lambda: %w", e.Version, k, err)
		}
		gam, err := matrix(l.Gamma, in, out)
		if err != nil {
			return nil, fmt.Errorf("model %s: layer %d gamma: %w", e.Version, k, err)
		}
		del, err := matrix(l.Delta, in, out)
		if err != nil {
			return nil, fmt.Errorf("model %s: layer %d delta: %w", e.Version, k, err)
		}
		for _, v := range l.Bias {
			if !finite(v) {
				return nil, fmt.Errorf("model %s: layer %d bias is not finite", e.Version, k)
			}
		}
		m.layers = append(m.layers, layer{in: in, out: out, lambda: lam, gamma: gam, delta: del, bias: l.Bias})
		in = out
	}
	if isGate {
		head, err := parseSelectorHead(e, in)
		if err != nil {
			return nil, err
		}
		m.selector = head
	}
	m.noteInputs()
	return m, nil
}

// noteInputs records which optional input columns the first layer reads, so that scoring computes
// only those (readsRecentPeak, readsRules).
func (m *Model) noteInputs() {
	m.readsRecentPeak = m.readsInput(recentPeakToComeColumn)
	m.readsRules = false
	for c := numStateFeatures; c < numNodeFeatures; c++ {
		m.readsRules = m.readsRules || m.readsInput(c)
	}
}

// parseSelectorHead checks a selector's rules (known to this build, distinct) and its head's shapes from the
// trunk's last width.
func parseSelectorHead(e exportedModel, width int) (*selectorHead, error) {
	if len(e.Rules) < 1 || len(e.Rules) > maxSelectorRules {
		return nil, fmt.Errorf("selector %s: %d rules, expected 1..%d", e.Version, len(e.Rules), maxSelectorRules)
	}
	g := &selectorHead{names: e.Rules}
	seen := map[string]bool{}
	for _, name := range e.Rules {
		r, ok := rules[name]
		if !ok || seen[name] {
			return nil, fmt.Errorf("selector %s: rule %q is unknown to this plugin or repeated", e.Version, name)
		}
		seen[name] = true
		g.rules = append(g.rules, r)
	}
	if len(e.Head) != 2 {
		return nil, fmt.Errorf("selector %s: a head of %d layers, expected 2", e.Version, len(e.Head))
	}
	g.hidden = len(e.Head[0].Bias)
	if g.hidden < 1 || g.hidden > maxHiddenUnits || len(e.Head[1].Bias) != len(e.Rules) {
		return nil, fmt.Errorf("selector %s: head widths %d and %d, expected 1..%d and one per rule (%d)", e.Version,
			g.hidden, len(e.Head[1].Bias), maxHiddenUnits, len(e.Rules))
	}
	var err error
	if g.w1, err = matrix(e.Head[0].Weight, 2*width, g.hidden); err != nil {
		return nil, fmt.Errorf("selector %s: head layer 0: %w", e.Version, err)
	}
	if g.w2, err = matrix(e.Head[1].Weight, g.hidden, len(e.Rules)); err != nil {
		return nil, fmt.Errorf("selector %s: head layer 1: %w", e.Version, err)
	}
	for k, bias := range [][]float64{e.Head[0].Bias, e.Head[1].Bias} {
		for _, v := range bias {
			if !finite(v) {
				return nil, fmt.Errorf("selector %s: head layer %d bias is not finite", e.Version, k)
			}
		}
	}
	g.b1, g.b2 = e.Head[0].Bias, e.Head[1].Bias
	return g, nil
}

// Rules are a selector's rules in logit order (nil for a node scorer).
func (m *Model) Rules() []string {
	if m.selector == nil {
		return nil
	}
	return m.selector.names
}

func matrix(rows [][]float64, in, out int) ([]float64, error) {
	if len(rows) != in {
		return nil, fmt.Errorf("%d rows, expected %d", len(rows), in)
	}
	flat := make([]float64, 0, in*out)
	for _, row := range rows {
		if len(row) != out {
			return nil, fmt.Errorf("a row of %d, expected %d", len(row), out)
		}
		for _, v := range row {
			if !finite(v) {
				return nil, fmt.Errorf("not finite")
			}
		}
		flat = append(flat, row...)
	}
	return flat, nil
}

// forwardScratch holds one forward pass's activations, reusable across calls (a selector's pooled trunk,
// hidden activity and logits too).
type forwardScratch struct {
	a, b, summary, shift     []float64
	pooled, activity, logits []float64
}

func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// rowsPerPiece is the share of a layer's rows one worker takes when the forward pass runs in parallel.
const rowsPerPiece = 128

// Parallel runs piece(0..pieces-1), possibly at once (the scheduler's Parallelizer); nil runs them
// one after the other.
type Parallel func(pieces int, piece func(i int))

// matmul runs matmulShift over blocks of rows, in parallel when allowed: every row is computed
// alone, so the result is the same bit for bit.
func matmul(parallel Parallel, x []float64, n, inW int, w []float64, outW int, shift, out []float64) {
	pieces := (n + rowsPerPiece - 1) / rowsPerPiece
	if parallel == nil || pieces < 2 {
		matmulShift(x, n, inW, w, outW, shift, out)
		return
	}
	parallel(pieces, func(p int) {
		lo, hi := p*rowsPerPiece, min((p+1)*rowsPerPiece, n)
		matmulShift(x[lo*inW:hi*inW], hi-lo, inW, w, outW, shift, out[lo*outW:hi*outW])
	})
}

// Values writes one value per node of s (n >= 1) into values: a node scorer's forward pass on f (the
// features of s and pod), or the values of the rule a selector picks. It returns the selector's rule (-1 for
// a node scorer).
func (m *Model) Values(s *NodeState, pod PodRequest, f *Features, values []float64, scratch *forwardScratch,
	parallel Parallel) int {
	if m.selector == nil {
		m.QValues(f, values, scratch, parallel)
		return -1
	}
	k := m.Pick(f, scratch, parallel)
	m.selector.rules[k](s, pod, values)
	return k
}

// Pick is the rule a selector picks (the first of equal logits), from the features; its logits are
// left in scratch.logits.
func (m *Model) Pick(f *Features, scratch *forwardScratch, parallel Parallel) int {
	g := m.selector
	n := len(f.Nodes) / numNodeFeatures
	x := m.trunk(f, scratch, parallel)
	width := m.layers[len(m.layers)-1].out
	for i, v := range x {
		if v < 0 {
			x[i] = 0
		}
	}
	// [mean, max] over the nodes, as the server's NumpySelector concatenates them
	pooled := grow(scratch.pooled, 2*width)
	columnMaxMean(x, n, width, pooled[width:], pooled[:width])
	activity := grow(scratch.activity, g.hidden)
	copy(activity, g.b1)
	for k, v := range pooled {
		axpy(v, g.w1[k*g.hidden:(k+1)*g.hidden], activity)
	}
	logits := grow(scratch.logits, len(g.rules))
	copy(logits, g.b2)
	for k, v := range activity {
		if v > 0 {
			axpy(v, g.w2[k*len(g.rules):(k+1)*len(g.rules)], logits)
		}
	}
	scratch.pooled, scratch.activity, scratch.logits = pooled, activity, logits
	best := 0
	for k, v := range logits {
		if v > logits[best] {
			best = k
		}
	}
	return best
}

// QValues writes one value per node (n = len(f.Nodes)/numNodeFeatures >= 1) into values: a node
// scorer's forward pass.
func (m *Model) QValues(f *Features, values []float64, scratch *forwardScratch, parallel Parallel) {
	x := m.trunk(f, scratch, parallel)
	copy(values, x[:len(values)])
	if m.anchor != nil {
		m.addAnchorTerm(f, values, scratch, parallel)
	}
	if m.candidates != "" {
		rankOutsideBelow(f, values, m.candidates)
	}
}

// addAnchorTerm adds weight x each node's standing under the rule the anchor's selector picks (or weight
// on the rule's best nodes), as rlscore.core.model.LoadedModel.anchor_term does.
func (m *Model) addAnchorTerm(f *Features, values []float64, scratch *forwardScratch, parallel Parallel) {
	column := m.anchorColumns[m.anchor.Pick(f, scratch, parallel)]
	for i := range values {
		standing := f.Nodes[i*numNodeFeatures+column]
		if m.anchorBest {
			standing = 0
			if f.Nodes[i*numNodeFeatures+column] >= 1-anchorBestTolerance {
				standing = 1
			}
		}
		values[i] += m.anchorWeight * standing
	}
}

// rankOutsideBelow is rlscore.core.features.rank_outside_set_below: the values of the nodes at the candidate
// set's highest level stay, every other node ranks below them, the higher level first, one spread of the
// inside values (1 where that is 0) per level. A node's level is its latency tier (best-latency-tier),
// whether it runs a pod (running-first), or twice its tier plus whether it runs a pod.
func rankOutsideBelow(f *Features, values []float64, candidates string) {
	const F = numNodeFeatures
	tier := func(i int) float64 { return f.Nodes[i*F+colMeetsSoft] + f.Nodes[i*F+colMeetsHard] }
	switch candidates {
	case CandidatesRunningFirst:
		tier = func(i int) float64 { return f.Nodes[i*F+colActive] }
	case CandidatesBestLatencyTierRunningFirst:
		tier = func(i int) float64 {
			return 2*(f.Nodes[i*F+colMeetsSoft]+f.Nodes[i*F+colMeetsHard]) + f.Nodes[i*F+colActive]
		}
	}
	best := math.Inf(-1)
	for i := range values {
		best = math.Max(best, tier(i))
	}
	low, high, outside := math.Inf(1), math.Inf(-1), false
	for i, v := range values {
		if tier(i) >= best {
			low, high = math.Min(low, v), math.Max(high, v)
		} else {
			outside = true
		}
	}
	if !outside {
		return
	}
	gap := high - low
	if !(gap > 0) {
		gap = 1
	}
	for i := range values {
		if t := tier(i); t < best {
			values[i] = low - gap*(best-t)
		}
	}
}

// trunk runs the equivariant layers, ReLU between them (not after the last), and returns the last
// layer's output (n x its width, in scratch).
func (m *Model) trunk(f *Features, scratch *forwardScratch, parallel Parallel) []float64 {
	const F = numNodeFeatures
	n := len(f.Nodes) / F
	first := m.layers[0]
	width := first.out

	// The first layer's input is [node features, pod features]; the pod part and the set summary
	// (max and mean over the nodes) are the same for every node, so they fold into one shift.
	scratch.summary = grow(scratch.summary, 2*(F+numPodFeatures))
	top, mean := scratch.summary[:F+numPodFeatures], scratch.summary[F+numPodFeatures:]
	columnMaxMean(f.Nodes, n, F, top[:F], mean[:F])
	copy(top[F:], f.Pod[:])
	copy(mean[F:], f.Pod[:])
	scratch.shift = grow(scratch.shift, maxWidth(m))
	shift := scratch.shift[:width]
	copy(shift, first.bias)
	for k := F; k < F+numPodFeatures; k++ {
		axpy(f.Pod[k-F], first.lambda[k*width:(k+1)*width], shift)
	}
	for k := 0; k < F+numPodFeatures; k++ {
		axpy(-top[k], first.gamma[k*width:(k+1)*width], shift)
		axpy(-mean[k], first.delta[k*width:(k+1)*width], shift)
	}
	scratch.a = grow(scratch.a, n*maxWidth(m))
	x := scratch.a[:n*width]
	matmul(parallel, f.Nodes, n, F, first.lambda[:F*width], width, shift, x)

	scratch.b = grow(scratch.b, n*maxWidth(m))
	next := scratch.b
	for _, l := range m.layers[1:] {
		for i, v := range x {
			if v < 0 {
				x[i] = 0
			}
		}
		scratch.summary = grow(scratch.summary, 2*l.in)
		top, mean := scratch.summary[:l.in], scratch.summary[l.in:]
		columnMaxMean(x, n, l.in, top, mean)
		shift := scratch.shift[:l.out]
		copy(shift, l.bias)
		for k := 0; k < l.in; k++ {
			axpy(-top[k], l.gamma[k*l.out:(k+1)*l.out], shift)
			axpy(-mean[k], l.delta[k*l.out:(k+1)*l.out], shift)
		}
		y := next[:n*l.out]
		matmul(parallel, x, n, l.in, l.lambda, l.out, shift, y)
		x, next = y, x[:cap(x)]
	}
	return x
}

func maxWidth(m *Model) int {
	w := numNodeFeatures + numPodFeatures
	for _, l := range m.layers {
		if l.out > w {
			w = l.out
		}
	}
	return w
}

// columnMaxMean: per column of the n x width matrix x, its max and mean (summed row by row, as
// numpy reduces over the first axis).
func columnMaxMean(x []float64, n, width int, top, mean []float64) {
	copy(top, x[:width])
	for j := range mean {
		mean[j] = 0
	}
	for i := 0; i < n; i++ {
		row := x[i*width : (i+1)*width]
		for j, v := range row {
			if v > top[j] {
				top[j] = v
			}
			mean[j] += v
		}
	}
	for j := range mean {
		mean[j] /= float64(n)
	}
}

// axpy: y += a * x.
func axpy(a float64, x, y []float64) {
	y = y[:len(x)]
	for j, v := range x {
		y[j] += a * v
	}
}

// matmulShift: out (n x outW) = x (n x inW) W (inW x outW) + shift, row by row. Each output sums
// shift, then x[i][k] * W[k][j] for k ascending, skipping the zeros of x (the ReLU leaves many): the
// same sums in the same order as a row-at-a-time loop, but eight outputs are kept in registers
// across k instead of being loaded and stored once per product (the in-process cycle at 1 000
// nodes: 2.35 -> 1.88 ms).
func matmulShift(x []float64, n, inW int, w []float64, outW int, shift, out []float64) {
	var nonzeroBuf [256]int
	nonzero := nonzeroBuf[:0]
	if inW > len(nonzeroBuf) {
		nonzero = make([]int, 0, inW)
	}
	shift = shift[:outW]
	for i := 0; i < n; i++ {
		row := out[i*outW : (i+1)*outW]
		xi := x[i*inW : (i+1)*inW]
		nonzero = nonzero[:0]
		for k, a := range xi {
			if a != 0 {
				nonzero = append(nonzero, k)
			}
		}
		j := 0
		for ; j+8 <= outW; j += 8 {
			s0, s1, s2, s3 := shift[j], shift[j+1], shift[j+2], shift[j+3]
			s4, s5, s6, s7 := shift[j+4], shift[j+5], shift[j+6], shift[j+7]
			for _, k := range nonzero {
				a := xi[k]
				wk := w[k*outW+j : k*outW+j+8 : k*outW+j+8]
				s0 += a * wk[0]
				s1 += a * wk[1]
				s2 += a * wk[2]
				s3 += a * wk[3]
				s4 += a * wk[4]
				s5 += a * wk[5]
				s6 += a * wk[6]
				s7 += a * wk[7]
			}
			r := row[j : j+8 : j+8]
			r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] = s0, s1, s2, s3, s4, s5, s6, s7
		}
		for ; j < outW; j++ {
			s := shift[j]
			for _, k := range nonzero {
				s += xi[k] * w[k*outW+j]
			}
			row[j] = s
		}
	}
}

// scoreTie: values this close to the best are a tie (rlscore.core.kernels.TIE).
const scoreTie = 1e-9

// ToNodeScores maps values onto integer scores 0..100 like rlscore.core.scoring.to_node_scores: 100 for the
// best value and those tied with it, worst 0, linear between (rounded half to even) but at most 99
// for every other node, 0 for non-finite values. So with RLScore alone the scheduler picks among
// the nodes the model ranks first, as the evaluation does.
func ToNodeScores(values []float64, scores []int64) {
	low, high, any := 0.0, 0.0, false
	for _, v := range values {
		if !finite(v) {
			continue
		}
		if !any || v < low {
			low = v
		}
		if !any || v > high {
			high = v
		}
		any = true
	}
	for i, v := range values {
		switch {
		case !finite(v):
			scores[i] = 0
		case v >= high-scoreTie:
			scores[i] = 100
		default:
			scores[i] = min(int64(math.RoundToEven((v-low)/(high-low)*100)), 99)
		}
	}
}
