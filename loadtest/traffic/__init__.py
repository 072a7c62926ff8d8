"""Traffic files on the command line: `graphserve traffic show` (graphserve.model.traffic reads
them)."""
