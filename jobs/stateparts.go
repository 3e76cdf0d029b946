package jobs

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// A state larger than one Secret holds is kept in part Secrets. The kubernetes backend writes
// the whole gzip'd state into the tfstate key of one Secret, and the API server refuses a Secret
// whose data passes 1 MiB. So the runner's state API splits a larger payload into parts, writes
// them to the slot the current head does not name, and then writes the head with a manifest in
// place of the state: a crash before the head leaves the previous state whole. Readers join the
// parts the manifest names and check its digest. The manifest has no state format version, so a
// reader that does not know parts (plain OpenTofu, an older controller) refuses it instead of
// taking it for an empty state.
const (
	// MaxStatePartBytes is the most state bytes a part or an inline head holds: below the API
	// server's 1 MiB limit on a Secret's data, with room for the other keys and the JSON framing.
	MaxStatePartBytes = 1000 << 10
	// MaxStateParts is the most parts of one slot, and so the largest state: 8 × 1000 KiB of gzip,
	// about 100 MiB of state JSON at the usual ratio. Every part name is in the runner's Role, so
	// the count is bounded.
	MaxStateParts = 8
	// AnnotationStatePartsWanted on the lock Lease is how a run asks the controller for parts: the
	// runner may only get and update objects it is granted by name, so the controller creates
	// them, empty, the number the annotation asks for in each slot.
	AnnotationStatePartsWanted = "captf.io/state-parts-wanted"
	// LabelStatePart marks a part Secret.
	LabelStatePart = "captf.io/state-part"
)

// StatePartSlots are the two slots a chunked state alternates between.
var StatePartSlots = [2]string{"a", "b"}

// StatePartName is the name of part i of a slot of the state of a backend secret suffix.
func StatePartName(suffix, slot string, i int) string {
	return "captf-state-part-" + suffix + "-" + slot + strconv.Itoa(i)
}

// StatePartNames are the names of every part an object's state may use, in both slots.
func StatePartNames(suffix string) []string {
	names := make([]string, 0, 2*MaxStateParts)
	for _, slot := range StatePartSlots {
		for i := range MaxStateParts {
			names = append(names, StatePartName(suffix, slot, i))
		}
	}
	return names
}

// BackupPartName is the name of chunk i (from 1) of a state backup whose state is larger than
// one Secret; chunk 0 is in the backup Secret itself.
func BackupPartName(backup string, i int) string {
	return ShortenName(backup+"-part-"+strconv.Itoa(i), MaxSecretNameLength)
}

// SplitPayload splits a state payload into chunks of at most MaxStatePartBytes.
func SplitPayload(payload []byte) [][]byte {
	var chunks [][]byte
	for rest := payload; len(rest) > 0; {
		n := min(len(rest), MaxStatePartBytes)
		chunks, rest = append(chunks, rest[:n]), rest[n:]
	}
	return chunks
}

// StateParts is the manifest a head holds in place of a state kept in parts.
type StateParts struct {
	// Slot is the slot the parts are in.
	Slot string `json:"slot"`
	// Count is the number of parts, Bytes their joined length.
	Count int `json:"count"`
	Bytes int `json:"bytes"`
	// Digest is sha256:<hex> of the joined bytes.
	Digest string `json:"digest"`
}

type stateManifest struct {
	Parts *StateParts `json:"captfStateParts"`
}

// ErrStateParts is returned when a chunked state's parts do not make the state its manifest
// names.
var ErrStateParts = errors.New("state parts do not match their manifest")

// StatePartsOf reports the manifest a head's gzip'd tfstate holds, if it holds one. A manifest
// is a few hundred bytes, so a payload that decompresses to more is a state.
func StatePartsOf(payload []byte) (StateParts, bool) {
	gz, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		return StateParts{}, false
	}
	doc, err := io.ReadAll(io.LimitReader(gz, 4<<10))
	if err != nil || len(doc) >= 4<<10 {
		return StateParts{}, false
	}
	var m stateManifest
	if json.Unmarshal(doc, &m) != nil || m.Parts == nil {
		return StateParts{}, false
	}
	return *m.Parts, true
}

// Valid says why a manifest cannot be one the runner wrote, or nil.
func (p StateParts) Valid() error {
	switch {
	case p.Slot != StatePartSlots[0] && p.Slot != StatePartSlots[1]:
		return fmt.Errorf("%w: unknown slot %q", ErrStateParts, p.Slot)
	case p.Count < 1 || p.Count > MaxStateParts:
		return fmt.Errorf("%w: %d parts, want 1 to %d", ErrStateParts, p.Count, MaxStateParts)
	case p.Bytes < 1 || p.Bytes > p.Count*MaxStatePartBytes:
		return fmt.Errorf("%w: %d bytes in %d parts", ErrStateParts, p.Bytes, p.Count)
	}
	return nil
}

// Check verifies joined bytes against the manifest.
func (p StateParts) Check(joined []byte) error {
	if len(joined) != p.Bytes {
		return fmt.Errorf("%w: the parts hold %d bytes, the manifest %d", ErrStateParts, len(joined), p.Bytes)
	}
	if stateDigest(joined) != p.Digest {
		return fmt.Errorf("%w: digest differs", ErrStateParts)
	}
	return nil
}

// JoinStateParts reads the parts a manifest of the state of suffix names, with read (a part's
// bytes and whether it exists), and checks them against the manifest. A missing part, or parts
// that do not match, is ErrStateParts; a failed read is returned wrapped.
func JoinStateParts(suffix string, m StateParts, read func(name string) (data []byte, found bool, err error)) ([]byte, error) {
	if err := m.Valid(); err != nil {
		return nil, err
	}
	var joined []byte
	for i := range m.Count {
		name := StatePartName(suffix, m.Slot, i)
		data, found, err := read(name)
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading state part %s: %w", name, err)
		case !found:
			return nil, fmt.Errorf("%w: state part %s is missing", ErrStateParts, name)
		}
		joined = append(joined, data...)
	}
	return joined, m.Check(joined)
}

// SplitState splits a gzip'd state payload that is too large to be inline into parts, and
// returns them with the manifest (gzip'd, as the head holds it) that names them in slot.
func SplitState(payload []byte, slot string) (parts [][]byte, manifest []byte, err error) {
	parts = SplitPayload(payload)
	if len(parts) > MaxStateParts {
		return nil, nil, fmt.Errorf("the state needs %d parts of %d KiB, more than the %d a state may have", len(parts), MaxStatePartBytes>>10, MaxStateParts)
	}
	doc, err := json.Marshal(stateManifest{Parts: &StateParts{Slot: slot, Count: len(parts), Bytes: len(payload), Digest: stateDigest(payload)}})
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(doc); err != nil {
		return nil, nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, nil, err
	}
	return parts, buf.Bytes(), nil
}

// OtherStatePartSlot is the slot a write uses when the head's manifest names slot (or none).
func OtherStatePartSlot(slot string) string {
	if slot == StatePartSlots[0] {
		return StatePartSlots[1]
	}
	return StatePartSlots[0]
}

func stateDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
