package cluster

import "testing"

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
