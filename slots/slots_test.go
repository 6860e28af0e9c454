package slots

import "testing"

func TestForKeyMatchesRedis(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.0.
	cases := map[string]uint16{
		"foo":           12182,
		"bar":           5061,
		"{user1000}.a":  3443,
		"{user1000}.b":  3443,
		"foo{}{bar}":    8363, // empty tag: the whole key is hashed
		"foo{{bar}}zap": 4015, // tag is "{bar"
		"foo{bar}{zap}": 5061, // first tag only
		"":              0,
		"123456789":     12739,
	}
	for key, want := range cases {
		if got := ForKey([]byte(key)); got != want {
			t.Errorf("ForKey(%q) = %d, want %d", key, got, want)
		}
		if got := ForString(key); got != want {
			t.Errorf("ForString(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	s, err := Parse("100-200,3000,5000-5100")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "100-200,3000,5000-5100"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if s.Len() != 101+1+101 {
		t.Fatalf("Len() = %d", s.Len())
	}
	if !s.Contains(3000) || s.Contains(2999) || s.Contains(20000) {
		t.Fatal("Contains is wrong")
	}
	for _, bad := range []string{"", "a", "1-", "-5", "5-1", "16384", "0-16384", "0-10,10", "0-10,5-20", "1,,2", "-1", " 1", "+5", "1 ", "1 - 5", "100-200, 3000", "0x10", "1-+2", "000000000001"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted a bad spec", bad)
		}
	}
}
