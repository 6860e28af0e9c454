package cluster

import (
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	text := `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5460->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [12000-<-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 1426238316232 0 5 disconnected
`
	top, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	me := top.Myself
	if me == nil || me.Addr != "127.0.0.1:30001" || me.Slots.Len() != 5461 || !me.Master() {
		t.Fatalf("myself parsed wrong: %+v", me)
	}
	if me.Migrating[5460] != "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1" || me.Importing[12000] != "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f" {
		t.Fatalf("migrating/importing: %v %v", me.Migrating, me.Importing)
	}
	if o := top.Owner(10922); o == nil || o.Addr != "127.0.0.1:30002" {
		t.Fatalf("owner of 10922: %+v", o)
	}
	if r := top.ByID("07c37dfeb235213a872192d90877d0cd55635b91"); r == nil || r.Master() || r.MasterID != me.ID || r.Addr != "127.0.0.1:30004" {
		t.Fatalf("replica parsed wrong: %+v", r)
	}
	if len(top.Masters()) != 3 {
		t.Fatalf("masters: %d, want 3 (the failing one excluded)", len(top.Masters()))
	}
	if _, err := Parse("garbage"); err == nil {
		t.Fatal("garbage parsed")
	}
}

// BenchmarkParseFragmented reads the CLUSTER NODES of 4 masters that own
// every 4th slot each: 4096 single-slot fields a line, as long soaks make.
func BenchmarkParseFragmented(b *testing.B) {
	var text strings.Builder
	for n := 0; n < 4; n++ {
		flags := "master"
		if n == 0 {
			flags = "myself,master"
		}
		fmt.Fprintf(&text, "%040d 127.0.0.1:%d@%d %s - 0 0 %d connected", n, 7000+n, 17000+n, flags, n+1)
		for s := n; s < 16384; s += 4 {
			fmt.Fprintf(&text, " %d", s)
		}
		text.WriteString("\n")
	}
	in := text.String()
	b.ReportAllocs()
	for b.Loop() {
		top, err := Parse(in)
		if err != nil || top.Myself.Slots.Len() != 4096 {
			b.Fatalf("%v, %d slots", err, top.Myself.Slots.Len())
		}
	}
}
