"""`loadtest compare`: graph against eager, the orchestration (`run`), servers it starts itself
(`managed`), the cold start, and `--find-max` (`findmax`)."""
