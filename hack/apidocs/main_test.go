package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReferenceMatchesTheTypes regenerates the reference in memory and fails when the committed
// docs/api-reference.md differs, so the reference never drifts from the Go types or the CRDs.
func TestReferenceMatchesTheTypes(t *testing.T) {
	root := filepath.Join("..", "..")
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, Output))
	if err != nil {
		t.Fatalf("reading %s: %v; run `go run ./hack/apidocs`", Output, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with the API types; run `go run ./hack/apidocs` and commit the result", Output)
	}
}

// TestDocText checks the comment rules: markers are dropped, lines join into paragraphs.
func TestDocText(t *testing.T) {
	types, err := parseTypes(filepath.Join("..", "..", "apis", "runs", "v1alpha1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, typ string
		contains  string
		absent    string
	}{
		{name: "markers are dropped", typ: "Run", contains: "Terraform/OpenTofu run", absent: "+genclient"},
		{name: "enum values are read", typ: "RunPhase", contains: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td, ok := types[tc.typ]
			if !ok {
				t.Fatalf("type %s not found", tc.typ)
			}
			if !bytes.Contains([]byte(td.Doc), []byte(tc.contains)) {
				t.Errorf("doc %q does not contain %q", td.Doc, tc.contains)
			}
			if tc.absent != "" && bytes.Contains([]byte(td.Doc), []byte(tc.absent)) {
				t.Errorf("doc %q contains %q", td.Doc, tc.absent)
			}
			if tc.typ == "RunPhase" && len(td.Values) != 9 {
				t.Errorf("RunPhase has %d values, want 9", len(td.Values))
			}
		})
	}
}
