package tests

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/slotmover/slotmover/"

// The layers of docs/design.md hold: every package of the module is in
// the table, and imports only packages of lower layers.
func TestLayers(t *testing.T) {
	doc, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	layer, err := parseLayers(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if bad := layerViolations(string(out), layer); len(bad) > 0 {
		t.Fatalf("docs/design.md's layers do not hold:\n  %s", strings.Join(bad, "\n  "))
	}
}

// The production binary starts no server of its own: neither the
// embedded NATS server nor the redis-server launcher is linked into it
// (they are the lab's, cmd/slotmover-lab).
func TestProductionBinaryLinksNoLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./../cmd/slotmover").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if bad := labDeps(string(out)); len(bad) > 0 {
		t.Fatalf("cmd/slotmover links the lab's packages:\n  %s", strings.Join(bad, "\n  "))
	}
	// The check sees them where they are: in the lab's binary.
	out, err = exec.Command("go", "list", "-deps", "./../cmd/slotmover-lab").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if len(labDeps(string(out))) != 2 {
		t.Fatalf("cmd/slotmover-lab does not link both the NATS server and localcluster:\n%s", out)
	}
}

// labDeps lists the lab's packages among go list -deps's lines.
func labDeps(deps string) []string {
	var found []string
	for _, p := range strings.Fields(deps) {
		if p == "github.com/nats-io/nats-server/v2/server" || p == module+"lab/localcluster" {
			found = append(found, p)
		}
	}
	return found
}

// parseLayers reads the table between the layers markers: package → layer.
func parseLayers(doc string) (map[string]int, error) {
	const begin, end = "<!-- layers: bottom first; tests/layers_test.go checks them -->\n", "<!-- end of layers -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return nil, errNoLayers
	}
	row := regexp.MustCompile("(?m)^\\| (\\d+) \\| (.*) \\|$")
	name := regexp.MustCompile("`([^`]+)`")
	layer := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(doc[i:j], -1) {
		n, _ := strconv.Atoi(m[1])
		for _, p := range name.FindAllStringSubmatch(m[2], -1) {
			layer[p[1]] = n
		}
	}
	if len(layer) == 0 {
		return nil, errNoLayers
	}
	return layer, nil
}

var errNoLayers = errors.New("docs/design.md has no layers table between its markers")

// layerViolations lists, from go list's lines (a package, then what its
// code imports; its tests may import anything), the packages missing from
// layer and the imports of a package's own layer or above.
func layerViolations(list string, layer map[string]int) []string {
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		own, ok := layer[pkg]
		if !ok {
			bad = append(bad, pkg+": in no layer")
			continue
		}
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok || dep == pkg {
				continue
			}
			if l, known := layer[dep]; known && l >= own {
				bad = append(bad, pkg+" (layer "+strconv.Itoa(own)+") imports "+dep+" (layer "+strconv.Itoa(l)+")")
			}
		}
	}
	return bad
}
