// Package inputs renders the root module of a run (main.tf.json) and its variables
// (terraform.tfvars.json) from an object's spec, and hashes them. The hash names the Jobs of apply
// and plan and is recorded on the state, so it must depend on nothing but what the run sees.
package inputs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/captf/captf/jobs"
)

// File names of the rendered inputs, as the runner finds them in /captf/config.
const (
	MainFile = "main.tf.json"
	VarsFile = "terraform.tfvars.json"
)

// ModulePath is where the module image holds its module.
const ModulePath = "/captf/module"

// MaxBytes bounds the rendered inputs: both files together must fit a Secret with room to spare.
const MaxBytes = 1_000_000

// HashPrefix versions the inputs hash, so a change of the rendering can be told apart.
const HashPrefix = "h1:"

// ModuleName is the name of the module block in the rendered root.
const ModuleName = "workspace"

// variableName is what Terraform accepts as a variable name.
var variableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// metaArguments are the meta-arguments of a module block and the root's block names; a
// variable of that name cannot be passed.
var metaArguments = map[string]bool{
	"source": true, "version": true, "providers": true, "count": true, "for_each": true, "depends_on": true,
	"lifecycle": true, "locals": true,
}

// ReservedPrefix starts the names captf keeps for its own inputs.
const ReservedPrefix = "captf_"

// Rendered is the pair of files a run gets, and their hash.
type Rendered struct {
	Main []byte
	Vars []byte
	// Hash is HashPrefix + hex SHA-256 over the image reference and both files.
	Hash string
}

// Size is the number of bytes both files take.
func (r Rendered) Size() int { return len(r.Main) + len(r.Vars) }

// Data returns the files as the data of a Secret.
func (r Rendered) Data() map[string][]byte {
	return map[string][]byte{MainFile: r.Main, VarsFile: r.Vars}
}

// TooLargeError reports rendered inputs beyond MaxBytes.
type TooLargeError struct{ Size int }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the rendered inputs take %d bytes, more than the limit of %d", e.Size, MaxBytes)
}

// Variable is one input captf itself gives the module: declared in the root with its type and
// set in the variables file.
type Variable struct {
	Name string
	// Type is a Terraform type expression, e.g. "string" or "map(string)".
	Type string
	// Nullable inputs default to null, so a module may leave them out of its own defaults.
	Nullable bool
	// Sensitive inputs never show in plans or logs.
	Sensitive bool
	// Value is encoded as JSON into the variables file.
	Value any
	// HashValue, when not nil, is what the inputs hash reads in place of Value: for a value
	// that may change without being a new input (bootstrap data whose only change is a
	// bootstrap token Cluster API rotates).
	HashValue any
}

// Sourced is a variable read from a ConfigMap or Secret of spec.variablesFrom.
type Sourced struct {
	Name string
	// Value is a JSON value.
	Value json.RawMessage
	// Sensitive is set for a value from a Secret.
	Sensitive bool
}

// NameProblem says why name cannot be a variable the object sets, "" when it can. contract are
// the names of the inputs captf gives the module of the object's role.
func NameProblem(name string, contract map[string]bool) string {
	switch {
	case !variableName.MatchString(name):
		return "must start with a letter or underscore and hold only letters, digits, underscores and dashes"
	case metaArguments[name]:
		return "is a meta-argument of a module block and cannot be a variable name"
	case strings.HasPrefix(name, ReservedPrefix):
		return "starts with " + ReservedPrefix + ", which captf keeps for its own inputs"
	case contract[name]:
		return "is an input captf gives the module of this kind, and cannot be set"
	}
	return ""
}

// Render builds the root module and the variables file. contract are the inputs captf gives
// the module of the object's role; variables is the raw JSON object of spec.variables (nil for
// none), which wins over sourced, the variables of spec.variablesFrom in order (a later one
// wins); image is the module image reference, part of the hash because a new image is a new
// apply. Invalid variables are reported with their field paths under path. A variable whose
// value came from a Secret is declared sensitive.
func Render(image string, contract []Variable, variables []byte, sourced []Sourced, path *field.Path) (Rendered, error) {
	contractNames := map[string]bool{}
	for _, v := range contract {
		contractNames[v.Name] = true
	}
	values, sensitive, err := userVariables(variables, sourced, contractNames, path)
	if err != nil {
		return Rendered{}, err
	}
	variableBlocks := map[string]any{}
	module := map[string]any{"source": ModulePath}
	for _, v := range contract {
		block := map[string]any{"type": v.Type}
		if v.Nullable {
			block["default"] = nil
		}
		if v.Sensitive {
			block["sensitive"] = true
		}
		variableBlocks[v.Name] = block
		module[v.Name] = "${var." + v.Name + "}"
	}
	for name := range values {
		block := map[string]any{}
		if sensitive[name] {
			block["sensitive"] = true
		}
		variableBlocks[name] = block
		module[name] = "${var." + name + "}"
	}
	canonicalVars := values
	for _, v := range contract {
		canonicalVars[v.Name] = v.Value
	}

	root := map[string]any{
		// The backend is completed by the runner's -backend-config flags.
		"terraform": map[string]any{"backend": map[string]any{"kubernetes": map[string]any{}}},
		"module":    map[string]any{ModuleName: module},
		// Every output of the module, marked sensitive so no value shows in plans or logs.
		"output": map[string]any{ModuleName: map[string]any{"value": "${module." + ModuleName + "}", "sensitive": true}},
	}
	if len(variableBlocks) > 0 {
		root["variable"] = variableBlocks
	}
	main, err := jobs.CanonicalJSON(root)
	if err != nil {
		return Rendered{}, fmt.Errorf("rendering %s: %w", MainFile, err)
	}
	varsFile, err := jobs.CanonicalJSON(canonicalVars)
	if err != nil {
		return Rendered{}, fmt.Errorf("rendering %s: %w", VarsFile, err)
	}
	hashedVars := varsFile
	if hashValues := hashValuesOf(contract); len(hashValues) > 0 {
		for name, v := range hashValues {
			canonicalVars[name] = v
		}
		if hashedVars, err = jobs.CanonicalJSON(canonicalVars); err != nil {
			return Rendered{}, fmt.Errorf("rendering the hashed %s: %w", VarsFile, err)
		}
	}
	r := Rendered{Main: main, Vars: varsFile, Hash: Hash(image, main, hashedVars)}
	if r.Size() > MaxBytes {
		return r, &TooLargeError{Size: r.Size()}
	}
	return r, nil
}

// userVariables merges the object's variables: the sourced ones in order, then spec.variables
// (raw, a JSON object) over them. sensitive marks the names whose value came from a Secret.
func userVariables(variables []byte, sourced []Sourced, contract map[string]bool, path *field.Path) (values map[string]any, sensitive map[string]bool, err error) {
	vars := map[string]json.RawMessage{}
	if trimmed := bytes.TrimSpace(variables); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if err := json.Unmarshal(variables, &vars); err != nil {
			return nil, nil, field.Invalid(path, "<json>", fmt.Sprintf("must be a JSON object: %v", err))
		}
	}
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs field.ErrorList
	for _, name := range names {
		if problem := NameProblem(name, contract); problem != "" {
			errs = append(errs, field.Invalid(path.Key(name), name, problem))
		}
	}
	if len(errs) > 0 {
		return nil, nil, errs.ToAggregate()
	}
	values, sensitive = map[string]any{}, map[string]bool{}
	for _, v := range sourced {
		if problem := NameProblem(v.Name, contract); problem != "" {
			return nil, nil, fmt.Errorf("variable %s from spec.variablesFrom %s", v.Name, problem)
		}
		var value any
		if err := decodeValue(v.Value, &value); err != nil {
			return nil, nil, fmt.Errorf("variable %s from spec.variablesFrom: %w", v.Name, err)
		}
		values[v.Name], sensitive[v.Name] = value, v.Sensitive
	}
	for _, name := range names {
		var value any
		if err := decodeValue(vars[name], &value); err != nil {
			return nil, nil, field.Invalid(path.Key(name), "<json>", err.Error())
		}
		values[name], sensitive[name] = value, false
	}
	return values, sensitive, nil
}

// decodeValue decodes one JSON value; numbers keep their literal text, so the hash does not move
// with float rounding.
func decodeValue(raw json.RawMessage, into *any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(into)
}

// hashValuesOf returns the values the hash reads in place of the rendered ones, by name.
func hashValuesOf(contract []Variable) map[string]any {
	out := map[string]any{}
	for _, v := range contract {
		if v.HashValue != nil {
			out[v.Name] = v.HashValue
		}
	}
	return out
}

// Hash is the inputs hash over an image reference and the two rendered files.
func Hash(image string, main, vars []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(image), main, vars} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return HashPrefix + hex.EncodeToString(h.Sum(nil))
}
