"""`loadtest rollout`: a version swap under load. The controller (`run`), its locustfile, the
analysis of the windows around the swap, and the report."""
