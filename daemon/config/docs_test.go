package config

import (
	"os"
	"strings"
	"testing"
)

// The configuration reference in docs/sidecar.md is the keys table itself:
// a key added, renamed, or given another default fails this test until the
// page shows it. On a mismatch the test prints the section as it must be.
func TestDocsConfigReference(t *testing.T) {
	data, err := os.ReadFile("../../docs/sidecar.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- config reference: made from daemon/config/keys.go -->\n", "<!-- end of config reference -->"
	readme := string(data)
	i, j := strings.Index(readme, begin), strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatalf("docs/sidecar.md lacks the markers %q … %q", begin, end)
	}
	if got, want := readme[i+len(begin):j], configReference(); got != want {
		t.Fatalf("docs/sidecar.md's configuration reference is out of date; it must read:\n%s", want)
	}
}

// configReference is a markdown table of every key, in table order.
func configReference() string {
	var b strings.Builder
	b.WriteString("| key | flag | environment | default | what it sets |\n|---|---|---|---|---|\n")
	defaults := Defaults()
	for _, k := range keys {
		def := format(k.field(defaults))
		if def == "" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		usage := strings.NewReplacer("`", "", "|", `\|`, "<", "&lt;", ">", "&gt;").Replace(k.usage)
		b.WriteString("| `" + k.path + "` | `--" + k.flag + "` | `" + envName(k.flag) + "` | " + def + " | " + usage + " |\n")
	}
	return b.String()
}
