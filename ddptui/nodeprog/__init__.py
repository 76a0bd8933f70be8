"""Programs that run on the nodes, kept as real modules and shipped as files."""
