package app

import (
	"encoding/json"
	"fmt"
	"io"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

func orNone(s string) string {
	if s == "" {
		return None
	}
	return s
}

// runError is a run's error as KIND/STEP, or its kind alone.
func runError(e *runsv1alpha1.RunError) string {
	switch {
	case e == nil:
		return None
	case e.Step != "":
		return e.Kind + "/" + e.Step
	}
	return orNone(e.Kind)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
