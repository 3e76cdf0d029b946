package e2e

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/webhooks"
	"github.com/captf/captf/test/system"
)

// A template's spec.template.spec stays as created, through the controller's webhook as the
// shipped configuration registers it; its metadata may change, and Cluster API's topology dry
// runs pass.
func TestATemplatesSpecIsImmutableExceptForTopologyDryRuns(t *testing.T) {
	s := newSuite(t)
	tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "md-0", Namespace: s.NS}}
	tmpl.Spec.Template.Spec.Source.Image = system.SampleNoopImage
	if err := s.C.Create(s.Ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	update := func(mutate func(*infrav1.TerraformMachineTemplate), opts ...client.UpdateOption) error {
		var current infrav1.TerraformMachineTemplate
		if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(tmpl), &current); err != nil {
			t.Fatal(err)
		}
		mutate(&current)
		return s.C.Update(s.Ctx, &current, opts...)
	}
	newImage := func(m *infrav1.TerraformMachineTemplate) {
		m.Spec.Template.Spec.Source.Image = "ghcr.io/captf/captf-sample-noop:v2"
	}
	for _, tc := range []struct {
		rule    string
		mutate  func(*infrav1.TerraformMachineTemplate)
		opts    []client.UpdateOption
		refused bool
	}{
		{"a changed spec is refused with its field path", newImage, nil, true},
		{"a dry run of a changed spec is refused too", newImage, []client.UpdateOption{client.DryRunAll}, true},
		{"Cluster API's topology dry run of a changed spec passes", func(m *infrav1.TerraformMachineTemplate) {
			newImage(m)
			metav1.SetMetaDataAnnotation(&m.ObjectMeta, webhooks.DryRunAnnotation, "")
		}, []client.UpdateOption{client.DryRunAll}, false},
		{"the metadata may change", func(m *infrav1.TerraformMachineTemplate) {
			m.Labels = map[string]string{"team": "web"}
		}, nil, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			err := update(tc.mutate, tc.opts...)
			switch {
			case tc.refused && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.spec")):
				t.Fatalf("update = %v, want Invalid naming spec.template.spec", err)
			case !tc.refused && err != nil:
				t.Fatalf("update = %v, want it accepted", err)
			}
		})
	}
	var stored infrav1.TerraformMachineTemplate
	if err := s.C.Get(s.Ctx, client.ObjectKeyFromObject(tmpl), &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Spec.Template.Spec.Source.Image != system.SampleNoopImage {
		t.Fatalf("the stored spec changed: %+v", stored.Spec.Template.Spec.Source)
	}
}
