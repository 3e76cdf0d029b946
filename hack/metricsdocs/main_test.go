package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTheCommittedReferenceMatchesTheCode(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join("..", "..", Output))
	if err != nil {
		t.Fatal(err)
	}
	if string(committed) != Render() {
		t.Fatalf("%s is out of date: run `go run ./hack/metricsdocs`", Output)
	}
}
