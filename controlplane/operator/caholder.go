package operator

import (
	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
)

// CAHolderNow asks the control plane which running control node holds the CA key
// and the operator account key now (its heartbeats say so): "" when none, and
// asked false when the control plane could not be asked.
func CAHolderNow(dir datadir.Dir, o Options) (holder string, asked bool) {
	o.LeaderWait = -1 // a hint for an error: not worth a wait
	c, err := Dial(dir, o)
	if err != nil {
		return "", false
	}
	defer c.Close()
	var res api.NodesResult
	if err := c.Call(api.OpNodes, api.NodesRequest{Limit: 1}, &res); err != nil {
		return "", false
	}
	for _, cv := range res.Control {
		if cv.CAHolder && cv.State == api.StateAlive {
			return cv.ID, true
		}
	}
	return "", true
}
