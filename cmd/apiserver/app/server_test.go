package app

import (
	"testing"

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
