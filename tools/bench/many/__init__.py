"""`python -m tools.bench many` (`make bench-many`): one graph server, a thousand models, each
loaded on its first request (`serve graph --load-on-demand`); what that costs and what it gives
back.

Every server is `graphserve serve graph --model-config-file F --load-on-demand --metrics`, a child
process on loopback, serving copies of the exported mlp written by `graphserve loadtest copies`
(hard links: a thousand copies take a moment and no space). The Zipf traffic is `graphserve
loadtest many`'s; the other parts' requests are REST Predict calls of the project's HTTP client.
An answer is cold when it carries `x-graphserve-cold-load`; the server's own figures are read from
its Prometheus page. One module per part:

    M1 first answer   first.py      1,000 models against one, started alike: process start to the
                                    first 200
    M2 Zipf           zipf.py       Zipf(1.1) traffic over 1,000 models, 200 resident: failures,
                                    warm and cold p50 (against a one-model server at the same
                                    rate, and the load time), RSS
    M3 isolation      isolation.py  a pinned model's p99 while 4 clients ask resident models, then
                                    cold ones
    M4 memory back    memory.py     200 models loaded and unloaded after 2 s idle: RSS before and
                                    after, with glibc (malloc_trim), oneDNN on, jemalloc and
                                    tcmalloc

plan.py holds what a run is asked for, servers.py the servers, requests and metrics the parts
share, run.py the run, goals.py the goals, report.py the page and the plot.
"""

from tools.bench.many.goals import MANY_GOALS, many_goals
from tools.bench.many.plan import ALLOCATORS, PARTS, ManyPlan
from tools.bench.many.report import goal_lines, render_many, write_many
from tools.bench.many.run import run_many

__all__ = [
    "ALLOCATORS",
    "MANY_GOALS",
    "PARTS",
    "ManyPlan",
    "goal_lines",
    "many_goals",
    "render_many",
    "run_many",
    "write_many",
]
