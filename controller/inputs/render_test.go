package inputs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

var variablesPath = field.NewPath("spec", "variables")

func TestRender(t *testing.T) {
	const image = "registry.example/modules/net:v1"
	base := mustRender(t, image, `{"region":"eu","size":3}`)
	for _, tc := range []struct {
		rule      string
		image     string
		variables string
		sameHash  bool
	}{
		{"key order does not change the hash", image, `{"size":3,"region":"eu"}`, true},
		{"white space does not change the hash", image, "{ \"region\" : \"eu\",\n \"size\": 3 }", true},
		{"a changed value changes the hash", image, `{"region":"us","size":3}`, false},
		{"an added variable changes the hash", image, `{"region":"eu","size":3,"zone":"a"}`, false},
		{"a new image changes the hash", "registry.example/modules/net:v2", `{"region":"eu","size":3}`, false},
		{"numbers keep their literal text", image, `{"region":"eu","size":3.0}`, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			got := mustRender(t, tc.image, tc.variables)
			if (got.Hash == base.Hash) != tc.sameHash {
				t.Fatalf("hash %s vs %s, want same=%v", got.Hash, base.Hash, tc.sameHash)
			}
		})
	}
}

func TestRenderedRootPassesEveryVariableToTheModule(t *testing.T) {
	r := mustRender(t, "img", `{"region":"eu","tags":{"a":"b"}}`)
	var root struct {
		Terraform struct {
			Backend map[string]any `json:"backend"`
		} `json:"terraform"`
		Variable map[string]any            `json:"variable"`
		Module   map[string]map[string]any `json:"module"`
		Output   map[string]map[string]any `json:"output"`
	}
	if err := json.Unmarshal(r.Main, &root); err != nil {
		t.Fatalf("main.tf.json is not JSON: %v", err)
	}
	if _, ok := root.Terraform.Backend["kubernetes"]; !ok {
		t.Errorf("root has no kubernetes backend: %s", r.Main)
	}
	module := root.Module["workspace"]
	if module["source"] != ModulePath || module["region"] != "${var.region}" || module["tags"] != "${var.tags}" {
		t.Errorf("module block = %v", module)
	}
	if len(root.Variable) != 2 {
		t.Errorf("variables declared = %v, want region and tags", root.Variable)
	}
	if root.Output["workspace"]["sensitive"] != true {
		t.Errorf("the module's outputs are not marked sensitive: %v", root.Output)
	}
	if string(r.Vars) != `{"region":"eu","tags":{"a":"b"}}` {
		t.Errorf("tfvars = %s", r.Vars)
	}
	if data := r.Data(); len(data) != 2 || string(data[MainFile]) != string(r.Main) || string(data[VarsFile]) != string(r.Vars) {
		t.Errorf("Data() = %v", data)
	}
}

func TestRenderWithoutVariables(t *testing.T) {
	for _, variables := range []string{"", "null", "{}"} {
		r := mustRender(t, "img", variables)
		if string(r.Vars) != "{}" || strings.Contains(string(r.Main), `"variable"`) {
			t.Errorf("variables %q rendered %s and %s", variables, r.Main, r.Vars)
		}
	}
}

func TestRenderRejectsBadVariables(t *testing.T) {
	for _, tc := range []struct {
		rule      string
		variables string
		wantPath  string
	}{
		{"variables must be an object", `["a"]`, "spec.variables"},
		{"variables must be JSON", `{"a":`, "spec.variables"},
		{"a name must start with a letter or underscore", `{"1a":1}`, "spec.variables[1a]"},
		{"a name may not hold dots", `{"a.b":1}`, "spec.variables[a.b]"},
		{"a module meta-argument is no variable name", `{"count":1}`, "spec.variables[count]"},
		{"source is reserved", `{"source":"x"}`, "spec.variables[source]"},
		{"lifecycle is reserved", `{"lifecycle":"x"}`, "spec.variables[lifecycle]"},
		{"locals is reserved", `{"locals":"x"}`, "spec.variables[locals]"},
		{"the captf_ prefix is reserved", `{"captf_region":"x"}`, "spec.variables[captf_region]"},
		{"an input of the role is reserved", `{"machine_name":"x"}`, "spec.variables[machine_name]"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			_, err := Render("img", []Variable{{Name: "machine_name", Type: "string", Value: "m"}}, []byte(tc.variables), nil, variablesPath)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.wantPath) {
				t.Fatalf("error %q does not name %s", err, tc.wantPath)
			}
		})
	}
}

func TestRenderDeclaresTheInputsOfTheRole(t *testing.T) {
	contract := []Variable{
		{Name: "captf_contract", Type: "string", Value: "v1alpha1"},
		{Name: "bootstrap_data", Type: "string", Sensitive: true, Value: "Ym9vdA=="},
		{Name: "failure_domain", Type: "string", Nullable: true, Value: nil},
	}
	r, err := Render("img", contract, []byte(`{"region":"eu"}`), nil, variablesPath)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		Variable map[string]map[string]any `json:"variable"`
		Module   map[string]map[string]any `json:"module"`
	}
	if err := json.Unmarshal(r.Main, &root); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"an input is declared with its type", root.Variable["captf_contract"]["type"], "string"},
		{"bootstrap data is sensitive", root.Variable["bootstrap_data"]["sensitive"], true},
		{"a nullable input defaults to null", hasKey(root.Variable["failure_domain"], "default"), true},
		{"a required input has no default", hasKey(root.Variable["captf_contract"], "default"), false},
		{"an input is passed to the module", root.Module["workspace"]["bootstrap_data"], "${var.bootstrap_data}"},
		{"a user variable is still passed", root.Module["workspace"]["region"], "${var.region}"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.rule, tc.got, tc.want)
		}
	}
	if want := `{"bootstrap_data":"Ym9vdA==","captf_contract":"v1alpha1","failure_domain":null,"region":"eu"}`; string(r.Vars) != want {
		t.Errorf("tfvars = %s, want %s", r.Vars, want)
	}
}

func hasKey(m map[string]any, key string) bool {
	_, ok := m[key]
	return ok
}

func TestRenderRejectsInputsBeyondTheLimit(t *testing.T) {
	big := `{"blob":"` + strings.Repeat("x", MaxBytes) + `"}`
	r, err := Render("img", nil, []byte(big), nil, variablesPath)
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("err = %v, want TooLargeError", err)
	}
	if tooLarge.Size != r.Size() || r.Size() <= MaxBytes {
		t.Fatalf("size %d, rendered %d", tooLarge.Size, r.Size())
	}
	if !strings.Contains(err.Error(), "1000000") {
		t.Errorf("error %q does not name the limit", err)
	}
}

func TestRenderAtTheLimitIsAccepted(t *testing.T) {
	r := mustRender(t, "img", `{"blob":""}`)
	pad := MaxBytes - r.Size()
	r, err := Render("img", nil, []byte(`{"blob":"`+strings.Repeat("x", pad)+`"}`), nil, variablesPath)
	if err != nil || r.Size() != MaxBytes {
		t.Fatalf("size %d, err %v; want exactly %d accepted", r.Size(), err, MaxBytes)
	}
}

func mustRender(t *testing.T, image, variables string) Rendered {
	t.Helper()
	r, err := Render(image, nil, []byte(variables), nil, variablesPath)
	if err != nil {
		t.Fatalf("Render(%s): %v", variables, err)
	}
	if !strings.HasPrefix(r.Hash, HashPrefix) {
		t.Fatalf("hash %q lacks the prefix %q", r.Hash, HashPrefix)
	}
	return r
}

func TestRenderMergesSourcedVariables(t *testing.T) {
	sourced := []Sourced{
		{Name: "region", Value: []byte(`"from-configmap"`)},
		{Name: "token", Value: []byte(`"s3cret"`), Sensitive: true},
		{Name: "region", Value: []byte(`"later-source"`)},
		{Name: "password", Value: []byte(`"hunter2"`), Sensitive: true},
	}
	r, err := Render("img", nil, []byte(`{"password":"inline","size":3}`), sourced, variablesPath)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		Variable map[string]map[string]any `json:"variable"`
		Module   map[string]map[string]any `json:"module"`
	}
	var vars map[string]any
	if err := json.Unmarshal(r.Main, &root); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(r.Vars, &vars); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule string
		got  any
		want any
	}{
		{"a later source wins over an earlier one", vars["region"], "later-source"},
		{"spec.variables wins over every source", vars["password"], "inline"},
		{"a value from a Secret is sensitive", root.Variable["token"]["sensitive"], true},
		{"a Secret's value overridden inline is not sensitive", root.Variable["password"]["sensitive"], nil},
		{"a value from a ConfigMap is not sensitive", root.Variable["region"]["sensitive"], nil},
		{"a sourced variable is passed to the module", root.Module["workspace"]["token"], "${var.token}"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.rule, tc.got, tc.want)
		}
	}
	if _, err := Render("img", nil, nil, []Sourced{{Name: "captf_x", Value: []byte(`1`)}}, variablesPath); err == nil || !strings.Contains(err.Error(), "captf_x") {
		t.Errorf("a reserved sourced name: %v", err)
	}
}

// The stand-alone root calls the module from its directory and keeps its state locally, and is
// otherwise the root a Job runs.
func TestStandaloneCallsTheModuleFromItsDirectoryWithoutABackend(t *testing.T) {
	r, err := Render("img", []Variable{{Name: "captf_contract", Type: "string", Value: "v1alpha1"}}, []byte(`{"region":"eu"}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	root, err := r.Standalone("/src/module")
	if err != nil {
		t.Fatal(err)
	}
	call := root["module"].(map[string]any)[ModuleName].(map[string]any)
	if _, backend := root["terraform"]; backend || call["source"] != "/src/module" || call["region"] != "${var.region}" || call["captf_contract"] != "${var.captf_contract}" {
		t.Fatalf("stand-alone root %v", root)
	}
	if _, ok := root["variable"].(map[string]any)["region"]; !ok {
		t.Fatalf("the root lost its variables: %v", root)
	}
}
