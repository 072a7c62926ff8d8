"""`loadtest rollout`: a version swap under load. What it is asked for (`spec`), the controller
(`run`), its locustfile, the analysis of the windows around the swap, and the report."""
