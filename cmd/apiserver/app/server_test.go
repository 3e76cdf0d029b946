package app

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/captf/captf/apis/runs/v1alpha1"
)

func TestOptionsAreThoseOfAServerWithoutEtcd(t *testing.T) {
	cmd := NewCommand(t.Context())
	flags := cmd.Flags()
	for _, name := range []string{"secure-port", "tls-cert-file", "kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig", "audit-log-path"} {
		if flags.Lookup(name) == nil {
			t.Errorf("flag --%s is missing", name)
		}
	}
	for _, name := range []string{"etcd-servers", "admission-control-config-file"} {
		if flags.Lookup(name) != nil {
			t.Errorf("flag --%s is there; the server stores nothing and admits nothing", name)
		}
	}
	o := NewOptions()
	if o.Recommended.Etcd != nil || o.Recommended.Admission != nil || o.Recommended.Features.EnablePriorityAndFairness {
		t.Errorf("options = %+v", o.Recommended)
	}
}

func TestSchemeServesTheRunsGroup(t *testing.T) {
	for _, kind := range []string{"Run", "RunList", "Plan", "PlanList", "PlanApproval"} {
		if !Scheme.Recognizes(schemaGV.WithKind(kind)) {
			t.Errorf("the scheme does not know runs.captf.io/v1alpha1 %s", kind)
		}
	}
	if got := Scheme.PrioritizedVersionsForGroup("runs.captf.io"); len(got) != 1 || got[0] != schemaGV {
		t.Errorf("versions of runs.captf.io = %v", got)
	}
}

var schemaGV = v1alpha1.SchemeGroupVersion

// The self-managed certificate's flags: each rule a row.
func TestServingCertFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		valid bool
	}{
		{"files only", []string{"--tls-cert-file=/c", "--tls-private-key-file=/k"}, true},
		{"a Secret only", []string{"--serving-cert-secret=captf-apiserver-tls"}, true},
		{"a Secret and files exclude each other", []string{"--serving-cert-secret=s", "--tls-cert-file=/c", "--tls-private-key-file=/k"}, false},
		{"a validity under a minute", []string{"--serving-cert-secret=s", "--serving-cert-validity=30s"}, false},
		{"no APIService to write to", []string{"--serving-cert-secret=s", "--serving-cert-apiservice="}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
			o.Recommended.SecureServing.AddFlags(flags)
			o.ServingCert.AddFlags(flags)
			if err := flags.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if errs := o.ServingCert.Validate(o.Recommended.SecureServing); (len(errs) == 0) != tc.valid {
				t.Errorf("Validate = %v, want valid %v", errs, tc.valid)
			}
		})
	}
}

// $KUBECONFIG fills the kubeconfig flags left unset, as kubectl and controller-runtime read it;
// a flag given wins.
func TestKubeconfigFromEnvironment(t *testing.T) {
	t.Setenv("KUBECONFIG", "/env/kubeconfig")
	o := NewOptions()
	o.Recommended.Authorization.RemoteKubeConfigFile = "/flag/kubeconfig"
	o.kubeconfigFromEnvironment()
	if got := o.Recommended.CoreAPI.CoreAPIKubeconfigPath; got != "/env/kubeconfig" {
		t.Errorf("--kubeconfig = %q", got)
	}
	if got := o.Recommended.Authentication.RemoteKubeConfigFile; got != "/env/kubeconfig" {
		t.Errorf("--authentication-kubeconfig = %q", got)
	}
	if got := o.Recommended.Authorization.RemoteKubeConfigFile; got != "/flag/kubeconfig" {
		t.Errorf("--authorization-kubeconfig = %q, want the flag's", got)
	}
}

// The run key's Secret: each rule a row.
func TestRunKeySecret(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		podNamespace  string
		wantSecret    string
		wantNamespace string
		wantErr       bool
		// wantNoNamespace: the Secret's namespace cannot be told, so the server does not start.
		wantNoNamespace bool
	}{
		{name: "the controller's Secret by default, in the pod's namespace", podNamespace: "captf-system", wantSecret: "captf-run-key", wantNamespace: "captf-system"},
		{name: "the flag names another Secret", args: []string{"--run-key-secret=other"}, podNamespace: "captf-system", wantSecret: "other", wantNamespace: "captf-system"},
		{name: "the serving certificate's namespace is the server's", args: []string{"--serving-cert-namespace=ops"}, podNamespace: "captf-system", wantSecret: "captf-run-key", wantNamespace: "ops"},
		{name: "an empty name is invalid", args: []string{"--run-key-secret="}, podNamespace: "captf-system", wantErr: true},
		{name: "outside a pod, without a namespace, the server does not start", wantNoNamespace: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.podNamespace)
			o := NewOptions()
			flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
			o.AddFlags(flags)
			if err := flags.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); (err != nil) != tc.wantErr {
				t.Fatalf("Validate = %v, want an error: %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			namespace, err := o.runKeyNamespace()
			if (err != nil) != tc.wantNoNamespace {
				t.Fatalf("the namespace: %q, %v", namespace, err)
			}
			if tc.wantNoNamespace {
				return
			}
			if o.RunKeySecret != tc.wantSecret || namespace != tc.wantNamespace {
				t.Errorf("run key Secret %s/%s, want %s/%s", namespace, o.RunKeySecret, tc.wantNamespace, tc.wantSecret)
			}
		})
	}
}
