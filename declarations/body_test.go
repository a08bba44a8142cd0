package declarations

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func TestBodyValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		body Body
	}{
		{"nil files", Body{}},
		{"empty files", Body{Files: []File{}}},
		{"sample", sampleBody()},
		{"empty content", Body{Files: []File{{Path: "empty", Content: strp("")}}}},
		{"empty base64", Body{Files: []File{{Path: "empty", ContentBase64: strp("")}}}},
		{"dots inside names", Body{Files: []File{{Path: "a/..b/c..", Content: strp("")}, {Path: ".hidden", Content: strp("")}}}},
		{"siblings with shared prefix", Body{Files: []File{{Path: "etc/a", Content: strp("")}, {Path: "etc/ab", Content: strp("")}, {Path: "etc/a.d/x", Content: strp("")}}}},
		{"mode without leading zero", Body{Files: []File{{Path: "f", Content: strp(""), Mode: "600"}}}},
		{"mode one digit", Body{Files: []File{{Path: "f", Content: strp(""), Mode: "0"}}}},
		{"mode 0777", Body{Files: []File{{Path: "f", Content: strp(""), Mode: "0777"}}}},
		{"numeric owner", Body{Files: []File{{Path: "f", Content: strp(""), Owner: "0", Group: "4294967294"}}}},
		{"owner 32 chars", Body{Files: []File{{Path: "f", Content: strp(""), Owner: strings.Repeat("a", 32)}}}},
		{"owner with punctuation", Body{Files: []File{{Path: "f", Content: strp(""), Owner: "svc_app.x-1"}}}},
		{"path at max length", Body{Files: []File{{Path: strings.TrimSuffix(strings.Repeat(strings.Repeat("a", 204)+"/", 5), "/"), Content: strp("")}}}},
		{"path element at max length", Body{Files: []File{{Path: "etc/" + strings.Repeat("é", MaxPathElementLen/2) + "a", Content: strp("")}}}},
		{"unicode path", Body{Files: []File{{Path: "etc/café.conf", Content: strp("")}}}},
		{"content at max size", Body{Files: []File{{Path: "f", Content: strp(strings.Repeat("x", MaxFileSize))}}}},
		{"base64 at max size", Body{Files: []File{{Path: "f", ContentBase64: strp(base64.StdEncoding.EncodeToString(make([]byte, MaxFileSize)))}}}},
		{"max files", Body{Files: manyFiles(MaxFiles)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.body.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			// What Validate accepts survives a round trip through the wire
			// form with the same digest.
			enc, err := json.Marshal(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseBody(enc)
			if err != nil {
				t.Fatalf("ParseBody(json.Marshal(body)): %v", err)
			}
			if back.Digest() != tc.body.Digest() {
				t.Error("digest changed across a round trip")
			}
		})
	}
}

func manyFiles(n int) []File {
	fs := make([]File, n)
	for i := range fs {
		fs[i] = File{Path: fmt.Sprintf("d/f%d", i), Content: strp("x")}
	}
	return fs
}

func TestBodyValidateRefuses(t *testing.T) {
	ok := strp("x")
	f := func(p string) File { return File{Path: p, Content: ok} }
	tests := []struct {
		name    string
		files   []File
		index   int
		mention string
	}{
		{"too many files", manyFiles(MaxFiles + 1), -1, "at most 1000"},
		{"empty path", []File{f("")}, 0, "empty"},
		{"path too long", []File{f("a"), f(strings.Repeat("a", MaxPathLen+1))}, 1, "at most 1024"},
		// Signed and sent, it was refused by every host at apply, for ever.
		{"path element too long", []File{f("etc/" + strings.Repeat("é", 128))}, 0, "is 256 bytes, at most 255 are allowed"},
		{"invalid UTF-8 path", []File{f("a\xffb")}, 0, "UTF-8"},
		{"NUL in path", []File{f("a\x00b")}, 0, "NUL"},
		{"newline in path", []File{f("etc/a\nb")}, 0, "control character"},
		{"tab in path", []File{f("etc/a\tb")}, 0, "control character"},
		{"DEL in path", []File{f("etc/a\x7fb")}, 0, "control character"},
		// What a reviewer reads of a dry run or a log is not what is written.
		{"right-to-left override in path", []File{f("etc/a\u202egnp.exe")}, 0, "U+202E"},
		{"zero-width space in path", []File{f("etc/app\u200b.conf")}, 0, "U+200B"},
		{"byte order mark in path", []File{f("\ufeffetc/a")}, 0, "U+FEFF"},
		{"C1 control in path", []File{f("etc/a\u0085b")}, 0, "control character"},
		{"absolute path", []File{f("/etc/passwd")}, 0, "absolute"},
		{"dot", []File{f(".")}, 0, "managed root itself"},
		{"dot slash", []File{f("./a")}, 0, "not clean"},
		{"double slash", []File{f("a//b")}, 0, "not clean"},
		{"trailing slash", []File{f("a/")}, 0, "not clean"},
		{"inner dot", []File{f("a/./b")}, 0, "not clean"},
		{"dot dot", []File{f("..")}, 0, `".."`},
		{"leading dot dot", []File{f("../etc/passwd")}, 0, `".."`},
		// Said as "..", not as unclean: the clean form ("../b") is no advice.
		{"dot dot in middle", []File{f("a/../../b")}, 0, `path contains ".."`},
		{"dot dot at the end", []File{f("a/..")}, 0, `path contains ".."`},
		// A hook's tools would take it for an option (MESH_CHANGED).
		{"leading dash", []File{f("--checkpoint-action=exec=sh x")}, 0, `begins with "-"`},
		{"dash element", []File{f("etc/-rf")}, 0, `path element "-rf" begins with "-"`},
		{"duplicate path", []File{f("a"), f("b"), f("a")}, 2, "declared by file 0"},
		{"parent is a file", []File{f("etc"), f("etc/app.conf")}, 1, `inside "etc"`},
		{"grandparent is a file", []File{f("a/b/c/d"), f("a/b")}, 0, `inside "a/b"`},
		{"no content", []File{{Path: "a"}}, 0, "neither content nor content_base64"},
		{"both contents", []File{{Path: "a", Content: ok, ContentBase64: strp("eA==")}}, 0, "both content and content_base64"},
		{"content invalid UTF-8", []File{{Path: "a", Content: strp("\xff")}}, 0, "content_base64 for binary"},
		{"content too large", []File{{Path: "a", Content: strp(strings.Repeat("x", MaxFileSize+1))}}, 0, "at most 524288"},
		{"base64 invalid", []File{{Path: "a", ContentBase64: strp("!!!!")}}, 0, "not valid standard base64"},
		{"base64 non-canonical", []File{{Path: "a", ContentBase64: strp("YR==")}}, 0, "not valid standard base64"},
		{"base64 unpadded", []File{{Path: "a", ContentBase64: strp("YQ")}}, 0, "not valid standard base64"},
		{"base64 line break", []File{{Path: "a", ContentBase64: strp("YWJj\nZGVm")}}, 0, "not valid standard base64"},
		{"base64 url alphabet", []File{{Path: "a", ContentBase64: strp("-_-_")}}, 0, "not valid standard base64"},
		{"base64 too large", []File{{Path: "a", ContentBase64: strp(base64.StdEncoding.EncodeToString(make([]byte, MaxFileSize+1)))}}, 0, "524288"},
		{"mode setuid", []File{{Path: "a", Content: ok, Mode: "4755"}}, 0, `mode "4755" sets the setuid, setgid or sticky bit, which declarations refuse: they write ordinary files, none that runs as its owner or group; write "0755"`},
		{"mode sticky", []File{{Path: "a", Content: ok, Mode: "1777"}}, 0, `sets the setuid, setgid or sticky bit`},
		{"mode five digits", []File{{Path: "a", Content: ok, Mode: "04755"}}, 0, "is not octal permission bits"},
		{"mode not octal", []File{{Path: "a", Content: ok, Mode: "0648"}}, 0, "mode"},
		{"mode too long", []File{{Path: "a", Content: ok, Mode: "00644"}}, 0, "mode"},
		{"mode with prefix", []File{{Path: "a", Content: ok, Mode: "0o644"}}, 0, "mode"},
		{"mode signed", []File{{Path: "a", Content: ok, Mode: "+644"}}, 0, "mode"},
		{"mode words", []File{{Path: "a", Content: ok, Mode: "rw-r--r--"}}, 0, "mode"},
		{"owner too long", []File{{Path: "a", Content: ok, Owner: strings.Repeat("a", 33)}}, 0, "owner"},
		{"owner upper case", []File{{Path: "a", Content: ok, Owner: "Root"}}, 0, "owner"},
		{"owner with space", []File{{Path: "a", Content: ok, Owner: "a b"}}, 0, "owner"},
		{"owner with colon", []File{{Path: "a", Content: ok, Owner: "a:b"}}, 0, "owner"},
		{"group id too large", []File{{Path: "a", Content: ok, Group: "4294967296"}}, 0, "group"},
		{"group id minus one", []File{{Path: "a", Content: ok, Group: "4294967295"}}, 0, "group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Body{Files: tc.files}.Validate()
			wantCode(t, err, "invalid_body")
			be := asBodyError(t, err)
			if be.Index != tc.index {
				t.Errorf("Index = %d, want %d (%v)", be.Index, tc.index, err)
			}
			if tc.index >= 0 && be.Path != tc.files[tc.index].Path {
				t.Errorf("Path = %q, want %q", be.Path, tc.files[tc.index].Path)
			}
			wantErrContains(t, err, tc.mention)
		})
	}
}

func TestBodyErrorMessageBounded(t *testing.T) {
	err := Body{Files: []File{{Path: "/" + strings.Repeat("a", MaxPathLen), Content: strp("")}}}.Validate()
	if len(err.Error()) > 600 {
		t.Errorf("message is %d bytes for a hostile path", len(err.Error()))
	}
}

func TestParseBody(t *testing.T) {
	b, err := ParseBody([]byte(`{"files":[{"path":"etc/app.conf","content":"text","mode":"0640"},{"path":"bin/x","content_base64":"AAE=","owner":"0"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Files) != 2 || *b.Files[0].Content != "text" || b.Files[0].Mode != "0640" || *b.Files[1].ContentBase64 != "AAE=" || b.Files[1].Owner != "0" {
		t.Errorf("parsed %+v", b)
	}
	// A whole surrogate pair is a character; an escaped backslash before "ud800"
	// is text.
	for raw, want := range map[string]string{
		`{"files":[{"path":"a","content":"\ud83d\ude00 \\ud800 \u00e9"}]}`: "\U0001F600 \\ud800 é",
		`{"files":[{"path":"\ud83d\ude00","content":""}]}`:                 "",
	} {
		b, err := ParseBody([]byte(raw))
		if err != nil || *b.Files[0].Content != want {
			t.Errorf("ParseBody(%s) = %+v, %v; want content %q", raw, b, err, want)
		}
	}
	for _, raw := range []string{`{}`, `{"files":[]}`, " {\n\t\"files\" : [ ] } \n"} {
		b, err := ParseBody([]byte(raw))
		if err != nil || len(b.Files) != 0 {
			t.Errorf("ParseBody(%q) = %+v, %v; want an empty body", raw, b, err)
		}
		if b.Digest() != (Body{}).Digest() {
			t.Errorf("ParseBody(%q): digest differs from the empty body's", raw)
		}
	}
}

func TestParseBodyRefuses(t *testing.T) {
	tests := []struct{ name, raw, mention string }{
		{"empty", ``, "truncated"},
		{"truncated", `{"files":[{"path":"a","content":"x"}`, "truncated"},
		{"not an object", `[]`, "must be an object"},
		{"unknown top-level field", `{"files":[],"mode":"0644"}`, `unknown field "mode"`},
		{"unknown file field", `{"files":[{"path":"a","content":"x","size":1}]}`, `unknown field "size"`},
		{"field in other case", `{"files":[{"Path":"a","content":"x"}]}`, `unknown field "Path"`},
		{"duplicate path key", `{"files":[{"path":"a","path":"b","content":"x"}]}`, `"path" appears twice`},
		{"duplicate files key", `{"files":[],"files":[{"path":"a","content":"x"}]}`, `"files" appears twice`},
		{"null content", `{"files":[{"path":"a","content":null,"content_base64":"eA=="}]}`, "null"},
		{"null files", `{"files":null}`, "null"},
		{"missing path", `{"files":[{"content":"x"}]}`, `"path" is missing`},
		{"number for string", `{"files":[{"path":1,"content":"x"}]}`, "must be a string"},
		{"trailing data", `{"files":[]} {}`, "trailing data"},
		{"trailing garbage", `{"files":[]}x`, "trailing"},
		{"invalid UTF-8", "{\"files\":[{\"path\":\"a\xff\",\"content\":\"x\"}]}", "UTF-8"},
		// Half a surrogate pair reads as U+FFFD: the text would change unsaid.
		{"lone high surrogate in content", `{"files":[{"path":"a","content":"x\ud800y"}]}`, "the \\u escape at line 1, column 35 is half a UTF-16 surrogate pair"},
		{"lone low surrogate in path", `{"files":[{"path":"a\udc00","content":"x"}]}`, "half a UTF-16 surrogate pair"},
		{"high surrogate then another", `{"files":[{"path":"a","content":"\ud800\ud800"}]}`, "half a UTF-16 surrogate pair"},
		{"high surrogate at the end", `{"files":[{"path":"a","content":"\ud83d"}]}`, "half a UTF-16 surrogate pair"},
		{"rule broken after parsing", `{"files":[{"path":"../a","content":"x"}]}`, `".."`},
		{"oversized", `{"files":[` + strings.Repeat(" ", MaxEnvelopeSize) + `]}`, "more than a declaration can carry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseBody([]byte(tc.raw))
			wantCode(t, err, "invalid_body")
			asBodyError(t, err)
			wantErrContains(t, err, tc.mention)
		})
	}
}

func TestFileData(t *testing.T) {
	bin := []byte{0, 1, 2, 0xff}
	got, err := File{Path: "a", ContentBase64: strp(base64.StdEncoding.EncodeToString(bin))}.Data()
	if err != nil || !bytes.Equal(got, bin) {
		t.Errorf("Data = %v, %v", got, err)
	}
	got, err = File{Path: "a", Content: strp("héllo")}.Data()
	if err != nil || string(got) != "héllo" {
		t.Errorf("Data = %q, %v", got, err)
	}
	got, err = File{Path: "a", Content: strp("")}.Data()
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty content: Data = %v, %v; want empty non-nil", got, err)
	}
	_, err = File{Path: "a"}.Data()
	wantCode(t, err, "invalid_body")
	wantErrContains(t, err, `path "a"`)
	_, err = File{Path: "a", ContentBase64: strp("YR==")}.Data()
	wantCode(t, err, "invalid_body")
}

func TestFileMode(t *testing.T) {
	tests := []struct {
		mode string
		want fs.FileMode
		ok   bool
	}{
		{"", 0o644, true},
		{"0640", 0o640, true},
		{"640", 0o640, true},
		{"0", 0, true},
		{"7", 0o7, true},
		{"0777", 0o777, true},
		{"0700", 0o700, true},
		{"777", 0o777, true},
		{"1777", 0, false},
		{"2755", 0, false},
		{"4755", 0, false},
		{"0800", 0, false},
		{"00640", 0, false},
		{"-1", 0, false},
		{" 644", 0, false},
		{"0x1ff", 0, false},
	}
	for _, tc := range tests {
		got, err := File{Path: "a", Mode: tc.mode}.FileMode()
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("FileMode(%q) = %v, %v; want %v", tc.mode, got, err, tc.want)
		}
		if !tc.ok {
			wantCode(t, err, "invalid_body")
		}
		if got&^fs.ModePerm != 0 {
			t.Errorf("FileMode(%q) = %v has bits beyond permissions", tc.mode, got)
		}
	}
}

func TestBodyDigest(t *testing.T) {
	a := sampleBody()
	if a.Digest() != sampleBody().Digest() {
		t.Error("equal bodies, different digests")
	}
	if (Body{}).Digest() != (Body{Files: []File{}}).Digest() {
		t.Error("nil and empty Files digest differently")
	}
	for _, b := range []Body{{}, sampleBody()} {
		enc, err := json.Marshal(b)
		if err != nil || b.Digest() != sha256.Sum256(enc) {
			t.Errorf("Digest is not SHA-256 of json.Marshal(body) (%v)", err)
		}
	}
	enc, _ := json.Marshal(Body{})
	if string(enc) != `{"files":[]}` {
		t.Errorf("empty body encodes as %s", enc)
	}
	changes := []func(*Body){
		func(b *Body) { b.Files[0].Mode = "0600" },
		func(b *Body) { b.Files[0].Owner = "root" },
		func(b *Body) { b.Files[0].Path = "etc/app2.conf" },
		func(b *Body) { b.Files[0].Content = strp("listen = 8081\n") },
		func(b *Body) { b.Files = b.Files[:1] },
		func(b *Body) { b.Files[0], b.Files[1] = b.Files[1], b.Files[0] },
	}
	for i, change := range changes {
		b := sampleBody()
		change(&b)
		if b.Digest() == a.Digest() {
			t.Errorf("change %d did not change the digest", i)
		}
	}
}
