package broker

// RoutedTo names the brokers s has at least one route up with, for the external
// tests: route pooling makes several connections per peer, so a count of routes
// does not say which peers they reach.
func RoutedTo(s *Server) map[string]bool {
	rz, err := s.ns.Routez(nil)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, r := range rz.Routes {
		out[r.RemoteName] = true
	}
	return out
}
