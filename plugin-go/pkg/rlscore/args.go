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
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// ValidateArgs reports every problem with args at once, each naming its field, as the scheduler's
// own plugin args are validated; it reads no files (CheckFiles does, when the plugin starts).
func ValidateArgs(path *field.Path, a *RLScoreArgs) field.ErrorList {
	var errs field.ErrorList
	urlPath := path.Child("suggestionURL")
	u, err := url.Parse(a.SuggestionURL)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(urlPath, a.SuggestionURL, err.Error()))
	case u.Scheme != "http" && u.Scheme != "https":
		errs = append(errs, field.Invalid(urlPath, a.SuggestionURL, "scheme must be http or https"))
	case u.Host == "":
		errs = append(errs, field.Invalid(urlPath, a.SuggestionURL, "missing host"))
	case a.WireFormat == WireCompact && !strings.HasSuffix(u.Path, suggestPath):
		errs = append(errs, field.Invalid(urlPath, a.SuggestionURL, "the compact wire format posts to the "+
			"/v1/scores beside /suggest, so the path must end in /suggest (or set wireFormat: json)"))
	}
	if a.WireFormat != WireCompact && a.WireFormat != WireJSON {
		errs = append(errs, field.NotSupported(path.Child("wireFormat"), a.WireFormat, []string{WireCompact, WireJSON}))
	}
	if a.Timeout.Duration <= 0 || a.Timeout.Duration > MaxTimeout {
		errs = append(errs, field.Invalid(path.Child("timeout"), a.Timeout.Duration.String(),
			fmt.Sprintf("must be > 0 and <= %s", MaxTimeout)))
	}
	if d := a.InProcessRefreshInterval.Duration; d < 100*time.Millisecond || d > 5*time.Minute {
		errs = append(errs, field.Invalid(path.Child("inProcessRefreshInterval"), d.String(), "must be 100ms..5m"))
	}
	if a.DefaultPolicy != "" && !isPolicy(a.DefaultPolicy) {
		errs = append(errs, field.NotSupported(path.Child("defaultPolicy"), a.DefaultPolicy, Policies))
	}
	if a.MaxResponseBytes < 1024 {
		errs = append(errs, field.Invalid(path.Child("maxResponseBytes"), a.MaxResponseBytes, "must be >= 1024"))
	}
	if (a.TLSCAFile != "" || a.TLSCertFile != "") && u != nil && u.Scheme != "https" {
		errs = append(errs, field.Invalid(urlPath, a.SuggestionURL, "tlsCAFile and tlsCertFile need an https URL"))
	}
	if (a.TLSCertFile == "") != (a.TLSKeyFile == "") {
		errs = append(errs, field.Required(path.Child("tlsKeyFile"), "tlsCertFile and tlsKeyFile: set both or neither"))
	}
	return errs
}

// CheckFiles reads the files args name (token, CA bundle, client certificate) once, so a plugin
// that cannot authenticate fails to start with the file named instead of failing every request.
func CheckFiles(a *RLScoreArgs) error {
	var problems []string
	if a.TLSCAFile != "" {
		if _, err := loadCAPool(a.TLSCAFile); err != nil {
			problems = append(problems, fmt.Sprintf("tlsCAFile: %v", err))
		}
	}
	if a.TLSCertFile != "" && a.TLSKeyFile != "" {
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
		return fmt.Errorf("%s args: %s", Name, strings.Join(problems, "; "))
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

// DecodeArgs turns the pluginConfig entry into defaulted, validated args (no file is read). Unknown fields are an
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
	if errs := ValidateArgs(field.NewPath("pluginConfig").Key(Name).Child("args"), args); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s args: %w", Name, errs.ToAggregate())
	}
	return args, nil
}
