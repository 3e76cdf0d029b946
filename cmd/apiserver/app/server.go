// Package app wires the captf aggregated API server in the sample-apiserver style:
// Options → Config → Complete → New → Run.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/compatibility"
	"k8s.io/klog/v2"

	"github.com/captf/captf/apis/runs/install"
	"github.com/captf/captf/apis/runs/openapi"
	"github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/registry"
)

// Scheme and Codecs of the server: the runs.captf.io API and the unversioned meta types.
var (
	Scheme = runtime.NewScheme()
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	install.Install(Scheme)
	// The server answers unversioned meta requests (Status, options) for every group.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{},
	)
}

// Options are the command-line options of the server: the recommended options of an aggregated
// server (secure serving, delegated authentication and authorization, audit, features, the
// kubeconfig of the cluster it reads) without etcd, since every resource it serves is computed
// from Jobs and the objects they run for.
type Options struct {
	// Recommended are the generic server options.
	Recommended *genericoptions.RecommendedOptions
}

// NewOptions returns the default options.
func NewOptions() *Options {
	o := &Options{Recommended: genericoptions.NewRecommendedOptions("", Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion))}
	o.Recommended.Etcd = nil
	// Nothing is stored, so there is nothing for admission plugins to guard; approvals are
	// checked by delegated authorization and the run model.
	o.Recommended.Admission = nil
	// kube-apiserver applies priority and fairness before it proxies to this server; doing it
	// again would only add the flowcontrol objects to this server's RBAC.
	o.Recommended.Features.EnablePriorityAndFairness = false
	return o
}

// Validate checks the options.
func (o *Options) Validate() error {
	return utilerrors.NewAggregate(o.Recommended.Validate())
}

// Config is the configuration of a server.
type Config struct {
	// Generic is the generic server configuration.
	Generic *genericapiserver.RecommendedConfig
}

// Config builds the server configuration from the options.
func (o *Options) Config() (*Config, error) {
	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}
	generic := genericapiserver.NewRecommendedConfig(Codecs)
	generic.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.37", "", "")
	namer := openapinamer.NewDefinitionNamer(Scheme)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIConfig.Info.Title = "captf runs"
	generic.OpenAPIConfig.Info.Version = v1alpha1.SchemeGroupVersion.Version
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIV3Config.Info.Title = "captf runs"
	generic.OpenAPIV3Config.Info.Version = v1alpha1.SchemeGroupVersion.Version
	if err := o.Recommended.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("applying options: %w", err)
	}
	if generic.ClientConfig == nil {
		return nil, errors.New("no client configuration for the cluster: set --kubeconfig or run in a cluster")
	}
	return &Config{Generic: generic}, nil
}

// CompletedConfig is a Config whose defaults are filled in; only it can build a server.
type CompletedConfig struct {
	generic      genericapiserver.CompletedConfig
	clientConfig *restclient.Config
}

// Complete fills in the defaults of the configuration.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.Generic.Complete(), clientConfig: c.Generic.ClientConfig}
}

// Server is the captf aggregated API server.
type Server struct {
	// Generic is the generic API server that serves runs.captf.io.
	Generic *genericapiserver.GenericAPIServer
	// Source is the cache the resources are computed from.
	Source *registry.Source
}

// New builds the server: the Source over a watch of the managed Jobs and informers of the
// objects they run for, the runs.captf.io group (runs, plans, plans/approval), a post-start
// hook that starts them, and a readyz check that passes once they have synced.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("captf-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("building the generic server: %w", err)
	}
	clientConfig := c.clientConfig
	kube, err := kubernetes.NewForConfig(clientConfig)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	infra, err := registry.NewInfrastructureClient(clientConfig)
	if err != nil {
		return nil, err
	}
	src, err := registry.NewSource(kube, infra)
	if err != nil {
		return nil, err
	}
	info := registry.NewAPIGroupInfo(Scheme, Codecs, src, registry.NewObjects(infra), registry.NewJobs(kube))
	if err := generic.InstallAPIGroup(&info); err != nil {
		return nil, fmt.Errorf("installing runs.captf.io: %w", err)
	}
	if err := generic.AddPostStartHook("start-captf-informers", func(ctx genericapiserver.PostStartHookContext) error {
		go func() {
			if err := src.Run(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "The Job and object caches did not sync")
			}
		}()
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding the informer hook: %w", err)
	}
	if err := generic.AddReadyzChecks(healthz.NamedCheck("captf-caches-synced", func(*http.Request) error {
		if !src.Synced() {
			return errors.New("the Job and object caches have not synced yet")
		}
		return nil
	})); err != nil {
		return nil, fmt.Errorf("adding the readyz check: %w", err)
	}
	return &Server{Generic: generic, Source: src}, nil
}

// Run serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	return s.Generic.PrepareRun().RunWithContext(ctx)
}

// NewCommand returns the apiserver command.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "The captf aggregated API server: runs, plans and plan approval (runs.captf.io).",
		Long: "The captf aggregated API server serves the read-only runs and plans of runs.captf.io,\n" +
			"computed from the retained Jobs of TerraformCluster, TerraformMachine and TerraformMachinePool,\n" +
			"and the plans/approval subresource. It stores nothing and is registered by an APIService.",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			config, err := o.Config()
			if err != nil {
				return err
			}
			server, err := config.Complete().New()
			if err != nil {
				return err
			}
			return server.Run(ctx)
		},
	}
	flags := cmd.Flags()
	o.Recommended.AddFlags(flags)
	globalflag.AddGlobalFlags(flags, cmd.Name())
	return cmd
}
