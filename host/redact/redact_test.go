package redact

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestSecretsAreHidden (audit of secrets, finding 2): a failing hook's output went to
// the control plane's replicated state with only tokens hidden. Nkey seeds of every
// type, PEM private keys (whole, or cut short where the kept output ends) and a
// creds file's seed are hidden; the text around them, and text that only resembles
// them, is kept.
func TestSecretsAreHidden(t *testing.T) {
	var seeds []string
	for _, mk := range []func() (nkeys.KeyPair, error){nkeys.CreateUser, nkeys.CreateAccount, nkeys.CreateOperator, nkeys.CreateServer, nkeys.CreateCluster, nkeys.CreateCurveKeys} {
		kp, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		s, _ := kp.Seed()
		seeds = append(seeds, string(s))
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	ecPEM := strings.Replace(keyPEM, "PRIVATE KEY", "EC PRIVATE KEY", 2)
	body := strings.Split(keyPEM, "\n")[1]
	creds := "-----BEGIN USER NKEY SEED-----\n" + seeds[0] + "\n------END USER NKEY SEED------\n"
	for _, c := range []struct{ in, gone string }{
		{"failed to load key " + seeds[0] + ": bad", seeds[0]},
		{"config check: " + keyPEM + "after", body},
		{"config check: " + ecPEM, body},
		{"cut short: " + keyPEM[:len(keyPEM)/2], body},
		{creds, seeds[0]},
	} {
		got := Secrets(c.in)
		if strings.Contains(got, c.gone) || !strings.Contains(got, Hidden) {
			t.Errorf("Secrets(%q) = %q: the secret is not hidden", c.in, got)
		}
	}
	for _, s := range seeds {
		if got := Secrets("seed=" + s + "."); got != "seed="+Hidden+"." {
			t.Errorf("the seed %.2s…: %q", s, got)
		}
	}
	// Text that is no secret is kept: a public key, a certificate, words.
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	for _, keep := range []string{"user " + pub, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "SUCCESS: restarted app.service", "port 8080 in use"} {
		if got := Secrets(keep); got != keep {
			t.Errorf("Secrets(%q) = %q, want it kept", keep, got)
		}
	}
}

// TestCutSecretsHidesAKeyWhoseStartWasCut (a reviewer's audit, 2026-12, finding 9):
// the end of a long output was kept, cut inside a private key longer than about
// 4 KiB (RSA of 6,144 bits or more): its BEGIN line gone, the rest of its body was
// reported in the clear. Cut, a text is hidden from its start to the first END
// PRIVATE KEY line; what follows is kept, and its own secrets hidden.
func TestCutSecretsHidesAKeyWhoseStartWasCut(t *testing.T) {
	material := make([]byte, 4700) // an RSA 8192-bit key's DER is about this long
	if _, err := rand.Read(material); err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: material}))
	lines := strings.Split(keyPEM, "\n")
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	// The cut falls in the key's body: half its lines are left, no BEGIN line.
	cut := strings.Join(lines[len(lines)/2:], "\n") + "config check failed: seed " + string(seed) + "\n"
	got := CutSecrets(cut)
	for _, l := range lines[len(lines)/2 : len(lines)-2] {
		if strings.Contains(got, l) {
			t.Fatalf("a line of the key's body is left: %.60q…\n%s", l, got)
		}
	}
	if strings.Contains(got, string(seed)) || !strings.HasPrefix(got, Hidden) || !strings.Contains(got, "config check failed") {
		t.Fatalf("CutSecrets = %q: want the key hidden, the words after it kept, the seed hidden", got)
	}
	// A whole key in a cut text: hidden, and the text before it with it.
	if got := CutSecrets("before " + keyPEM + "after"); got != Hidden+"\nafter" {
		t.Fatalf("a whole key in a cut text: %.80q", got)
	}
	// Nothing of a key: as Secrets.
	if in := "… the real reason\n"; CutSecrets(in) != in {
		t.Fatalf("CutSecrets(%q) = %q, want it kept", in, CutSecrets(in))
	}
}

// TestNamedSecretsAreHidden (a walkthrough): a failing hook that printed a
// service's configuration (DB_PASSWORD=hunter2) had it shown by declare --wait,
// status and nodes --json, and kept in every control node's Raft log and backups.
// The value given to a name of a password, secret, token or key, as a shell, an
// environment, INI, YAML, JSON or an HTTP header writes it, and a URL's password,
// are hidden; the text around them, and text that names no secret, are kept; and
// hiding again what was hidden changes nothing (the control plane hides an
// agent's report again).
func TestNamedSecretsAreHidden(t *testing.T) {
	const pw = "hunter2x"
	for _, c := range []struct{ in, want string }{
		{"DB_PASSWORD=" + pw, "DB_PASSWORD=" + Hidden},
		{"export AWS_SECRET_ACCESS_KEY='" + pw + " more'", "export AWS_SECRET_ACCESS_KEY=" + Hidden},
		{`{"api_key": "` + pw + `", "user": "app"}`, `{"api_key": ` + Hidden + `, "user": "app"}`},
		{"password: " + pw + "\nport: 5432", "password: " + Hidden + "\nport: 5432"},
		{"[db]\npasswd = " + pw + "\n", "[db]\npasswd = " + Hidden + "\n"},
		{"Authorization: Bearer " + pw, "Authorization: Bearer " + Hidden},
		{"start: --password=" + pw + " --port 80", "start: --password=" + Hidden + " --port 80"},
		{"SECRET_KEY_BASE=" + pw + ";next", "SECRET_KEY_BASE=" + Hidden}, // a line of its own: all of it
		{"Server=db;Uid=app;Pwd=" + pw + ";Port=5", "Server=db;Uid=app;Pwd=" + Hidden + ";Port=5"},
		{"password=" + pw + ",more", "password=" + Hidden},
		{"dsn postgres://app:" + pw + "@db:5432/x failed", "dsn postgres://app:" + Hidden + "@db:5432/x failed"},
		{"GITHUB_TOKEN=" + pw, "GITHUB_TOKEN=" + Hidden},
		// A review's: values with blanks, on the next lines, escaped quotes, other
		// separators and forms.
		{`password = "a ` + pw + `"`, "password = " + Hidden},
		{"password: >\n  " + pw + "\n  more\nport: 5\n", "password: >\n  " + Hidden + "\nport: 5\n"},
		{"db:\n  password: |\n    " + pw + "\n  port: 5\n", "db:\n  password: |\n    " + Hidden + "\n  port: 5\n"},
		{"password:\n  " + pw + "\n", "password:\n  " + Hidden + "\n"},
		{"password:\r\n  " + pw + "\r\n", "password:\r\n  " + Hidden + "\r\n"},
		{`{"password":"a\"` + pw + `"}`, `{"password":` + Hidden + `}`},
		{"PASSWORD:=" + pw, "PASSWORD:=" + Hidden},
		{"X-Api-Key: " + pw, "X-Api-Key: " + Hidden},
		{"run: app --password " + pw + " --port 80", "run: app --password " + Hidden + " --port 80"},
		{"passphrase = correct " + pw + " staple", "passphrase = " + Hidden},
		{"Server=db;User Id=app;Password=a " + pw + ";Port=5", "Server=db;User Id=app;Password=" + Hidden + ";Port=5"},
		{"MYSQL_PWD=" + pw, "MYSQL_PWD=" + Hidden},
		{"DB_PASS=" + pw, "DB_PASS=" + Hidden},
		{"<password>" + pw + "</password>", "<password>" + Hidden + "</password>"},
		{"password=<" + pw + ">", "password=" + Hidden},
		{"password: [" + pw + "]", "password: " + Hidden},
		{"postgres://app:" + pw + "@x@db/x", "postgres://app:" + Hidden + "@db/x"},
		{"redis://:" + pw + "/x@db:6379", "redis://:" + Hidden + "@db:6379"},
		{"Set-Cookie: sid=" + pw + "; HttpOnly", "Set-Cookie: " + Hidden},
		{`"password" => "` + pw + `"`, `"password" => ` + Hidden},
		{`secret = """` + pw + ` x"""`, "secret = " + Hidden},
		// A second review's.
		{`mysql --password "` + pw + ` x" -u app`, "mysql --password " + Hidden + " -u app"},
		{"> Authorization: Bearer " + pw + "\n< Set-Cookie: sid=" + pw + "; HttpOnly\n", "> Authorization: Bearer " + Hidden + "\n< Set-Cookie: " + Hidden + "\n"},
		{"password: |\n  " + pw + "\n\n  " + pw + "\nport: 5", "password: |\n  " + Hidden + "\nport: 5"},
		{"passwords:\n- " + pw + "\nport: 5", "passwords:\n" + Hidden + "\nport: 5"},
		{"password:\r  " + pw + "\rport: 5", "password:\r  " + Hidden + "\rport: 5"},
		{"db: {user: app, password: " + pw + "}", "db: {user: app, password: " + Hidden + "}"},
		// A third review's.
		{"<privateKey>\nMIIE" + pw + "\nAAAA", "<privateKey>" + Hidden},
		{"env:\n- name: DB_PASSWORD\n  value: " + pw + "\n- name: PORT\n  value: \"5\"", "env:\n- name: DB_PASSWORD\n  value: " + Hidden + "\n- name: PORT\n  value: \"5\""},
		{`{"name":"DB_PASSWORD","value":"` + pw + `"}`, `{"name":"DB_PASSWORD","value":` + Hidden + `}`},
		{`<add key="Password" value="` + pw + `"/>`, `<add key="Password" value=` + Hidden + `/>`},
		{`curl -H "Authorization: Bearer ` + pw + `" https://x`, `curl -H "Authorization: Bearer ` + Hidden + `" https://x`},
		{`curl -H 'X-Api-Key: ` + pw + `' https://x`, `curl -H 'X-Api-Key: ` + Hidden + `' https://x`},
		{`"{\"password\":\"` + pw + `\"}"`, `"{\"password\":` + Hidden + `}"`},
		{"DB_PASSWORD ?= " + pw, "DB_PASSWORD ?= " + Hidden},
		{"  - token:\n    " + pw + "\n  - other", "  - token:\n    " + Hidden + "\n  - other"},
		// A fourth review's: what lies between a pair's name and its value is
		// read too; AWS and CloudFormation pairs; a flag's capitalised value.
		{"- name: DB_PASSWORD\n  valueFrom: {}\n+ export API_TOKEN=" + pw + "\necho value=1", "- name: DB_PASSWORD\n  valueFrom: {}\n+ export API_TOKEN=" + Hidden + "\necho value=" + Hidden},
		{`{"Name": "/app/db/password", "Type": "SecureString", "Value": "` + pw + `"}`, `{"Name": "/app/db/password", "Type": "SecureString", "Value": ` + Hidden + `}`},
		{`{"ParameterKey": "DbPassword", "ParameterValue": "` + pw + `"}`, `{"ParameterKey": "DbPassword", "ParameterValue": ` + Hidden + `}`},
		{"app --password HUNTER2X --port 80", "app --password " + Hidden + " --port 80"},
		{`<property name="hibernate.connection.password">` + pw + `</property>`, `<property name="hibernate.connection.password">` + Hidden + `</property>`},
		{`<entry key="db.password">` + pw + `</entry>`, `<entry key="db.password">` + Hidden + `</entry>`},
		{`<entry key="db.password" token="` + pw + `">` + pw + `</entry>`, `<entry key="db.password" token=` + Hidden + `>` + Hidden + `</entry>`},
		// A fifth review's: the tag's own value="…" beside its text.
		{`<entry key="password" value="` + pw + `">x</entry>`, `<entry key="password" value=` + Hidden + `>` + Hidden + `</entry>`},
		{`<input type="password" name="password" value="` + pw + `">` + "\n<br>", `<input type="password" name="password" value=` + Hidden + `>` + Hidden + `<br>`},
		{`<e key="password" token="a<b">` + pw + `</e>`, `<e key="password" token=` + Hidden + `>` + Hidden + `</e>`},
		{`<e key="db.password" token=t1/>` + "\nx", `<e key="db.password" token=` + Hidden + "/>\nx"},
		// A security review's: a quote that wraps the pair (set -x, a unit's
		// Environment=, docker), a connection string whose secret comes first,
		// XML with attributes, a namespace's prefix or CDATA, names of keys,
		// Vault's secret_id, and quotes escaped as YAML and shells write them.
		{"+ export 'DB_PASSWORD=a " + pw + "'", "+ export 'DB_PASSWORD=" + Hidden + "'"},
		{`Environment="DB_PASSWORD=a ` + pw + `" "PORT=5"`, `Environment="DB_PASSWORD=` + Hidden + `" "PORT=5"`},
		{`docker run -e "DB_PASSWORD=a ` + pw + `" img`, `docker run -e "DB_PASSWORD=` + Hidden + `" img`},
		{`"Env": ["DB_PASSWORD=a ` + pw + `", "PORT=5"]`, `"Env": ["DB_PASSWORD=` + Hidden + `", "PORT=5"]`},
		{`"Env": ["DB_PASSWORD=a\"` + pw + `"]`, `"Env": ["DB_PASSWORD=` + Hidden + `"]`},
		{`"{\"Env\":[\"DB_PASSWORD=a ` + pw + `\"]}"`, `"{\"Env\":[\"DB_PASSWORD=` + Hidden + `\"]}"`},
		{`["--password=a ` + pw + `"]`, `["--password=` + Hidden + `"]`},
		{`curl -H "Cookie: theme=dark; sid=` + pw + `" https://x`, `curl -H "Cookie: ` + Hidden + `" https://x`},
		{"conn: Password=a " + pw + ";Server=x", "conn: Password=" + Hidden + ";Server=x"},
		{`<wsse:Username>u</wsse:Username><wsse:Password Type="x#PasswordText">` + pw + `</wsse:Password>`, `<wsse:Username>u</wsse:Username><wsse:Password Type="x#PasswordText">` + Hidden + `</wsse:Password>`},
		{"<ns:password>" + pw + "</ns:password>", "<ns:password>" + Hidden + "</ns:password>"},
		{`<password encrypted="false">` + pw + `</password>`, `<password encrypted="false">` + Hidden + `</password>`},
		{"<password><![CDATA[" + pw + " x]]></password>", "<password><![CDATA[" + Hidden + "]]></password>"},
		{"ENCRYPTION_KEY=" + pw, "ENCRYPTION_KEY=" + Hidden},
		{"run: JWT_SIGNING_KEY=" + pw + " app", "run: JWT_SIGNING_KEY=" + Hidden + " app"},
		{"tls.key: " + pw, "tls.key: " + Hidden},
		{"VAULT_SECRET_ID=" + pw, "VAULT_SECRET_ID=" + Hidden},
		{"approle: {role_id: r, secret_id: " + pw + "}", "approle: {role_id: r, secret_id: " + Hidden + "}"},
		{"password: 'it''s " + pw + "'", "password: " + Hidden},
		{"+ DB_PASSWORD='it'\\''s " + pw + "' app", "+ DB_PASSWORD=" + Hidden + " app"},
		{"+ DB_PASSWORD=$'" + pw + "\\n' app", "+ DB_PASSWORD=" + Hidden + " app"},
		// A password given as a command's flag that names none, as set -x
		// prints the command a hook runs.
		{"+ mysql -u root -p" + pw + " -h db app", "+ mysql -u root -p" + Hidden + " -h db app"},
		{"+ /usr/bin/mysqldump -uroot '-p" + pw + "' app", "+ /usr/bin/mysqldump -uroot '-p" + Hidden + "' app"},
		{"+ curl -fsS -u app:" + pw + " https://x", "+ curl -fsS -u app:" + Hidden + " https://x"},
		{"+ curl -u 'app:" + pw + " x' https://x", "+ curl -u 'app:" + Hidden + "' https://x"},
		{"+ curl --user=app:" + pw + " https://x", "+ curl --user=app:" + Hidden + " https://x"},
		{"+ curl -uapp:" + pw + " https://x", "+ curl -uapp:" + Hidden + " https://x"},
		{"+ sshpass -p " + pw + " ssh host", "+ sshpass -p " + Hidden + " ssh host"},
		{"+ redis-cli -h r -a " + pw + " ping", "+ redis-cli -h r -a " + Hidden + " ping"},
		{"+ docker login -u app -p " + pw + " registry.example", "+ docker login -u app -p " + Hidden + " registry.example"},
		{"+ mysql -p" + pw + "\n+ cp -pr a b", "+ mysql -p" + Hidden + "\n+ cp -pr a b"},
		{"+ sh -c 'mysql -p" + pw + " app' x", "+ sh -c 'mysql -p" + Hidden + " app' x"},
		// A value holding a quote is hidden with its flag: hidden alone, the
		// quotes after it paired otherwise when read again (FuzzSecrets).
		{"+ mysql -p" + pw + "'x y\nz", "+ mysql " + Hidden + "\nz"},
		// A third review's: a quote closing on a later line, a command's end,
		// clustered flags, other tools, a long Cookie header.
		{"+ docker exec db bash -c 'mysql -uroot -p" + pw + " app -e \"select 1\"\necho done'\n", "+ docker exec db bash -c 'mysql -uroot -p" + Hidden + " app -e \"select 1\"\necho done'\n"},
		{"+ echo ```\n+ mysql -p" + pw + " app", "+ echo ```\n+ mysql -p" + Hidden + " app"},
		{"+ docker login -u x -p" + pw + " reg", "+ docker login -u x -p" + Hidden + " reg"},
		{"+ docker login -u x -p=" + pw + " reg", "+ docker login -u x -p=" + Hidden + " reg"},
		{"+ curl -fsSLu app:" + pw + " https://x", "+ curl -fsSLu app:" + Hidden + " https://x"},
		{"+ curl -sSu app:" + pw + " https://x", "+ curl -sSu app:" + Hidden + " https://x"},
		{"+ curl -U proxy:" + pw + " https://x", "+ curl -U proxy:" + Hidden + " https://x"},
		{"+ ldapsearch -x -D cn=admin -w " + pw + " -b dc=x", "+ ldapsearch -x -D cn=admin -w " + Hidden + " -b dc=x"},
		{"+ mongosh -u app -p " + pw + " db", "+ mongosh -u app -p " + Hidden + " db"},
		{"+ sqlcmd -S db -U sa -P " + pw + " -Q x", "+ sqlcmd -S db -U sa -P " + Hidden + " -Q x"},
		{"+ SSHPASS=" + pw + " sshpass -e ssh host", "+ SSHPASS=" + Hidden + " sshpass -e ssh host"},
		{"+ sshpass -p a\\ " + pw + " ssh host", "+ sshpass -p " + Hidden + " ssh host"},
		// A review of commands.go's: a quote inside a quoted command as set -x writes it,
		// a quoted command inside a word (JSON, Ansible's "cmd"), a subshell, a
		// line continued, an option naming a container.
		{"+ bash -c 'mysql -uroot -p" + pw + " -e '\\''select 1'\\'''", "+ bash -c 'mysql -uroot -p" + Hidden + " -e '\\''select 1'\\'''"},
		{"+ su - app -c 'curl -u app:" + pw + " https://x -H '\\''Accept: x'\\'''", "+ su - app -c 'curl -u app:" + Hidden + " https://x -H '\\''Accept: x'\\'''"},
		{"+ sh -c 'echo '\\''hi'\\''; sshpass -p " + pw + " ssh h'", "+ sh -c 'echo '\\''hi'\\''; sshpass -p " + Hidden + " ssh h'"},
		{`{"changed": true, "cmd": "mysql -uroot -p` + pw + ` -e 'select 1'", "rc": 1}`, `{"changed": true, "cmd": "mysql -uroot -p` + Hidden + ` -e 'select 1'", "rc": 1}`},
		{`["sh", "-c", "mysql -p` + pw + ` app"]`, `["sh", "-c", "mysql -p` + Hidden + ` app"]`},
		{"x=$(mysql -p" + pw + " -N -e 'select 1')", "x=$(mysql -p" + Hidden + " -N -e 'select 1')"},
		{"(curl -u a:" + pw + " https://x)", "(curl -u a:" + Hidden + " https://x)"},
		{"+ curl -u \\\n  a:" + pw + " https://x", "+ curl -u \\\n  a:" + Hidden + " https://x"},
		{"mysql \\\r\n -p" + pw + " app", "mysql \\\r\n -p" + Hidden + " app"},
		{`curl -H "Cookie: ` + strings.Repeat("pref=dark; ", 30) + `sid=` + pw + `" https://x`, `curl -H "Cookie: ` + Hidden + `" https://x`},
		// A second review's: bash's set -x of a wrapped pair with a quote in its
		// value, a $'…' with \', CDATA after a tag's attributes or a line break,
		// a pair whose name ends as a key's.
		{"+ export 'DB_PASSWORD=it'\\''s " + pw + "'", "+ export 'DB_PASSWORD=" + Hidden + "'"},
		{"+ docker run -e 'DB_PASSWORD=it'\\''s " + pw + "' img", "+ docker run -e 'DB_PASSWORD=" + Hidden + "' img"},
		{"+ DB_PASSWORD=$'it\\'s\\t" + pw + "' app", "+ DB_PASSWORD=" + Hidden + " app"},
		{"+ export $'DB_PASSWORD=it\\'s\\t" + pw + " c' x", "+ export $'DB_PASSWORD=" + Hidden + "' x"},
		{`<wsse:Password Type="x#PasswordText"><![CDATA[` + pw + `]]></wsse:Password>`, `<wsse:Password Type="x#PasswordText"><![CDATA[` + Hidden + `]]></wsse:Password>`},
		{"<password>\n  <![CDATA[" + pw + "]]>\n</password>", "<password>\n  <![CDATA[" + Hidden + "]]>\n</password>"},
		{`<add key="db.password"><![CDATA[` + pw + `]]></add>`, `<add key="db.password"><![CDATA[` + Hidden + `]]></add>`},
		{`{"parameter_key": "db_password", "parameter_value": "` + pw + `"}`, `{"parameter_key": ` + Hidden + `, "parameter_value": ` + Hidden + `}`},
		{"- env_key: DB_PASSWORD\n  env_value: " + pw, "- env_key: " + Hidden + "\n  env_value: " + Hidden},
		{`<setting setting-key="db.password" value="` + pw + `"/>`, `<setting setting-key=` + Hidden + ` value=` + Hidden + `/>`},
		// A message's name and ':' in quotes hides a word, not the diagnostic
		// to the quote's close.
		{`{"error":"password: ` + pw + ` at least 8 characters"}`, `{"error":"password: ` + Hidden + ` at least 8 characters"}`},
		{`err="token: ` + pw + ` is invalid" code=401`, `err="token: ` + Hidden + ` is invalid" code=401`},
	} {
		got := Secrets(c.in)
		if got != c.want || strings.Contains(got, pw) {
			t.Errorf("Secrets(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := Secrets(got); again != got {
			t.Errorf("hidden again, %q became %q", got, again)
		}
	}
	for _, kept := range []string{
		"hook failed: exit status 1", "nginx: [emerg] unknown directive \"foo\" in /etc/nginx/nginx.conf:12",
		"declaration signing key: not in keyring", "author: someone", "keyring epoch 2", "port=5432 user=app",
		"https://example.com:8443/path", "secret: " + Hidden, "password: <a token: not shown>",
		// A name in a path, in a sentence, of something else than a secret, a
		// stack frame's file.
		"write /srv/app/secrets.yaml: no space left on device", "open /etc/app/credentials.json: permission denied",
		"stat /var/lib/app/api_key: no such file or directory", "the mesh refused the token: token_used",
		"error: invalid token: signature mismatch", "passwordless: true", "secret_count=3", "tokenizer: parse error at line 3",
		"  at Foo.token(Token.java:42)", "https://user@example.com:8443/a", "ssh://git@github.com:org/repo.git", "http://[::1]:8080/x@y",
		"vault-token.service: Failed with result 'exit-code'.", "TokenExpiredError: jwt expired", "usage: app --password",
		"  -token string\n    \tthe token", "usage: app [--token TOKEN]", "usage: app [--api-key API_KEY]",
		"- name: PORT\n  value: 5", `<add key="Port" value="5"/>`,
		"key_id=abc", "keyring: 3 keys", `{"Key": "env", "Value": "prod"}`, "<ns:user>app</ns:user>", "</ns:password>",
		"a;b=c", "monkey=1", "open server.key: no such file or directory", "role_id: r",
		"+ mysql -p -h db app", "+ mysql -P3306 -u root",
		// A second review's: a message's diagnostics after a name and ':' in
		// quotes, an empty wrapped value, keys that are no secrets.
		"public_key=ssh-ed25519", "foreign_key=user_id", "PARTITION_KEY: tenant",
		"+ sshpass -f /run/pw ssh -p 2222 host", "+ mysql -uroot app && cp -pr a b", "error: login failed, retry with -p 5432",
		"+ docker login reg && ssh -p 2222 host", "s3_key=backups/x.tar", "+ docker login --password-stdin reg", "+ curl -u app https://x", "+ grep -p x", "cp -p a b", "+ ssh -p 2222 host",
		"+ docker run --name mongo -p 27017:27017 mongo:7", "+ docker run --name mysql -p3306:3306 mysql:8",
	} {
		if got := Secrets(kept); got != kept {
			t.Errorf("Secrets(%q) = %q, want it kept", kept, got)
		}
	}
	// A token given to a secret's name is hidden whole, as a token.
	tok := "mesh1_demo_192.0.2.10:7300,192.0.2.11:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-1_worker_1796000900_" + strings.Repeat("5e", 32) + "_0badc0de"
	if got := Secrets("run with MESH_TOKEN=" + tok + " x"); strings.Contains(got, "5e5e") || strings.Contains(got, "192.0.2.11") || !strings.HasSuffix(got, " x") {
		t.Errorf("a token given to MESH_TOKEN: %q", got)
	}
}

// FuzzSecrets: any text is hidden without a panic, and hiding again what was
// hidden changes nothing (the control plane hides again what an agent hid, and
// what it keeps must not grow marks at each pass); a password given to a name, in
// any surroundings, does not survive.
func FuzzSecrets(f *testing.F) {
	for _, s := range []string{"DB_PASSWORD=x", "password: >\n  x\n", `{"api_key":"a\"b"}`, "postgres://a:b@c/d", "x://a:b@", "--token x",
		"<secret>x</secret>", "Server=a;Pwd=b;", "secret = '''x'''", "token: expired", "a\r\npassword:\r\n  x\r\n",
		"+ mysql -px app", "curl -u 'a:b' x", "sh -c 'sshpass -p \"x y\" ssh'"} {
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, s, around string) {
		once := Secrets(s)
		if twice := Secrets(once); twice != once {
			t.Fatalf("hidden again, %q became %q", once, twice)
		}
		const pw = "Zq9vXw4kPm2t"
		if strings.Contains(around, pw) {
			return
		}
		in := around + "\nDB_PASSWORD=" + pw + "\n" + around
		if got := Secrets(in); strings.Contains(got, pw) {
			t.Fatalf("%q: the password survived: %q", in, got)
		}
	})
}

// BenchmarkSecrets: hiding 8 KiB of a failing hook's output, of the shapes that
// cost the most: names on one long line (a scan back from each name to its line's
// start was quadratic), values under their names, URLs, and plain text.
func BenchmarkSecrets(b *testing.B) {
	for name, in := range map[string]string{
		"names on one line":  strings.Repeat("token ", 8<<10/6),
		"names after blanks": strings.Repeat(" ", 4<<10) + strings.Repeat("token ", 4<<10/6),
		"list items":         strings.Repeat("- password:\n  "+Hidden+"\n", 8<<10/32),
		"values in brackets": strings.Repeat("pwd=;token=<>", 8<<10/13),
		"pairs on one line":  strings.Repeat(`<add key="Password" value="x"/>`, 8<<10/31),
		"name=value lines":   strings.Repeat("DB_PASSWORD=hunter2\n", 8<<10/20),
		"yaml blocks":        strings.Repeat("password: |\n  hunter2\n\n  x\n", 8<<10/28),
		"urls":               strings.Repeat("x://a:b@c ", 8<<10/10),
		"plain":              strings.Repeat("service failed to start\n", 8<<10/24),
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_ = Secrets(in)
			}
		})
	}
}
