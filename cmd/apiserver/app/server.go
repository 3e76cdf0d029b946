// Package app wires the captf aggregated API server in the sample-apiserver style:
// Options → Config → Complete → New → Run.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/compatibility"
	"k8s.io/klog/v2"

	"github.com/captf/captf/apis/runs/install"
	"github.com/captf/captf/apis/runs/openapi"
	"github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/registry"
	"github.com/captf/captf/registry/servingcert"
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
	// ServingCert, when its Secret is named, has the server keep its own serving certificate
	// instead of reading --tls-cert-file.
	ServingCert ServingCertOptions
	// RunKeySecret names the Secret of the server's namespace that holds the controller's run
	// key, against which plans are verified.
	RunKeySecret string
}

// ServingCertOptions configure the self-managed serving certificate: kept in a Secret, renewed
// before it expires, its CA written into the APIService's caBundle.
type ServingCertOptions struct {
	SecretName string
	Namespace  string
	Service    string
	APIService string
	Validity   time.Duration
}

// AddFlags adds the self-managed certificate's flags.
func (o *ServingCertOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SecretName, "serving-cert-secret", o.SecretName, "Keep the serving certificate in this Secret (created on first start, renewed with a third of its life left) and write its CA into the APIService's caBundle. Excludes --tls-cert-file.")
	fs.StringVar(&o.Namespace, "serving-cert-namespace", o.Namespace, "Namespace of --serving-cert-secret and of the Service the certificate is for (default: $POD_NAMESPACE, else the pod's namespace).")
	fs.StringVar(&o.Service, "serving-cert-service", o.Service, "The Service the aggregator reaches the server through; the certificate is for <service>.<namespace>.svc.")
	fs.StringVar(&o.APIService, "serving-cert-apiservice", o.APIService, "The APIService whose caBundle gets the certificate's CA.")
	fs.DurationVar(&o.Validity, "serving-cert-validity", o.Validity, "Lifetime of the serving certificate; its CA lives ten times as long.")
}

// Validate checks the self-managed certificate's flags.
func (o *ServingCertOptions) Validate(serving *genericoptions.SecureServingOptionsWithLoopback) []error {
	if o.SecretName == "" {
		return nil
	}
	var errs []error
	if serving.ServerCert.CertKey.CertFile != "" || serving.ServerCert.CertKey.KeyFile != "" {
		errs = append(errs, errors.New("--serving-cert-secret and --tls-cert-file/--tls-private-key-file exclude each other"))
	}
	if o.Service == "" || o.APIService == "" {
		errs = append(errs, errors.New("--serving-cert-secret needs --serving-cert-service and --serving-cert-apiservice"))
	}
	if o.Validity < time.Minute {
		errs = append(errs, fmt.Errorf("--serving-cert-validity %s is shorter than a minute", o.Validity))
	}
	return errs
}

func (o *ServingCertOptions) namespace() (string, error) {
	if o.Namespace != "" {
		return o.Namespace, nil
	}
	return servingcert.PodNamespace()
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
	o.ServingCert = ServingCertOptions{Service: "captf-apiserver", APIService: v1alpha1.SchemeGroupVersion.Version + "." + v1alpha1.SchemeGroupVersion.Group, Validity: 365 * 24 * time.Hour}
	o.RunKeySecret = registry.RunKeySecret
	return o
}

// AddFlags adds the server's flags: the generic ones, the self-managed certificate's and the
// run key's.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Recommended.AddFlags(fs)
	o.ServingCert.AddFlags(fs)
	fs.StringVar(&o.RunKeySecret, "run-key-secret", o.RunKeySecret, "The Secret of the server's namespace (--serving-cert-namespace, else $POD_NAMESPACE, else the pod's namespace) that holds the controller's run key (data key \"key\"). Plans are verified against the controller's signatures with it; until it exists every plan is Unverified and none can be approved.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	errs := append(o.Recommended.Validate(), o.ServingCert.Validate(o.Recommended.SecureServing)...)
	if o.RunKeySecret == "" {
		errs = append(errs, errors.New("--run-key-secret is empty: without the run key no plan can be verified or approved"))
	}
	return utilerrors.NewAggregate(errs)
}

// runKeyNamespace is the namespace of the run key Secret: the server's own, found as the
// self-managed certificate's is, since the install runs the controller, which keeps the key, in
// the same namespace.
func (o *Options) runKeyNamespace() (string, error) {
	namespace, err := o.ServingCert.namespace()
	if err != nil {
		return "", fmt.Errorf("the namespace of the run key Secret %s: %w", o.RunKeySecret, err)
	}
	return namespace, nil
}

// Config is the configuration of a server.
type Config struct {
	// Generic is the generic server configuration.
	Generic *genericapiserver.RecommendedConfig
	// ServingCert keeps the serving certificate when it is self-managed; nil otherwise.
	ServingCert *servingcert.Manager
	// RunKeyNamespace and RunKeySecret locate the controller's run key.
	RunKeyNamespace, RunKeySecret string
}

// Config builds the server configuration from the options.
func (o *Options) Config() (*Config, error) {
	selfManaged := o.ServingCert.SecretName != ""
	if !selfManaged {
		if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
			return nil, fmt.Errorf("creating self-signed certificates: %w", err)
		}
	}
	o.kubeconfigFromEnvironment()
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
	namespace, err := o.runKeyNamespace()
	if err != nil {
		return nil, err
	}
	config := &Config{Generic: generic, RunKeyNamespace: namespace, RunKeySecret: o.RunKeySecret}
	if selfManaged {
		m, err := o.ServingCert.manager(generic.ClientConfig)
		if err != nil {
			return nil, err
		}
		generic.SecureServing.Cert = m.CertKeyContentProvider()
		config.ServingCert = m
	}
	return config, nil
}

// kubeconfigFromEnvironment takes $KUBECONFIG, as kubectl and controller-runtime do, for the
// kubeconfig flags left unset; without it they mean in-cluster configuration.
func (o *Options) kubeconfigFromEnvironment() {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return
	}
	if o.Recommended.CoreAPI != nil && o.Recommended.CoreAPI.CoreAPIKubeconfigPath == "" {
		o.Recommended.CoreAPI.CoreAPIKubeconfigPath = path
	}
	if o.Recommended.Authentication != nil && o.Recommended.Authentication.RemoteKubeConfigFile == "" {
		o.Recommended.Authentication.RemoteKubeConfigFile = path
	}
	if o.Recommended.Authorization != nil && o.Recommended.Authorization.RemoteKubeConfigFile == "" {
		o.Recommended.Authorization.RemoteKubeConfigFile = path
	}
}

func (o *ServingCertOptions) manager(clientConfig *restclient.Config) (*servingcert.Manager, error) {
	namespace, err := o.namespace()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(clientConfig)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(clientConfig)
	if err != nil {
		return nil, err
	}
	return servingcert.NewManager(servingcert.Config{
		Namespace: namespace, SecretName: o.SecretName,
		DNSNames:    servingcert.DNSNames(o.Service, namespace),
		Validity:    o.Validity,
		APIServices: []string{o.APIService},
		ManagedBy:   "captf-apiserver",
	}, kube, dyn, klog.Background().WithName("serving-cert"))
}

// CompletedConfig is a Config whose defaults are filled in; only it can build a server.
type CompletedConfig struct {
	generic                       genericapiserver.CompletedConfig
	clientConfig                  *restclient.Config
	servingCert                   *servingcert.Manager
	runKeyNamespace, runKeySecret string
}

// Complete fills in the defaults of the configuration.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{
		generic: c.Generic.Complete(), clientConfig: c.Generic.ClientConfig, servingCert: c.ServingCert,
		runKeyNamespace: c.RunKeyNamespace, runKeySecret: c.RunKeySecret,
	}
}

// Server is the captf aggregated API server.
type Server struct {
	// Generic is the generic API server that serves runs.captf.io.
	Generic *genericapiserver.GenericAPIServer
	// Source is the cache the resources are computed from.
	Source *registry.Source
	// servingCert keeps a self-managed serving certificate; nil otherwise.
	servingCert *servingcert.Manager
}

// New builds the server: the Source over a watch of the managed Jobs and informers of the
// objects they run for, the runs.captf.io group (runs, plans, plans/approval), a post-start
// hook that starts them and looks for the run key, and a readyz check that passes once they
// have synced (the run key is not waited for: plans are Unverified until it is known).
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
	runKeys := registry.NewSecretRunKeys(kube.CoreV1(), c.runKeyNamespace, c.runKeySecret)
	if err := generic.AddPostStartHook("start-captf-informers", func(ctx genericapiserver.PostStartHookContext) error {
		go func() {
			if err := src.Run(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "The Job and object caches did not sync")
			}
		}()
		go src.LoadRunKey(klog.NewContext(ctx, klog.FromContext(ctx).WithValues("secret", klog.KRef(c.runKeyNamespace, c.runKeySecret))), runKeys, registry.RunKeyPollInterval)
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
	return &Server{Generic: generic, Source: src, servingCert: c.servingCert}, nil
}

// Run serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	if s.servingCert != nil {
		// Listen only with a certificate the APIService already trusts.
		if err := s.servingCert.Start(ctx); err != nil {
			return err
		}
	}
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
	o.AddFlags(flags)
	globalflag.AddGlobalFlags(flags, cmd.Name())
	return cmd
}
