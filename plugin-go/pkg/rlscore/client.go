package rlscore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// Annotations the plugin passes through to the server.
const (
	AnnotationPrefix       = "rlscore.io/"
	AnnotationPolicy       = "rlscore.io/policy"
	AnnotationLatencySoft  = "rlscore.io/latency-soft-ms"
	AnnotationLatencyHard  = "rlscore.io/latency-hard-ms"
	AnnotationUsageRatio   = "rlscore.io/cpu-usage-ratio"
	ThesisLatencySoftAnnot = "latencySoftConstraint"
	ThesisLatencyHardAnnot = "latencyHardConstraint"
	tokenRefreshInterval   = time.Minute
)

// SuggestRequest is the body of POST /suggest (see the contract in the README).
type SuggestRequest struct {
	Pod    PodInfo  `json:"pod"`
	Nodes  []string `json:"nodes"`
	Policy string   `json:"policy,omitempty"`
}

// PodInfo is what the server learns about the pod.
type PodInfo struct {
	Name                 string            `json:"name"`
	Namespace            string            `json:"namespace"`
	CPURequestMillicores int64             `json:"cpu_request_millicores"`
	MemoryRequestBytes   int64             `json:"memory_request_bytes"`
	Annotations          map[string]string `json:"annotations,omitempty"`
}

// SuggestResponse is the server's answer; Scores must hold one 0..100 integer per requested node.
type SuggestResponse struct {
	Policy       string             `json:"policy"`
	ModelVersion string             `json:"model_version"`
	Source       string             `json:"source"`
	Degraded     bool               `json:"degraded"`
	Reasons      []string           `json:"reasons"`
	Scores       map[string]float64 `json:"scores"`
}

// Failure reasons, also the values of the failures metric's "reason" label.
const (
	ReasonTimeout     = "timeout"
	ReasonUnreachable = "unreachable"
	ReasonHTTPStatus  = "http_status"
	ReasonTooLarge    = "too_large"
	ReasonMalformed   = "malformed"
	ReasonMissingNode = "missing_node"
	ReasonUnknownNode = "unknown_node"
	ReasonOutOfRange  = "out_of_range"
	ReasonInternal    = "internal"
	ReasonTLS         = "tls"
)

// SuggestError says why a suggestion could not be used.
type SuggestError struct {
	Reason string
	Err    error
}

func (e *SuggestError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *SuggestError) Unwrap() error { return e.Err }

func failure(reason string, format string, a ...any) *SuggestError {
	return &SuggestError{Reason: reason, Err: fmt.Errorf(format, a...)}
}

// Client talks to the suggestion server over one shared, keep-alive HTTP client.
type Client struct {
	url     string
	compact bool
	http    *http.Client
	// background fetches the in-process scorer's state: no per-pod timeout (it sets its own)
	background *http.Client
	maxBytes   int64
	tokenFile  string

	mu          sync.Mutex
	token       string
	tokenLoaded time.Time
}

// NewClient builds the client from validated args.
func NewClient(args *RLScoreArgs) *Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = 64
	transport.MaxIdleConnsPerHost = 64
	transport.IdleConnTimeout = 90 * time.Second
	transport.ResponseHeaderTimeout = args.Timeout.Duration
	transport.DialContext = (&net.Dialer{Timeout: args.Timeout.Duration, KeepAlive: 30 * time.Second}).DialContext
	if config := tlsConfig(args); config != nil {
		transport.TLSClientConfig = config
	}
	slow := transport.Clone()
	slow.ResponseHeaderTimeout = 0
	return &Client{
		background: &http.Client{Transport: slow},
		url:        args.RequestURL(),
		compact:    args.WireFormat == WireCompact,
		// http.Client.Timeout covers the whole exchange including reading the body, so a server
		// that trickles bytes (slow loris) cannot hold a scheduling cycle.
		http:      &http.Client{Transport: transport, Timeout: args.Timeout.Duration},
		maxBytes:  args.MaxResponseBytes,
		tokenFile: args.BearerTokenFile,
	}
}

func (c *Client) bearerToken() string {
	if c.tokenFile == "" {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.tokenLoaded) >= tokenRefreshInterval {
		// Re-read periodically so rotated tokens are picked up; keep the old one if the read fails.
		if token, err := readToken(c.tokenFile); err == nil {
			c.token = token
		}
		c.tokenLoaded = time.Now()
	}
	return c.token
}

// compactHeader is the first line of a /v1/scores body.
type compactHeader struct {
	Pod    PodInfo `json:"pod"`
	Policy string  `json:"policy,omitempty"`
}

// Suggest asks for scores of `nodes` and returns them as validated integers 0..100, one per node.
func (c *Client) Suggest(ctx context.Context, req *SuggestRequest) (map[string]int64, *SuggestResponse, error) {
	body, contentType, err := c.encode(req)
	if err != nil {
		return nil, nil, failure(ReasonInternal, "encoding request: %v", err)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, failure(ReasonInternal, "building request: %v", err)
	}
	httpReq.Header.Set("Content-Type", contentType)
	if token := c.bearerToken(); token != "" {
		httpReq.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(httpReq)
	if err != nil {
		return nil, nil, classifyTransportError(err)
	}
	defer func() {
		// Drain a little so the connection can be reused, never the whole of a huge body.
		_, _ = io.CopyN(io.Discard, resp.Body, 4096)
		_ = resp.Body.Close()
	}()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		return nil, nil, classifyTransportError(err)
	}
	if int64(len(data)) > c.maxBytes {
		return nil, nil, failure(ReasonTooLarge, "response body over %d bytes", c.maxBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, failure(ReasonHTTPStatus, "status %d: %s", resp.StatusCode, snippet(data))
	}
	if c.compact {
		return decodeCompact(req.Nodes, resp.Header, data)
	}
	var parsed SuggestResponse
	if err := json.Unmarshal(data, &parsed); err != nil {
		return nil, nil, failure(ReasonMalformed, "decoding response: %v", err)
	}
	scores, serr := validateScores(req.Nodes, parsed.Scores)
	if serr != nil {
		return nil, &parsed, serr
	}
	return scores, &parsed, nil
}

func (c *Client) encode(req *SuggestRequest) ([]byte, string, error) {
	if !c.compact {
		body, err := json.Marshal(req)
		return body, "application/json", err
	}
	header, err := json.Marshal(compactHeader{Pod: req.Pod, Policy: req.Policy})
	if err != nil {
		return nil, "", err
	}
	size := len(header)
	for _, name := range req.Nodes {
		size += len(name) + 1
	}
	var buf bytes.Buffer
	buf.Grow(size)
	buf.Write(header)
	for _, name := range req.Nodes {
		buf.WriteByte('\n')
		buf.WriteString(name)
	}
	return buf.Bytes(), compactContentType, nil
}

const compactContentType = "application/x-rlscore-names"

// decodeCompact reads one score byte per requested node, in request order, and the answer's
// metadata from the X-Rlscore-* headers.
func decodeCompact(nodes []string, header http.Header, data []byte) (map[string]int64, *SuggestResponse, error) {
	parsed := &SuggestResponse{
		Policy:       header.Get("X-Rlscore-Policy"),
		ModelVersion: header.Get("X-Rlscore-Model-Version"),
		Source:       header.Get("X-Rlscore-Source"),
		Degraded:     header.Get("X-Rlscore-Degraded") == "true",
	}
	if reasons := header.Get("X-Rlscore-Reasons"); reasons != "" {
		if err := json.Unmarshal([]byte(reasons), &parsed.Reasons); err != nil {
			return nil, parsed, failure(ReasonMalformed, "decoding X-Rlscore-Reasons: %v", err)
		}
	}
	if parsed.Policy == "" || parsed.Source == "" {
		return nil, parsed, failure(ReasonMalformed, "compact response without X-Rlscore-Policy/-Source headers")
	}
	if len(data) != len(nodes) {
		return nil, parsed, failure(ReasonMalformed, "%d scores for %d nodes", len(data), len(nodes))
	}
	scores := make(map[string]int64, len(nodes))
	for i, b := range data {
		if int64(b) > fwk.MaxNodeScore {
			return nil, parsed, failure(ReasonOutOfRange, "score %d for node %q is not in 0..100", b, nodes[i])
		}
		scores[nodes[i]] = int64(b)
	}
	return scores, parsed, nil
}

func validateScores(nodes []string, raw map[string]float64) (map[string]int64, *SuggestError) {
	if raw == nil {
		return nil, failure(ReasonMalformed, "response has no scores")
	}
	scores := make(map[string]int64, len(nodes))
	for _, node := range nodes {
		s, ok := raw[node]
		if !ok {
			return nil, failure(ReasonMissingNode, "no score for node %q", node)
		}
		if math.IsNaN(s) || s < 0 || s > 100 || s != math.Trunc(s) {
			return nil, failure(ReasonOutOfRange, "score %v for node %q is not an integer in 0..100", s, node)
		}
		scores[node] = int64(s)
	}
	if len(raw) != len(scores) {
		for node := range raw {
			if _, ok := scores[node]; !ok {
				return nil, failure(ReasonUnknownNode, "score for node %q that was not asked about", node)
			}
		}
	}
	return scores, nil
}

func classifyTransportError(err error) *SuggestError {
	var verifyErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	// an alert the server sent (no or a refused client certificate) has no exported type
	if errors.As(err, &verifyErr) || errors.As(err, &unknownAuthority) || errors.As(err, &hostnameErr) ||
		errors.As(err, &recordErr) || strings.Contains(err.Error(), "remote error: tls:") {
		return &SuggestError{Reason: ReasonTLS, Err: err}
	}
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &netErr) && netErr.Timeout()) {
		return &SuggestError{Reason: ReasonTimeout, Err: err}
	}
	return &SuggestError{Reason: ReasonUnreachable, Err: err}
}

func snippet(data []byte) string {
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// PodInfoFor builds the request's pod: effective requests as the scheduler computes them (containers
// summed, init containers and overhead accounted for) and the annotations the server reads.
func PodInfoFor(pod *v1.Pod) PodInfo {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	info := PodInfo{
		Name:                 pod.Name,
		Namespace:            pod.Namespace,
		CPURequestMillicores: requests.Cpu().MilliValue(),
		MemoryRequestBytes:   requests.Memory().Value(),
	}
	for key, value := range pod.Annotations {
		if strings.HasPrefix(key, AnnotationPrefix) || key == ThesisLatencySoftAnnot || key == ThesisLatencyHardAnnot {
			if info.Annotations == nil {
				info.Annotations = map[string]string{}
			}
			info.Annotations[key] = value
		}
	}
	return info
}
