package jobs

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"
)

func TestJoinStateParts(t *testing.T) {
	payload := make([]byte, MaxStatePartBytes*2+10)
	_, _ = rand.Read(payload)
	chunks, manifestGz, err := SplitState(payload, "b")
	if err != nil {
		t.Fatal(err)
	}
	manifest, ok := StatePartsOf(manifestGz)
	if !ok || manifest.Count != 3 || manifest.Slot != "b" {
		t.Fatalf("manifest %+v (%v), want 3 parts in slot b", manifest, ok)
	}
	stored := func(edit func(map[string][]byte)) func(string) ([]byte, bool, error) {
		parts := map[string][]byte{}
		for i, c := range chunks {
			parts[StatePartName("s", "b", i)] = bytes.Clone(c)
		}
		if edit != nil {
			edit(parts)
		}
		return func(name string) ([]byte, bool, error) {
			data, found := parts[name]
			return data, found, nil
		}
	}
	readFails := errors.New("connection refused")
	tests := []struct {
		name    string
		read    func(string) ([]byte, bool, error)
		wantErr error
	}{
		{"the parts a manifest names join into the state it split", stored(nil), nil},
		{"a missing part is a state parts error", stored(func(p map[string][]byte) { delete(p, StatePartName("s", "b", 2)) }), ErrStateParts},
		{"a part that differs is a state parts error", stored(func(p map[string][]byte) { p[StatePartName("s", "b", 0)][0] ^= 1 }), ErrStateParts},
		{"a failed read is returned as it is", func(string) ([]byte, bool, error) { return nil, false, readFails }, readFails},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			joined, err := JoinStateParts("s", manifest, tt.read)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && !bytes.Equal(joined, payload) {
				t.Fatal("the joined bytes differ from the payload")
			}
			if errors.Is(tt.wantErr, readFails) && errors.Is(err, ErrStateParts) {
				t.Fatal("a failed read reads as a broken state")
			}
		})
	}
}
