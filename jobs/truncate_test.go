package jobs

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateUTF8(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"a string that fits is kept", "abc", 3, "abc"},
		{"a string shorter than n is kept", "abc", 10, "abc"},
		{"ASCII is cut at n", "abcdef", 4, "abcd"},
		{"a character is never split", "aé", 2, "a"},
		{"a character that ends at n is kept", "aé", 3, "aé"},
		{"a three-byte character is dropped whole", "a€b", 3, "a"},
		{"a four-byte character is dropped whole", "a😀b", 4, "a"},
		{"a four-byte character that ends at n is kept", "a😀b", 5, "a😀"},
		{"nothing fits in 0 bytes", "abc", 0, ""},
		{"nothing fits in a negative count", "abc", -5, ""},
		{"the empty string stays empty", "", 3, ""},
		{"invalid UTF-8 is cut at n", "a\x80\x80\x80\x80\x80", 3, "a\x80\x80"},
		{"a truncated sequence at the end is cut anywhere", "ab\xe2\x82", 3, "ab\xe2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TruncateUTF8(tt.in, tt.n); got != tt.want {
				t.Errorf("TruncateUTF8(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

// TestTruncateUTF8_ValidTextGivesTheLongestValidPrefix checks the rule for every cut of text
// that mixes one- to four-byte characters: the result is a prefix of at most n bytes, is valid
// UTF-8, and is the longest such prefix.
func TestTruncateUTF8_ValidTextGivesTheLongestValidPrefix(t *testing.T) {
	s := strings.Repeat("aé€😀", 3)
	for n := -1; n <= len(s)+1; n++ {
		got := TruncateUTF8(s, n)
		longest := ""
		for i := range s + "\x00" { // every rune start, and the end
			if i <= n {
				longest = s[:i]
			}
		}
		if !strings.HasPrefix(s, got) || len(got) > max(n, 0) || !utf8.ValidString(got) || got != longest {
			t.Errorf("TruncateUTF8(%q, %d) = %q, want %q", s, n, got, longest)
		}
	}
}
