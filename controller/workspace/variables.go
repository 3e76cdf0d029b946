package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/inputs"
)

// sourcedVariables reads the variables of spec.variablesFrom, live (Secrets are never cached),
// in list order. A source that does not exist or lacks the opt-in label is missing; a key or
// value that cannot be a variable is invalid. Either is returned as deps, which names the key,
// never the value.
func sourcedVariables(ctx context.Context, reader client.Reader, obj infrav1.Workspace, role contract.Role) ([]inputs.Sourced, Dependencies, error) {
	reserved := map[string]bool{}
	for _, name := range contract.InputNames(role) {
		reserved[name] = true
	}
	var out []inputs.Sourced
	for i, src := range obj.WorkspaceSpec().VariablesFrom {
		data, what, found, err := readSource(ctx, reader, obj.GetNamespace(), src)
		if err != nil {
			return nil, Dependencies{}, err
		}
		if !found {
			if src.Optional {
				continue
			}
			return nil, refused(conditions.ReasonVariablesSourceNotFound, "spec.variablesFrom[%d]: %s does not exist or lacks the label %s=true", i, what, infrav1.VariablesLabel), nil
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			value, problem := sourcedValue(data[key], src.Format)
			if problem == "" {
				problem = inputs.NameProblem(key, reserved)
			}
			if problem != "" {
				return nil, refused(conditions.ReasonVariablesInvalid, "spec.variablesFrom[%d]: key %s of %s %s", i, key, what, problem), nil
			}
			out = append(out, inputs.Sourced{Name: key, Value: value, Sensitive: src.SecretRef != nil})
		}
	}
	return out, Dependencies{}, nil
}

// readSource reads a variables source's data. what names it in messages; found is false when it
// does not exist or does not carry the opt-in label.
func readSource(ctx context.Context, reader client.Reader, namespace string, src infrav1.VariablesSource) (data map[string][]byte, what string, found bool, err error) {
	var obj client.Object
	if src.SecretRef != nil {
		what, obj = "Secret "+src.SecretRef.Name, &corev1.Secret{}
		err = reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: src.SecretRef.Name}, obj)
	} else {
		what, obj = "ConfigMap "+src.ConfigMapRef.Name, &corev1.ConfigMap{}
		err = reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: src.ConfigMapRef.Name}, obj)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, what, false, nil
	case err != nil:
		return nil, what, false, fmt.Errorf("reading the variables source %s: %w", what, err)
	case obj.GetLabels()[infrav1.VariablesLabel] != "true":
		return nil, what, false, nil
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		return o.Data, what, true, nil
	case *corev1.ConfigMap:
		data = map[string][]byte{}
		for k, v := range o.BinaryData {
			data[k] = v
		}
		for k, v := range o.Data {
			data[k] = []byte(v)
		}
		return data, what, true, nil
	}
	return nil, what, false, nil
}

// sourcedValue is a source's value as the JSON value of a variable, or why it cannot be one.
func sourcedValue(raw []byte, format infrav1.VariablesFormat) (json.RawMessage, string) {
	if !utf8.Valid(raw) {
		return nil, "is not UTF-8 text"
	}
	if format == infrav1.VariablesFormatJSON {
		if !json.Valid(raw) {
			return nil, "is not valid JSON (format JSON)"
		}
		return raw, ""
	}
	value, err := json.Marshal(string(raw))
	if err != nil {
		return nil, "cannot be encoded"
	}
	return value, ""
}
