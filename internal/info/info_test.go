package info

import "testing"

func TestParse(t *testing.T) {
	f := Parse("# Replication\r\nrole:master\r\nmaster_repl_offset:1234\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset=1200\r\n\r\n" +
		"# Errorstats\r\nerrorstat_MOVED:count=3\r\nerrorstat_ERR:count=1\r\n# Commandstats\r\ncmdstat_set:calls=5,usec=10,failed_calls=1\r\n")
	if off, err := f.Int("master_repl_offset"); err != nil || off != 1234 {
		t.Fatalf("offset %d, %v", off, err)
	}
	if _, err := f.Int("nope"); err == nil {
		t.Fatal("a missing field read as a number")
	}
	if r := f.Sub("slave0"); r["state"] != "online" || r["offset"] != "1200" {
		t.Fatalf("slave0: %v", r)
	}
	if e := f.ErrorStats(); len(e) != 2 || e["MOVED"] != 3 || e["ERR"] != 1 {
		t.Fatalf("errorstats: %v", e)
	}
	if f.Sub("cmdstat_set")["failed_calls"] != "1" {
		t.Fatalf("cmdstat_set: %v", f.Sub("cmdstat_set"))
	}
}
