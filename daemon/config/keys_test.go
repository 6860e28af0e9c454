package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Every flag of serve has an environment variable and a YAML key, and the
// three set the same field; every field of Serve has a flag. A key added to
// the struct without a flag, or a flag whose path names no field, fails
// here.
func TestEveryFlagHasEnvAndYAMLKey(t *testing.T) {
	fs, _ := flagSet()
	var flags []string
	fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, f.Name) })
	if len(flags) != len(keys)+1 {
		t.Fatalf("%d flags for %d keys and --config", len(flags), len(keys))
	}
	snake := regexp.MustCompile(`^SLOTMOVER_[A-Z0-9]+(_[A-Z0-9]+)*$`)
	envs := map[string]string{}
	dir := t.TempDir()
	for _, name := range flags {
		env := envName(name)
		if !snake.MatchString(env) || env != "SLOTMOVER_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_")) {
			t.Errorf("--%s: environment variable %s", name, env)
		}
		if other, dup := envs[env]; dup {
			t.Errorf("--%s and --%s share %s", name, other, env)
		}
		envs[env] = name
		if name == configFlag {
			continue
		}
		k := keyByFlag[name]
		if k == nil {
			t.Errorf("--%s has no key", name)
			continue
		}
		// The path names a field through the yaml tags, found here
		// without the table's own index.
		want := fieldAt(t, k.path)
		if !want.IsValid() {
			continue
		}
		raw := sample(k.typ)
		def := k.field(Defaults())
		viaFlag, err := load([]string{"--" + name + "=" + raw}, nil)
		if err != nil {
			t.Errorf("--%s %s: %v", name, raw, err)
			continue
		}
		viaEnv, err := load(nil, envMap(map[string]string{env: raw}))
		if err != nil {
			t.Errorf("%s=%s: %v", env, raw, err)
			continue
		}
		file := writeFile(t, dir, name+".yaml", yamlAt(k.path, raw))
		viaFile, err := load([]string{"--config", file}, nil)
		if err != nil {
			t.Errorf("%s: %s: %v", k.path, raw, err)
			continue
		}
		got := fieldAt(t, k.path, viaFlag)
		if reflect.DeepEqual(got.Interface(), def.Interface()) {
			t.Errorf("--%s %s left %s at its default", name, raw, k.path)
		}
		if e, f := fieldAt(t, k.path, viaEnv), fieldAt(t, k.path, viaFile); !reflect.DeepEqual(got.Interface(), e.Interface()) ||
			!reflect.DeepEqual(got.Interface(), f.Interface()) {
			t.Errorf("%s: flag gives %v, %s gives %v, the file gives %v", k.path, got, env, e, f)
		}
		// Nothing else changed.
		for _, c := range []*Serve{viaFlag, viaEnv, viaFile} {
			fieldAt(t, k.path, c).Set(def)
			c.from, c.file = nil, ""
			if !reflect.DeepEqual(c, Defaults()) {
				t.Errorf("setting %s changed more: %+v", k.path, c)
			}
		}
	}
	// Every field of Serve is a key.
	var leaves []string
	walkLeaves(reflect.TypeFor[Serve](), "", &leaves)
	var paths []string
	for _, k := range keys {
		paths = append(paths, k.path)
	}
	slices.Sort(leaves)
	slices.Sort(paths)
	if !slices.Equal(leaves, paths) {
		t.Errorf("fields of Serve: %v\nkeys: %v", leaves, paths)
	}
}

// fieldAt finds the field at a YAML path by the yaml tags, in c (default:
// a fresh Serve).
func fieldAt(t *testing.T, path string, cs ...*Serve) reflect.Value {
	t.Helper()
	c := &Serve{}
	if len(cs) > 0 {
		c = cs[0]
	}
	v := reflect.ValueOf(c).Elem()
	for _, part := range strings.Split(path, ".") {
		found := false
		for i := range v.NumField() {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); tag == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			t.Errorf("key %s: no field tagged %q", path, part)
			return reflect.Value{}
		}
	}
	return v
}

func walkLeaves(t reflect.Type, prefix string, out *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			panic("field " + f.Name + " has no yaml tag")
		}
		if prefix != "" {
			tag = prefix + "." + tag
		}
		if f.Type.Kind() == reflect.Struct && f.Type != durationType {
			walkLeaves(f.Type, tag, out)
		} else {
			*out = append(*out, tag)
		}
	}
}

// sample is a value of type t that no default has. Strings are absolute
// paths, which a file key keeps as they are.
func sample(t reflect.Type) string {
	switch {
	case t == durationType:
		return "7s"
	case t.Kind() == reflect.String:
		return "/sample"
	case t.Kind() == reflect.Bool:
		return "true"
	case isStrings(t):
		return "nats://a:1,nats://b:2"
	default:
		return "7"
	}
}
