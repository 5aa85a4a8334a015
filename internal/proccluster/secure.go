package proccluster

// URL returns the base URL of a node's API: https when the cluster is
// secure.
func (c *Cluster) URL(n *Node) string {
	if c.opts.Secure {
		return "https://" + n.HTTPAddr
	}
	return "http://" + n.HTTPAddr
}

// nodeArgs returns the arguments of one node only.
func (c *Cluster) nodeArgs(id string) []string {
	if c.opts.NodeArgs == nil {
		return nil
	}
	return c.opts.NodeArgs(id)
}

// AppendArgs adds arguments to the command line of a node that is not
// running, for example one made by NewNode whose arguments name its own
// addresses.
func (c *Cluster) AppendArgs(n *Node, args ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.args = append(n.args, args...)
}
