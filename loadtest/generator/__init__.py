"""The traffic, in locust's processes: the senders (one OS thread per user), the locust user and
its schedule, the compare and plain locustfiles, distributed workers, the payload and the
Prometheus scrape. Imports only `graphserve.loadtest.results` below it."""
