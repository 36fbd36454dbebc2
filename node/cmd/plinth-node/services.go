package main

import "source.plinth.dev/node/core"

// services lists the node's services, started by the root once the data
// directory is ready. This is where the node is composed: a service package
// (e.g. node/kubernetes) is wired in with one entry here, built from the
// options it needs.
func services(o *options) []core.Service {
	return nil
}
