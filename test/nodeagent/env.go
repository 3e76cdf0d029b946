package nodeagent

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// envVar is one resolved variable, in the order the container declares it.
type envVar struct {
	name  string
	value string
}

// envList is an ordered set of variables; setting a name again replaces its value in place.
type envList struct {
	vars  []envVar
	index map[string]int
}

func (l *envList) set(name, value string) {
	if l.index == nil {
		l.index = map[string]int{}
	}
	if i, ok := l.index[name]; ok {
		l.vars[i].value = value
		return
	}
	l.index[name] = len(l.vars)
	l.vars = append(l.vars, envVar{name: name, value: value})
}

func (l *envList) get(name string) (string, bool) {
	i, ok := l.index[name]
	if !ok {
		return "", false
	}
	return l.vars[i].value, true
}

// lookup adapts the list for expand.
func (l *envList) lookup(name string) (string, bool) { return l.get(name) }

// expand replaces $(NAME) references with the value lookup gives, as the kubelet does in env
// values, commands and arguments: $$ is a literal $, and a reference to an unknown name is left
// as written.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// waitError is a condition the pod waits on, as a kubelet waits: a missing Secret or
// ConfigMap, a missing ServiceAccount. Reason is the waiting reason of the containers.
type waitError struct {
	reason  string
	message string
}

func (e *waitError) Error() string { return e.message }

// configError is a container configuration the agent cannot honour; the container waits with
// CreateContainerConfigError and the message says why.
func configError(format string, args ...any) error {
	return &waitError{reason: "CreateContainerConfigError", message: fmt.Sprintf(format, args...)}
}

// objectCache memoizes the Secrets and ConfigMaps one container start reads.
type objectCache struct {
	w          *podWorker
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
}

func (c *objectCache) secret(ctx context.Context, name string) (*corev1.Secret, error) {
	if s, ok := c.secrets[name]; ok {
		return s, nil
	}
	s, err := c.w.a.client.CoreV1().Secrets(c.w.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %q: %w", name, err)
	}
	if c.secrets == nil {
		c.secrets = map[string]*corev1.Secret{}
	}
	c.secrets[name] = s
	return s, nil
}

func (c *objectCache) configMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	if m, ok := c.configMaps[name]; ok {
		return m, nil
	}
	m, err := c.w.a.client.CoreV1().ConfigMaps(c.w.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		m, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading configmap %q: %w", name, err)
	}
	if c.configMaps == nil {
		c.configMaps = map[string]*corev1.ConfigMap{}
	}
	c.configMaps[name] = m
	return m, nil
}

// containerEnv resolves a container's environment from its envFrom and env, the way the
// kubelet does, without the service link variables: the agent's own environment is never
// inherited. processEnv adds the image's env and the defaults.
func (w *podWorker) containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cache *objectCache) (*envList, error) {
	env := &envList{}
	for _, from := range c.EnvFrom {
		switch {
		case from.SecretRef != nil:
			s, err := cache.secret(ctx, from.SecretRef.Name)
			if err != nil {
				return nil, err
			}
			if s == nil {
				if optional(from.SecretRef.Optional) {
					continue
				}
				return nil, configError("secret %q not found", from.SecretRef.Name)
			}
			for _, k := range sortedKeys(s.Data) {
				env.set(from.Prefix+k, string(s.Data[k]))
			}
		case from.ConfigMapRef != nil:
			m, err := cache.configMap(ctx, from.ConfigMapRef.Name)
			if err != nil {
				return nil, err
			}
			if m == nil {
				if optional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, configError("configmap %q not found", from.ConfigMapRef.Name)
			}
			for _, k := range sortedKeys(m.Data) {
				env.set(from.Prefix+k, m.Data[k])
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env.set(e.Name, expand(e.Value, env.lookup))
			continue
		}
		value, ok, err := w.envValueFrom(ctx, pod, e, cache)
		if err != nil {
			return nil, err
		}
		if ok {
			env.set(e.Name, value)
		}
	}
	return env, nil
}

// processEnv is a process's environment: the image's env (NAME=value entries), then the
// container's, which replaces a variable of the same name in place, as a container runtime
// merges them. PATH (Config.Path) and HOSTNAME (the pod's name) are added when neither sets
// them.
func (w *podWorker) processEnv(pod *corev1.Pod, image []string, container *envList) *envList {
	env := &envList{}
	for _, kv := range image {
		name, value, _ := strings.Cut(kv, "=")
		env.set(name, value)
	}
	for _, v := range container.vars {
		env.set(v.name, v.value)
	}
	if _, ok := env.get("PATH"); !ok {
		env.set("PATH", w.a.cfg.Path)
	}
	if _, ok := env.get("HOSTNAME"); !ok {
		env.set("HOSTNAME", pod.Name)
	}
	return env
}

// envValueFrom resolves one valueFrom; ok is false for an optional reference that is missing.
func (w *podWorker) envValueFrom(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar, cache *objectCache) (value string, ok bool, err error) {
	from := e.ValueFrom
	switch {
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := cache.secret(ctx, ref.Name)
		if err != nil {
			return "", false, err
		}
		if s == nil {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, configError("secret %q not found", ref.Name)
		}
		v, found := s.Data[ref.Key]
		if !found {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, configError("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), true, nil
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		m, err := cache.configMap(ctx, ref.Name)
		if err != nil {
			return "", false, err
		}
		if m == nil {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, configError("configmap %q not found", ref.Name)
		}
		v, found := m.Data[ref.Key]
		if !found {
			if b, bin := m.BinaryData[ref.Key]; bin {
				return string(b), true, nil
			}
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, configError("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, true, nil
	case from.FieldRef != nil:
		v, err := w.fieldValue(pod, from.FieldRef.FieldPath)
		if err != nil {
			return "", false, err
		}
		return v, true, nil
	default:
		return "", false, configError("env %s: only secretKeyRef, configMapKeyRef and fieldRef are supported by the node agent", e.Name)
	}
}

// fieldValue resolves the downward API field paths a node agent can know.
func (w *podWorker) fieldValue(pod *corev1.Pod, fieldPath string) (string, error) {
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return serviceAccountName(pod), nil
	case "status.hostIP", "status.podIP":
		return nodeIP, nil
	case "status.hostIPs", "status.podIPs":
		return nodeIP, nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	for _, prefix := range []string{"metadata.labels['", "metadata.annotations['"} {
		if strings.HasPrefix(fieldPath, prefix) && strings.HasSuffix(fieldPath, "']") {
			key := fieldPath[len(prefix) : len(fieldPath)-2]
			if strings.HasPrefix(prefix, "metadata.labels") {
				return pod.Labels[key], nil
			}
			return pod.Annotations[key], nil
		}
	}
	return "", configError("field path %q is not supported by the node agent", fieldPath)
}

// formatMap renders labels or annotations as the downward API does: key="value" lines, sorted.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func optional(p *bool) bool { return p != nil && *p }

func serviceAccountName(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName != "" {
		return pod.Spec.ServiceAccountName
	}
	return "default"
}
