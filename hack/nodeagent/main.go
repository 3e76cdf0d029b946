// Command nodeagent runs the local node agent (test/nodeagent) as a process, for development
// against a local control plane: it registers a Node, binds captf's Job pods to it and runs
// their containers as local processes. Never use it on a real cluster. Ctrl-C (SIGINT or
// SIGTERM) stops it and every process it started. See docs/nodeagent.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/yaml"

	"github.com/captf/captf/test/nodeagent"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %v\n", err)
		os.Exit(1)
	}
}

// imageFlags collects repeated --image flags.
type imageFlags map[string]nodeagent.Image

func (f imageFlags) String() string { return "" }

func (f imageFlags) Set(v string) error {
	ref, img, err := parseImage(v)
	if err != nil {
		return err
	}
	f[ref] = img
	return nil
}

// parseImage reads REF,IMAGE_PATH=LOCAL_PATH[,IMAGE_PATH=LOCAL_PATH...]. Local paths are made
// absolute against the working directory.
func parseImage(v string) (string, nodeagent.Image, error) {
	parts := strings.Split(v, ",")
	ref := strings.TrimSpace(parts[0])
	if ref == "" || len(parts) < 2 {
		return "", nodeagent.Image{}, fmt.Errorf("--image %q: want REF,IMAGE_PATH=LOCAL_PATH[,...]", v)
	}
	img := nodeagent.Image{Paths: map[string]string{}}
	for _, p := range parts[1:] {
		in, local, ok := strings.Cut(p, "=")
		if !ok || !strings.HasPrefix(in, "/") || local == "" {
			return "", nodeagent.Image{}, fmt.Errorf("--image %q: %q is not IMAGE_PATH=LOCAL_PATH with an absolute IMAGE_PATH", v, p)
		}
		abs, err := filepath.Abs(local)
		if err != nil {
			return "", nodeagent.Image{}, err
		}
		img.Paths[in] = abs
	}
	return ref, img, nil
}

// loadImages reads an image map file (YAML or JSON): image reference → {paths, command}. Local
// paths are relative to the file's directory.
func loadImages(path string, into map[string]nodeagent.Image) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var images map[string]nodeagent.Image
	if err := yaml.UnmarshalStrict(data, &images); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	base := filepath.Dir(path)
	for ref, img := range images {
		for in, local := range img.Paths {
			if !filepath.IsAbs(local) {
				img.Paths[in] = filepath.Join(base, local)
			}
		}
		into[ref] = img
	}
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("nodeagent", flag.ContinueOnError)
	images := imageFlags{}
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the agent (default: $KUBECONFIG, then ~/.kube/config)")
	nodeName := fs.String("node-name", nodeagent.DefaultNodeName, "name of the Node to register")
	selector := fs.String("selector", nodeagent.DefaultPodSelector, "label selector of the unscheduled pods to bind")
	workDir := fs.String("workdir", filepath.Join(".local", "nodeagent"), "directory of the pods' volumes and logs")
	imagesFile := fs.String("images", "", "image map file (YAML or JSON): REF: {paths: {IMAGE_PATH: LOCAL_PATH}, command: [...]}")
	fs.Var(images, "image", "an image as REF,IMAGE_PATH=LOCAL_PATH[,...]; repeatable, after --images")
	server := fs.String("server", "", "API server URL in the pods' kubeconfigs (default: the agent's)")
	caFile := fs.String("ca-file", "", "CA bundle in the pods' kubeconfigs (default: the agent's)")
	rewriteFiles := fs.Bool("rewrite-volume-files", true, "rewrite container paths inside Secret, ConfigMap and projected volume files")
	tokenExpiration := fs.Duration("token-expiration", nodeagent.DefaultTokenExpiration, "lifetime of the pods' ServiceAccount tokens")
	verbosity := fs.Int("v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	all := map[string]nodeagent.Image{}
	if *imagesFile != "" {
		if err := loadImages(*imagesFile, all); err != nil {
			return err
		}
	}
	for ref, img := range images {
		all[ref] = img
	}
	if len(all) == 0 {
		return errors.New("no images: give --images or --image, or every pod waits with ErrImagePull")
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg := nodeagent.Config{
		RESTConfig:         restConfig,
		NodeName:           *nodeName,
		PodSelector:        *selector,
		WorkDir:            *workDir,
		Images:             all,
		APIServerURL:       *server,
		RewriteVolumeFiles: *rewriteFiles,
		TokenExpiration:    *tokenExpiration,
		Log:                textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity))),
	}
	if *caFile != "" {
		if cfg.APIServerCA, err = os.ReadFile(*caFile); err != nil {
			return err
		}
	}
	if data, err := json.Marshal(all); err == nil {
		cfg.Log.V(1).Info("images", "map", string(data))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return nodeagent.Run(ctx, cfg)
}
