package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
)

// A control node runs for months. What it keeps in memory per node, per token, per
// connection and per address must go with them; these are its tables, counted for
// the metrics so that an operator (and TestAWeekDoesNotGrow) sees one that does not.

// Tables a control node keeps in memory, as mesh_control_memory_entries{table}
// names them.
const (
	tableConnections       = "connections"          // host connections open, cluster-wide (presence)
	tableClosedConnections = "closed_connections"   // closed ones remembered for a late listing (presence)
	tableLiveness          = "liveness"             // nodes heard from (the leader's)
	tableBudgets           = "budgets"              // nodes' message budgets (guard)
	tableOwedDisconnects   = "owed_disconnects"     // disconnections owed to connections not announced yet (guard)
	tableEnvelopes         = "envelopes"            // signed declarations kept to send again (signer)
	tableBodies            = "bodies"               // declared bodies kept parsed to sign (signer)
	tableTokenLogins       = "token_logins"         // tokens whose enrolling connections are counted (authn)
	tableRevokedLogins     = "revoked_logins"       // revoked keys whose connections are counted (authn)
	tableFailedAddresses   = "failed_addresses"     // addresses with failed enrolments counted or blocked (authn)
	tableNodeLogins        = "node_logins"          // live node keys whose logins are counted (authn)
	tableNodeCooldowns     = "node_cooldowns"       // node keys disconnected for their budget, refused for a while (authn)
	tableShutOut           = "shut_out_connections" // connections of revoked keys and retired credentials, open or remembered closed (presence)
)

// memoryTables lists the tables in the order the metrics show them.
var memoryTables = []string{tableConnections, tableClosedConnections, tableLiveness, tableBudgets, tableOwedDisconnects,
	tableEnvelopes, tableBodies, tableTokenLogins, tableRevokedLogins, tableFailedAddresses, tableNodeLogins, tableNodeCooldowns, tableShutOut}

var descMemory = prometheus.NewDesc("mesh_control_memory_entries",
	"Entries this control node holds in memory, by table: per connection, node, token or address. None grows with nodes revoked, tokens gone or connections closed.",
	[]string{"table"}, nil)

// descMemoryBytes sizes the two tables whose entries hold declared bodies, whose
// size the mesh does not choose: a count alone said nothing of a 256 KiB body kept
// 4,096 times.
var descMemoryBytes = prometheus.NewDesc("mesh_control_memory_bytes",
	"Bytes of declared bodies this control node holds in memory, by table: envelopes (signed declarations kept to send again) and bodies (declared bodies kept parsed to sign); each is capped.",
	[]string{"table"}, nil)

// memoryEntries counts the entries of each table.
func (d *Daemon) memoryEntries() map[string]int {
	open, closed := d.presence.Remembered()
	budgets, owed := d.guard.entries()
	a := d.authn.Entries()
	envelopes, _, bodies, _ := d.signer.held()
	shutOut := 0
	for _, t := range d.shutOut {
		o, c := t.Remembered()
		shutOut += o + c
	}
	return map[string]int{
		tableConnections:       open,
		tableClosedConnections: closed,
		tableLiveness:          d.seen.len(),
		tableBudgets:           budgets,
		tableOwedDisconnects:   owed,
		tableEnvelopes:         envelopes,
		tableBodies:            bodies,
		tableTokenLogins:       a.TokenLogins,
		tableRevokedLogins:     a.RevokedLogins,
		tableFailedAddresses:   a.FailedAddresses,
		tableNodeLogins:        a.NodeLogins,
		tableNodeCooldowns:     a.NodeCooldowns,
		tableShutOut:           shutOut,
	}
}

// memoryCollector exports memoryEntries.
type memoryCollector struct{ d *Daemon }

func (c memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMemory
	ch <- descMemoryBytes
}

func (c memoryCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.d.memoryEntries()
	for _, table := range memoryTables {
		ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(n[table]), table)
	}
	_, envelopeBytes, _, bodyBytes := c.d.signer.held()
	ch <- prometheus.MustNewConstMetric(descMemoryBytes, prometheus.GaugeValue, float64(envelopeBytes), tableEnvelopes)
	ch <- prometheus.MustNewConstMetric(descMemoryBytes, prometheus.GaugeValue, float64(bodyBytes), tableBodies)
}
