package nodeagent

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/captf/captf/hack/images/image"
)

// Defaults of Config.
const (
	// DefaultNodeName is the Node the agent registers when Config.NodeName is empty.
	DefaultNodeName = "captf-local"
	// DefaultPodSelector selects the pods of captf's Jobs.
	DefaultPodSelector = "captf.io/managed=true"
	// DefaultPath is the PATH of a container that sets none, as container runtimes default it.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// DefaultTokenExpiration is the lifetime of the ServiceAccount tokens the agent requests.
	DefaultTokenExpiration = time.Hour
	// DefaultHeartbeatInterval is how often the node Lease is renewed.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultNodeStatusInterval is how often the Node's conditions are refreshed.
	DefaultNodeStatusInterval = time.Minute
	// DefaultRetryInterval is how often a waiting pod looks again for what it waits on.
	DefaultRetryInterval = time.Second
	// DefaultMaxRestartBackoff caps the delay before restarting a container of a pod whose
	// restartPolicy is OnFailure or Always.
	DefaultMaxRestartBackoff = 30 * time.Second
	// DefaultMaxImagePullBackoff caps the delay before pulling an image again after a failed pull.
	DefaultMaxImagePullBackoff = 30 * time.Second
)

// nodeIP is the address of the Node and of every pod: the processes share the host's network.
const nodeIP = "127.0.0.1"

// Image is what an image reference stands for on this machine: which local files and
// directories appear at which paths inside the image.
type Image struct {
	// Paths maps absolute paths inside the image to local files or directories, e.g.
	// "/runner" to "<repo>/bin/runner" or "/captf/module" to a module directory.
	Paths map[string]string `json:"paths,omitempty"`
	// Command is the image's entrypoint, used for a container that sets no command. Its first
	// element is rewritten like any argument, so it may name a path inside the image.
	Command []string `json:"command,omitempty"`
}

// Config configures the node agent.
type Config struct {
	// RESTConfig is how the agent talks to the API server, which must be on a loopback address
	// (localhost, 127.0.0.0/8, ::1): New refuses any other. It needs to create and update Nodes
	// and node Leases, watch pods, bind them (pods/binding), write pods/status, delete pods,
	// read Secrets and ConfigMaps, request ServiceAccount tokens (serviceaccounts/token) and
	// create Events.
	RESTConfig *rest.Config

	// NodeName is the Node the agent registers and runs pods for. Defaults to DefaultNodeName.
	NodeName string

	// PodSelector is a label selector for the unscheduled pods the agent binds to its Node.
	// Defaults to DefaultPodSelector. Pods bound to the Node by other means run regardless.
	PodSelector string

	// BindAllPods binds every unscheduled pod, whatever PodSelector says, as the only node of a
	// control plane without a scheduler: the pods of the install's Deployments run here too.
	BindAllPods bool

	// Mirrors maps a registry host (e.g. "ghcr.io") to a registry on a loopback address that
	// serves its repositories (e.g. "127.0.0.1:5000"): a pod naming ghcr.io/captf/x:v1 runs what
	// 127.0.0.1:5000/captf/x:v1 is, and reports the image as named, as a container runtime's
	// registry mirror does.
	Mirrors map[string]string

	// WorkDir holds the agent's per-pod directories (WorkDir/pods/<uid>) and the images it
	// pulled (WorkDir/images/sha256-<hex>/rootfs). Required.
	WorkDir string

	// Images maps image references (a name with an optional tag, no digest), exactly as pods
	// name them, to local files. Each mapping gets a digest, and a pod may also name it as
	// <repository>@sha256:<hex>; Agent.PushImage changes a reference while the agent runs.
	// Every other reference, the real path, is pulled from its registry (plain HTTP for one on
	// a loopback address) and unpacked under WorkDir/images. A container whose image cannot be
	// had waits with ErrImagePull and ImagePullBackOff and is tried again.
	Images map[string]Image

	// APIServerURL is the API server URL written into the kubeconfig a pod gets in place of
	// in-cluster configuration. Defaults to RESTConfig.Host.
	APIServerURL string
	// APIServerCA is the PEM CA bundle of that kubeconfig. Defaults to the CA of RESTConfig.
	APIServerCA []byte

	// Capacity is the Node's capacity and allocatable. Defaults to 4 CPUs, 8Gi of memory,
	// 20Gi of ephemeral storage and 110 pods.
	Capacity corev1.ResourceList

	// Path is the PATH of a container that does not set one. Defaults to DefaultPath.
	Path string

	// RewriteVolumeFiles also rewrites container paths inside the text files of Secret,
	// ConfigMap and projected volumes, so that a rendered root module whose module source is
	// "/captf/module" finds the module image's directory. See docs/nodeagent.md.
	RewriteVolumeFiles bool

	// TokenExpiration is the requested lifetime of the ServiceAccount token in a pod's
	// kubeconfig; the agent renews it at 80% of its life. Defaults to DefaultTokenExpiration;
	// the API server's minimum is ten minutes.
	TokenExpiration time.Duration

	// HeartbeatInterval is how often the node Lease is renewed. Defaults to
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// NodeStatusInterval is how often the Node's conditions are refreshed. Defaults to
	// DefaultNodeStatusInterval.
	NodeStatusInterval time.Duration
	// RetryInterval is how often a waiting pod looks again for a missing Secret, ConfigMap or
	// ServiceAccount. Defaults to DefaultRetryInterval.
	RetryInterval time.Duration
	// MaxRestartBackoff caps the delay before a container restart. Defaults to
	// DefaultMaxRestartBackoff.
	MaxRestartBackoff time.Duration
	// MaxImagePullBackoff caps the delay before pulling again after a failed pull; the delay
	// starts at RetryInterval and doubles. Defaults to DefaultMaxImagePullBackoff.
	MaxImagePullBackoff time.Duration

	// Log receives the agent's log. Defaults to a logger that discards.
	Log logr.Logger
}

// complete returns cfg with defaults applied, or why it cannot be used.
func (cfg Config) complete() (Config, error) {
	cfg.setDefaults()
	var errs []error
	if cfg.RESTConfig == nil {
		errs = append(errs, errors.New("RESTConfig is required"))
	} else if err := requireLoopback(cfg.RESTConfig.Host); err != nil {
		errs = append(errs, err)
	}
	if _, err := labels.Parse(cfg.PodSelector); err != nil {
		errs = append(errs, fmt.Errorf("PodSelector: %w", err))
	}
	for host, mirror := range cfg.Mirrors {
		// A mirror is a local test registry: the agent stays off every network but loopback.
		if !image.LoopbackRegistry(mirror) {
			errs = append(errs, fmt.Errorf("Mirrors: the mirror %q of %q is not on a loopback address", mirror, host))
		}
	}
	if err := cfg.absWorkDir(); err != nil {
		errs = append(errs, err)
	}
	var imageErrs []error
	cfg.Images, imageErrs = normalizeImages(cfg.Images)
	errs = append(errs, imageErrs...)
	if err := cfg.defaultAPIServer(); err != nil {
		errs = append(errs, err)
	}
	if cfg.TokenExpiration < 10*time.Minute {
		errs = append(errs, fmt.Errorf("TokenExpiration %s is below the API server's minimum of 10m", cfg.TokenExpiration))
	}
	return cfg, errors.Join(errs...)
}

// requireLoopback refuses an API server that is not on a loopback address: the agent runs
// every pod bound to its Node as a local process without isolation, so it must never join a
// real cluster, only a local control plane.
func requireLoopback(host string) error {
	raw := host
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err == nil && u.Hostname() != "" && image.LoopbackRegistry(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("RESTConfig.Host %q is not on a loopback address (localhost, 127.0.0.0/8, ::1): the node agent runs pods as local processes without isolation and serves local control planes only", host)
}

// setDefaults fills in the unset fields that have a fixed default.
func (cfg *Config) setDefaults() {
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if cfg.PodSelector == "" {
		cfg.PodSelector = DefaultPodSelector
	}
	if cfg.Capacity == nil {
		cfg.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("4"),
			corev1.ResourceMemory:           resource.MustParse("8Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
			corev1.ResourcePods:             resource.MustParse("110"),
		}
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if cfg.TokenExpiration == 0 {
		cfg.TokenExpiration = DefaultTokenExpiration
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.NodeStatusInterval <= 0 {
		cfg.NodeStatusInterval = DefaultNodeStatusInterval
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.MaxRestartBackoff <= 0 {
		cfg.MaxRestartBackoff = DefaultMaxRestartBackoff
	}
	if cfg.MaxImagePullBackoff <= 0 {
		cfg.MaxImagePullBackoff = DefaultMaxImagePullBackoff
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
}

// absWorkDir makes the required WorkDir absolute.
func (cfg *Config) absWorkDir() error {
	if cfg.WorkDir == "" {
		return errors.New("WorkDir is required")
	}
	abs, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return fmt.Errorf("WorkDir: %w", err)
	}
	cfg.WorkDir = abs
	return nil
}

// normalizeImages returns the images that normalize, and why each of the others does not.
func normalizeImages(images map[string]Image) (map[string]Image, []error) {
	normalized := make(map[string]Image, len(images))
	var errs []error
	for _, ref := range sortedKeys(images) {
		img, err := normalizeImage(ref, images[ref])
		if err != nil {
			errs = append(errs, fmt.Errorf("Images: %w", err))
			continue
		}
		normalized[ref] = img
	}
	return normalized, errs
}

// defaultAPIServer takes APIServerURL and APIServerCA from RESTConfig where they are unset.
func (cfg *Config) defaultAPIServer() error {
	if cfg.RESTConfig == nil {
		return nil
	}
	if cfg.APIServerURL == "" {
		cfg.APIServerURL = cfg.RESTConfig.Host
	}
	if len(cfg.APIServerCA) > 0 {
		return nil
	}
	switch {
	case len(cfg.RESTConfig.CAData) > 0:
		cfg.APIServerCA = cfg.RESTConfig.CAData
	case cfg.RESTConfig.CAFile != "":
		data, err := os.ReadFile(cfg.RESTConfig.CAFile)
		cfg.APIServerCA = data
		if err != nil {
			return fmt.Errorf("reading the API server CA: %w", err)
		}
	}
	return nil
}

// sortedKeys returns the keys of m in order, for output that does not depend on map order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
