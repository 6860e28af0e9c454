package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// readFile sets c from the YAML file at path. The file is parsed into
// yaml's node tree and walked against the key table, so that every key it
// names is checked (an unknown or repeated key is an error with its line)
// and every value is read as its flag reads it.
func (c *Serve) readFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	c.file = path
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF { // empty, or only comments
			return nil
		}
		return fmt.Errorf("%s: %v", path, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err != io.EOF {
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		return fmt.Errorf("%s:%d: a second YAML document; the file holds one", path, more.Line)
	}
	r := fileReader{c: c, path: path, dir: filepath.Dir(path)}
	if len(doc.Content) > 0 {
		r.mapping(doc.Content[0], "")
	}
	return errors.Join(r.errs...)
}

type fileReader struct {
	c         *Serve
	path, dir string
	errs      []error
}

func (r *fileReader) fail(n *yaml.Node, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s:%d: %s", r.path, n.Line, fmt.Sprintf(format, args...)))
}

// mapping reads the section at path ("" for the whole file).
func (r *fileReader) mapping(n *yaml.Node, path string) {
	n = deref(n)
	if isNull(n) { // "node:" with nothing under it
		return
	}
	if n.Kind != yaml.MappingNode {
		r.fail(n, "%s: want a mapping of keys (%s), found %s", sectionName(path), strings.Join(sections[path], ", "), kind(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := deref(n.Content[i]), n.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			r.fail(kn, "%s: a key must be a plain name, found %s", sectionName(path), kind(kn))
			continue
		}
		name := kn.Value
		p := name
		if path != "" {
			p = path + "." + name
		}
		if line, dup := seen[name]; dup {
			r.fail(kn, "key %s given twice (first at line %d)", p, line)
			continue
		}
		seen[name] = kn.Line
		if k := keyByPath[p]; k != nil {
			r.leaf(k, vn)
		} else if _, ok := sections[p]; ok {
			r.mapping(vn, p)
		} else if name == "<<" {
			r.fail(kn, "%s: merge keys (<<) are not supported; write the keys out", sectionName(path))
		} else {
			r.fail(kn, "unknown key %s (%s takes: %s)", p, sectionName(path), strings.Join(sections[path], ", "))
		}
	}
}

// leaf reads the value of k.
func (r *fileReader) leaf(k *key, n *yaml.Node) {
	n = deref(n)
	var v reflect.Value
	switch {
	case isNull(n): // "password:" with no value: the key's zero
		v = reflect.Zero(k.typ)
	case n.Kind == yaml.ScalarNode:
		var err error
		if v, err = parseValue(k.typ, n.Value); err != nil {
			r.fail(n, "%s: %v", k.path, err)
			return
		}
	case n.Kind == yaml.SequenceNode && isStrings(k.typ):
		list := []string{}
		for _, item := range n.Content {
			item = deref(item)
			if item.Kind != yaml.ScalarNode || isNull(item) {
				r.fail(item, "%s: want a list of strings, found %s in it", k.path, kind(item))
				return
			}
			list = append(list, strings.TrimSpace(item.Value))
		}
		v = reflect.ValueOf(list)
	default:
		want := "a single value"
		if isStrings(k.typ) {
			want = "a value or a list of values"
		}
		r.fail(n, "%s: want %s, found %s", k.path, want, kind(n))
		return
	}
	if k.file && v.String() != "" && !filepath.IsAbs(v.String()) {
		v = reflect.ValueOf(filepath.Join(r.dir, v.String()))
	}
	r.c.set(k, v, origin{fromFile, fmt.Sprintf("%s:%d", r.path, n.Line)})
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", RedactURL(n.Value)) // a server URL out of place may carry credentials
	}
	return "something else"
}

func sectionName(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}
