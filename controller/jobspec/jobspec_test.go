package jobspec

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

func params() Params {
	return Params{
		Kind: jobs.KindCluster, Namespace: "ns", ObjectName: "web", ClusterName: "prod",
		Owner: metav1.OwnerReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformCluster", Name: "web", UID: "u1", Controller: ptr.To(true)},
		Name:  "captf-c-web-apply-a1-abcdef", Op: jobs.OpApply, Attempt: 1, InputsHash: "h1:x",
		Source:      infrav1.SourceSpec{Image: "modules/net:v1"},
		RunnerImage: "captf/manager:dev", StateSuffix: "0123456789abcdef-c",
	}
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		change func(*Params)
		check  func(*testing.T, *batchv1.Job)
	}{
		{"a failed pod is a failed Job", nil, func(t *testing.T, j *batchv1.Job) {
			if *j.Spec.BackoffLimit != 0 {
				t.Errorf("backoffLimit = %d", *j.Spec.BackoffLimit)
			}
		}},
		{"the deadline defaults to 3600 seconds", nil, func(t *testing.T, j *batchv1.Job) {
			if *j.Spec.ActiveDeadlineSeconds != 3600 {
				t.Errorf("activeDeadlineSeconds = %d", *j.Spec.ActiveDeadlineSeconds)
			}
		}},
		{"the deadline comes from the policy", func(p *Params) { p.Policy.ActiveDeadlineSeconds = ptr.To[int64](120) }, func(t *testing.T, j *batchv1.Job) {
			if *j.Spec.ActiveDeadlineSeconds != 120 {
				t.Errorf("activeDeadlineSeconds = %d", *j.Spec.ActiveDeadlineSeconds)
			}
		}},
		{"finished Jobs have no TTL", nil, func(t *testing.T, j *batchv1.Job) {
			if j.Spec.TTLSecondsAfterFinished != nil {
				t.Error("ttlSecondsAfterFinished is set")
			}
		}},
		{"pods never restart and get 600 seconds to stop", nil, func(t *testing.T, j *batchv1.Job) {
			s := j.Spec.Template.Spec
			if s.RestartPolicy != corev1.RestartPolicyNever || *s.TerminationGracePeriodSeconds != 600 {
				t.Errorf("restartPolicy %s grace %d", s.RestartPolicy, *s.TerminationGracePeriodSeconds)
			}
		}},
		{"the Job and its pods carry the run model's labels", nil, func(t *testing.T, j *batchv1.Job) {
			want := jobs.Labels(jobs.KindCluster, "web", "prod", jobs.OpApply, 1)
			for k, v := range want {
				if j.Labels[k] != v || j.Spec.Template.Labels[k] != v {
					t.Errorf("label %s = %q / %q, want %q", k, j.Labels[k], j.Spec.Template.Labels[k], v)
				}
			}
		}},
		{"the object is the Job's controller owner", nil, func(t *testing.T, j *batchv1.Job) {
			if len(j.OwnerReferences) != 1 || !*j.OwnerReferences[0].Controller || j.OwnerReferences[0].UID != "u1" {
				t.Errorf("ownerReferences = %v", j.OwnerReferences)
			}
		}},
		{"an apply records its inputs hash", nil, func(t *testing.T, j *batchv1.Job) {
			if j.Annotations[jobs.AnnotationInputsHash] != "h1:x" {
				t.Errorf("annotations = %v", j.Annotations)
			}
		}},
		{"a drift check records no inputs hash", func(p *Params) { p.Op = jobs.OpDrift }, func(t *testing.T, j *batchv1.Job) {
			if _, ok := j.Annotations[jobs.AnnotationInputsHash]; ok {
				t.Errorf("annotations = %v", j.Annotations)
			}
		}},
		{"the pod mounts its per-run Secret read-only", nil, func(t *testing.T, j *batchv1.Job) {
			var found bool
			for _, v := range j.Spec.Template.Spec.Volumes {
				if v.Name == "config" && v.Secret != nil && v.Secret.SecretName == "captf-run-captf-c-web-apply-a1-abcdef" {
					found = true
				}
			}
			if !found {
				t.Error("no config volume from the per-run Secret")
			}
		}},
		{"the plan key is mounted only when asked", nil, func(t *testing.T, j *batchv1.Job) {
			for _, v := range j.Spec.Template.Spec.Volumes {
				if v.Name == "plan-key" {
					t.Error("plan key mounted")
				}
			}
			if slices.ContainsFunc(j.Spec.Template.Spec.Containers[0].Command, func(a string) bool { return strings.HasPrefix(a, "--plan-key-file") }) {
				t.Error("plan key flag passed")
			}
		}},
		{"a plan Job mounts the plan key read-only with mode 0440", func(p *Params) { p.Op, p.PlanKeySecret = jobs.OpPlan, "captf-plankey-c-web" }, func(t *testing.T, j *batchv1.Job) {
			var ok bool
			for _, v := range j.Spec.Template.Spec.Volumes {
				ok = ok || v.Name == "plan-key" && v.Secret.SecretName == "captf-plankey-c-web" && *v.Secret.DefaultMode == 0o440
			}
			if !ok || !slices.Contains(j.Spec.Template.Spec.Containers[0].Command, "--plan-key-file="+PlanKeyFile) {
				t.Errorf("plan key not mounted: %v", j.Spec.Template.Spec.Volumes)
			}
		}},
		{"the runner gets the op, the state suffix, the state Secret's owner labels and the lock timeout", nil, func(t *testing.T, j *batchv1.Job) {
			cmd := j.Spec.Template.Spec.Containers[0].Command
			labels := `--backend-config=labels={"captf.infrastructure.cluster.x-k8s.io/owner-kind":"TerraformCluster","captf.infrastructure.cluster.x-k8s.io/owner-name":"web","captf.io/managed":"true","cluster.x-k8s.io/cluster-name":"prod","clusterctl.cluster.x-k8s.io/move":""}`
			for _, want := range []string{RunnerPath, "run", "--op=apply", "--backend-config=secret_suffix=0123456789abcdef-c", "--backend-config=namespace=ns", labels, "--lock-timeout=300s", "--stop-timeout=570s"} {
				if !slices.Contains(cmd, want) {
					t.Errorf("command %v lacks %s", cmd, want)
				}
			}
		}},
		{"the init container copies the runner from the runner image", nil, func(t *testing.T, j *batchv1.Job) {
			init := j.Spec.Template.Spec.InitContainers[0]
			if init.Image != "captf/manager:dev" || !slices.Equal(init.Command, []string{"/runner", "copy", RunnerPath}) {
				t.Errorf("init container = %+v", init)
			}
		}},
		{"TF_ and KUBE_ variables of the policy are dropped", func(p *Params) {
			p.Policy.Env = []corev1.EnvVar{{Name: "TF_LOG", Value: "TRACE"}, {Name: "KUBE_TOKEN", Value: "x"}, {Name: "HOME", Value: "/"}, {Name: "REGION", Value: "eu"}}
		}, func(t *testing.T, j *batchv1.Job) {
			env := map[string]string{}
			for _, e := range j.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if _, ok := env["TF_LOG"]; ok || env["HOME"] != WorkDir || env["REGION"] != "eu" || env["KUBE_TOKEN"] != "" || env["TF_IN_AUTOMATION"] != "1" {
				t.Errorf("env = %v", env)
			}
		}},
		{"the result is read from the termination message file", nil, func(t *testing.T, j *batchv1.Job) {
			c := j.Spec.Template.Spec.Containers[0]
			if c.TerminationMessagePolicy != corev1.TerminationMessageReadFile || c.TerminationMessagePath != TerminationMessagePath {
				t.Errorf("termination message = %s %s", c.TerminationMessagePolicy, c.TerminationMessagePath)
			}
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			p := params()
			if tc.change != nil {
				tc.change(&p)
			}
			tc.check(t, Build(p))
		})
	}
}

func TestDroppedEnv(t *testing.T) {
	got := DroppedEnv(infrav1.JobPolicy{Env: []corev1.EnvVar{{Name: "TF_LOG"}, {Name: "A"}, {Name: "KUBERNETES_SERVICE_HOST"}}})
	if !slices.Equal(got, []string{"TF_LOG", "KUBERNETES_SERVICE_HOST"}) {
		t.Fatalf("DroppedEnv = %v", got)
	}
}

func TestResourcesReplaceTheDefaultWhole(t *testing.T) {
	p := params()
	p.Policy.Resources = &corev1.ResourceRequirements{}
	if r := Build(p).Spec.Template.Spec.Containers[0].Resources; len(r.Requests) != 0 || len(r.Limits) != 0 {
		t.Fatalf("resources = %v", r)
	}
	p.Policy.Resources = nil
	if r := Build(p).Spec.Template.Spec.Containers[0].Resources; r.Limits.Memory().String() != "2Gi" {
		t.Fatalf("default resources = %v", r)
	}
}
