package jobs

import "unique"

// Intern returns the canonical copy of s (Go's unique package), so that the label keys, kinds,
// namespaces and other strings thousands of Jobs and objects repeat are held once by the caches
// of the controller and the runs API server.
func Intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
