package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTheCommittedReferenceMatchesTheCode(t *testing.T) {
	root := filepath.Join("..", "..")
	committed, err := os.ReadFile(filepath.Join(root, Output))
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := Render(root)
	if err != nil {
		t.Fatal(err)
	}
	if string(committed) != rendered {
		t.Fatalf("%s is out of date: run `go run ./hack/metricsdocs`", Output)
	}
}
