package jobs

// OptionalBool is a *bool in a byte: unset, false or true. The caches of the controller and the
// runs API server hold it where an object has a *bool, so that no cached object keeps a pointer
// (and an allocation) of its own for it, and so that the value compares with ==.
type OptionalBool uint8

// The values of an OptionalBool.
const (
	BoolUnset OptionalBool = iota
	BoolFalse
	BoolTrue
)

// OptionalBoolOf is b as an OptionalBool.
func OptionalBoolOf(b *bool) OptionalBool {
	switch {
	case b == nil:
		return BoolUnset
	case *b:
		return BoolTrue
	default:
		return BoolFalse
	}
}

// Pointer returns a new *bool of b; nil when unset.
func (b OptionalBool) Pointer() *bool {
	if b == BoolUnset {
		return nil
	}
	v := b == BoolTrue
	return &v
}
