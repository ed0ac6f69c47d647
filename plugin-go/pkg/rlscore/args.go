package rlscore

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

const (
	// DefaultSuggestionURL is the suggestion server's Service in the deploy/ manifests.
	DefaultSuggestionURL = "http://rlscore-suggestion-server.rlscore-system.svc:8000/suggest"
	// DefaultTimeout bounds one /suggest exchange; a scheduling cycle never waits longer on us.
	DefaultTimeout = 250 * time.Millisecond
	// MaxTimeout keeps a misconfiguration from stalling the scheduler for seconds per pod.
	MaxTimeout = 5 * time.Second
	// DefaultInProcessRefreshInterval: how often the in-process scorer fetches models and metrics.
	DefaultInProcessRefreshInterval = 2 * time.Second
	// DefaultMaxResponseBytes fits a 25 000-node answer with room to spare.
	DefaultMaxResponseBytes = 4 << 20
	// WireCompact posts names one per line to /v1/scores and reads one byte per node back.
	WireCompact = "compact"
	// WireJSON posts the public /suggest JSON contract.
	WireJSON    = "json"
	suggestPath = "/suggest"
	scoresPath  = "/v1/scores"
)

// Policies the suggestion server knows.
var Policies = []string{"EE", "LB", "EL"}

// RLScoreArgs configures the RLScore plugin through the KubeSchedulerConfiguration's pluginConfig.
type RLScoreArgs struct {
	metav1.TypeMeta `json:",inline"`

	// SuggestionURL is the full URL of the server's POST /suggest endpoint.
	SuggestionURL string `json:"suggestionURL,omitempty"`
	// Timeout bounds one request, connection to last byte (default 250ms, at most 5s).
	Timeout metav1.Duration `json:"timeout,omitempty"`
	// DefaultPolicy (EE, LB or EL) is sent for pods without an rlscore.io/policy annotation;
	// empty leaves the choice to the server's default.
	DefaultPolicy string `json:"defaultPolicy,omitempty"`
	// Shadow asks the server and records what it would have chosen, but scores every node the
	// same, so the policy can be trialled without influencing placements.
	Shadow bool `json:"shadow,omitempty"`
	// BearerTokenFile, when set, holds a token sent as "Authorization: Bearer <token>".
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// MaxResponseBytes caps the response body read (default 4 MiB).
	MaxResponseBytes int64 `json:"maxResponseBytes,omitempty"`
	// WireFormat is "compact" (default: POST <suggestionURL minus /suggest>/v1/scores, node names
	// one per line, one score byte per node back) or "json" (POST suggestionURL, the /suggest JSON).
	WireFormat string `json:"wireFormat,omitempty"`
	// TLSCAFile is a PEM bundle of the CAs that may sign the server's certificate (https URLs);
	// empty uses the system's roots.
	TLSCAFile string `json:"tlsCAFile,omitempty"`
	// TLSCertFile and TLSKeyFile are the plugin's client certificate and key for mutual TLS; both or
	// neither. They are re-read when they change, so rotation needs no restart.
	TLSCertFile string `json:"tlsCertFile,omitempty"`
	TLSKeyFile  string `json:"tlsKeyFile,omitempty"`
	// InProcess scores pods inside the scheduler: the plugin fetches the serving models' weights
	// and the server's measured node state every InProcessRefreshInterval and computes the same
	// features and forward pass itself, so a pod costs no HTTP exchange. Pods it cannot score
	// exactly as the server would (no model, stale state, invalid annotations) still go over HTTP.
	InProcess bool `json:"inProcess,omitempty"`
	// InProcessRefreshInterval is how often that state is fetched (default 2s, 100ms..5m).
	InProcessRefreshInterval metav1.Duration `json:"inProcessRefreshInterval,omitempty"`
}

// RequestURL is where the plugin posts: suggestionURL itself for json, its sibling /v1/scores for
// compact.
func (a *RLScoreArgs) RequestURL() string {
	if a.WireFormat == WireJSON {
		return a.SuggestionURL
	}
	u, err := url.Parse(a.SuggestionURL)
	if err != nil {
		return a.SuggestionURL
	}
	u.Path = strings.TrimSuffix(u.Path, suggestPath) + scoresPath
	return u.String()
}

// DeepCopyObject makes RLScoreArgs a runtime.Object, so tests and callers can pass it directly.
func (a *RLScoreArgs) DeepCopyObject() runtime.Object {
	out := *a
	return &out
}

// SetDefaults fills what the configuration left out.
func (a *RLScoreArgs) SetDefaults() {
	if a.SuggestionURL == "" {
		a.SuggestionURL = DefaultSuggestionURL
	}
	if a.Timeout.Duration == 0 {
		a.Timeout.Duration = DefaultTimeout
	}
	if a.MaxResponseBytes == 0 {
		a.MaxResponseBytes = DefaultMaxResponseBytes
	}
	a.DefaultPolicy = strings.ToUpper(strings.TrimSpace(a.DefaultPolicy))
	if a.WireFormat == "" {
		a.WireFormat = WireCompact
	}
	if a.InProcessRefreshInterval.Duration == 0 {
		a.InProcessRefreshInterval.Duration = DefaultInProcessRefreshInterval
	}
}

// Validate reports every problem at once, each naming its field.
func (a *RLScoreArgs) Validate() error {
	var problems []string
	u, err := url.Parse(a.SuggestionURL)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("suggestionURL %q: %v", a.SuggestionURL, err))
	case u.Scheme != "http" && u.Scheme != "https":
		problems = append(problems, fmt.Sprintf("suggestionURL %q: scheme must be http or https", a.SuggestionURL))
	case u.Host == "":
		problems = append(problems, fmt.Sprintf("suggestionURL %q: missing host", a.SuggestionURL))
	case a.WireFormat == WireCompact && !strings.HasSuffix(u.Path, suggestPath):
		problems = append(problems, fmt.Sprintf("suggestionURL %q: the compact wire format posts to the /v1/scores "+
			"beside /suggest, so the path must end in /suggest (or set wireFormat: json)", a.SuggestionURL))
	}
	if a.WireFormat != WireCompact && a.WireFormat != WireJSON {
		problems = append(problems, fmt.Sprintf("wireFormat %q: must be %s or %s", a.WireFormat, WireCompact, WireJSON))
	}
	if a.Timeout.Duration <= 0 || a.Timeout.Duration > MaxTimeout {
		problems = append(problems, fmt.Sprintf("timeout %s: must be > 0 and <= %s", a.Timeout.Duration, MaxTimeout))
	}
	if d := a.InProcessRefreshInterval.Duration; d < 100*time.Millisecond || d > 5*time.Minute {
		problems = append(problems, fmt.Sprintf("inProcessRefreshInterval %s: must be 100ms..5m", d))
	}
	if a.DefaultPolicy != "" && !isPolicy(a.DefaultPolicy) {
		problems = append(problems, fmt.Sprintf("defaultPolicy %q: must be one of %s", a.DefaultPolicy, strings.Join(Policies, ", ")))
	}
	if a.MaxResponseBytes < 1024 {
		problems = append(problems, fmt.Sprintf("maxResponseBytes %d: must be >= 1024", a.MaxResponseBytes))
	}
	if a.TLSCAFile != "" || a.TLSCertFile != "" {
		if u != nil && u.Scheme != "https" {
			problems = append(problems, fmt.Sprintf("tlsCAFile/tlsCertFile: suggestionURL %q must be https", a.SuggestionURL))
		}
	}
	if a.TLSCAFile != "" {
		if _, err := loadCAPool(a.TLSCAFile); err != nil {
			problems = append(problems, fmt.Sprintf("tlsCAFile: %v", err))
		}
	}
	if (a.TLSCertFile == "") != (a.TLSKeyFile == "") {
		problems = append(problems, "tlsCertFile and tlsKeyFile: set both or neither")
	} else if a.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(a.TLSCertFile, a.TLSKeyFile); err != nil {
			problems = append(problems, fmt.Sprintf("tlsCertFile/tlsKeyFile: %v", err))
		}
	}
	if a.BearerTokenFile != "" {
		if _, err := readToken(a.BearerTokenFile); err != nil {
			problems = append(problems, fmt.Sprintf("bearerTokenFile: %v", err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid %s args: %s", Name, strings.Join(problems, "; "))
	}
	return nil
}

func isPolicy(p string) bool {
	for _, known := range Policies {
		if p == known {
			return true
		}
	}
	return false
}

func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return token, nil
}

// DecodeArgs turns the pluginConfig entry into defaulted, validated args. Unknown fields are an
// error (a typo such as "timout" must not silently fall back to the default).
func DecodeArgs(obj runtime.Object) (*RLScoreArgs, error) {
	args := &RLScoreArgs{}
	switch in := obj.(type) {
	case nil:
	case *RLScoreArgs:
		*args = *in
	case *runtime.Unknown:
		if len(in.Raw) > 0 {
			raw := in.Raw
			if in.ContentType == runtime.ContentTypeYAML {
				converted, err := yaml.YAMLToJSON(raw)
				if err != nil {
					return nil, fmt.Errorf("decoding %s args: %w", Name, err)
				}
				raw = converted
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(args); err != nil {
				return nil, fmt.Errorf("decoding %s args: %w", Name, err)
			}
		}
	default:
		return nil, fmt.Errorf("%s args: want *RLScoreArgs or runtime.Unknown, got %T", Name, obj)
	}
	args.SetDefaults()
	if err := args.Validate(); err != nil {
		return nil, err
	}
	return args, nil
}
