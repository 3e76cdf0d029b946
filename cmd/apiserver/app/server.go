// Package app wires the captf aggregated API server: Options → Config → Complete → New → Run.
package app

import (
	"context"
	"fmt"
	"net"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/component-base/compatibility"
)

// Scheme and Codecs of the server; the runs API registers itself here.
var (
	Scheme = runtime.NewScheme()
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	// The server answers unversioned meta requests (Status, options) for every group.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{},
	)
}

// Options are the command-line options of the server: the recommended options of an aggregated
// server without etcd, since every resource it serves is computed from other objects.
type Options struct {
	Recommended *genericoptions.RecommendedOptions
}

// NewOptions returns the default options.
func NewOptions() *Options {
	o := &Options{Recommended: genericoptions.NewRecommendedOptions("", Codecs.LegacyCodec())}
	o.Recommended.Etcd = nil
	// Nothing here is stored, so there is nothing for admission plugins to guard.
	o.Recommended.Admission = nil
	return o
}

// Validate checks the options.
func (o *Options) Validate() error {
	if errs := o.Recommended.Validate(); len(errs) > 0 {
		return fmt.Errorf("invalid options: %v", errs)
	}
	return nil
}

// Config is the configuration of a server.
type Config struct {
	Generic *genericapiserver.RecommendedConfig
}

// Config builds the server configuration from the options.
func (o *Options) Config() (*Config, error) {
	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}
	generic := genericapiserver.NewRecommendedConfig(Codecs)
	generic.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.37", "", "")
	if err := o.Recommended.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("applying options: %w", err)
	}
	return &Config{Generic: generic}, nil
}

// CompletedConfig is a Config whose defaults are filled in.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
}

// Complete fills in the defaults of the configuration.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.Generic.Complete()}
}

// Server is the captf aggregated API server.
type Server struct {
	Generic *genericapiserver.GenericAPIServer
}

// New builds the server.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("captf-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("building the generic server: %w", err)
	}
	return &Server{Generic: generic}, nil
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
	o.Recommended.AddFlags(cmd.Flags())
	return cmd
}
