"""How a served model executes, in one word and in words: what the servers say in their start
line and metadata (the `execution` field), and what a load test report reads from each arm.

    EXECUTIONS   the word -> the words
    describe     "eager: eager Python, op by op", for a start line
    not_eager    why an eager server is not eager, in a sentence; None when it is
    arm_warning  the same for a load test's arm, and for an arm named eager a graph server answers
    RUNNER_FIELD, EXECUTION_FIELD    graphserve's own GetModelMetadata fields (StringValues)
    RUNNER_HEADER, EXECUTION_HEADER  ... and the REST metadata response's headers that carry them

The graph server runs a SavedModel's signature functions ("function") or its graph in a TF1
Session ("session"). The eager server runs the Python source, which is eager only when the
source is: a SavedModel directory or a module whose call is a `tf.function` runs graphs there
too, and a comparison of such an "eager" arm with the graph server measures graph against graph.
"""

from __future__ import annotations

__all__ = [
    "EAGER",
    "EXECUTIONS",
    "EXECUTION_FIELD",
    "EXECUTION_HEADER",
    "RUNNER_FIELD",
    "RUNNER_HEADER",
    "arm_warning",
    "describe",
    "not_eager",
]

EAGER = "eager"

# TF Serving refuses a field it does not know ("Metadata field runner is not supported"), and its
# REST body has only signature_def: graphserve says these where no TF Serving client looks.
RUNNER_FIELD = "runner"  # graph, eager, eager-predict, eager-function, null
EXECUTION_FIELD = "execution"  # a word of EXECUTIONS
RUNNER_HEADER = "X-Graphserve-Runner"
EXECUTION_HEADER = "X-Graphserve-Execution"

EXECUTIONS = {
    "function": "a SavedModel's signature functions",
    "session": "a SavedModel's graph in a TF1 Session",
    EAGER: "eager Python, op by op",
    "tf.function": "the source's own tf.function, a graph",
    "restored": "a SavedModel's restored graph functions",
    "keras-predict": "Keras model.predict, its predict step a tf.function",
    "traced": "a tf.function traced per new input shape",
    "null": "no model, the null endpoint",
}


def describe(kind: str, execution: str) -> str:
    """`kind` and what executes, for a start line: "eager: eager Python, op by op", "eager: the
    source's own tf.function, a graph, not eager Python"; `kind` alone when the execution is
    unknown (a server that does not say)."""
    words = EXECUTIONS.get(execution)
    if not words:
        return kind
    return f"{kind}: {words}" + (", not eager Python" if not_eager(kind, execution) else "")


def not_eager(kind: str, execution: str) -> str | None:
    """The warning for an eager server (`kind` "eager") that does not run eagerly: what it runs
    and what that does to a comparison; None when it is eager, another kind, or unknown."""
    if kind != EAGER or execution in ("", EAGER) or execution not in EXECUTIONS:
        return None
    return (
        f"the eager server does not run eager Python: it runs {EXECUTIONS[execution]}, so a "
        "comparison with the graph server measures graph against graph, not what graph "
        "execution buys over eager; for an eager baseline, serve a source whose call is plain "
        "Python (a Keras model, a .keras file, or the function as it was before @tf.function)"
    )


def arm_warning(arm: str, runner: str, execution: str) -> str | None:
    """The warning for a load test's `arm` whose server said `runner` and `execution` in its
    metadata (empty: it did not say): an eager server that runs graphs, or an arm named eager
    that a graph server answers; None otherwise."""
    if arm == EAGER and runner == "graph":
        return (
            "the eager arm is a graph server (its metadata says runner 'graph'): the comparison "
            "measures graph against graph; point --eager at `graphserve serve eager SOURCE`"
        )
    warning = not_eager(runner, execution)
    return f"{arm}: {warning}" if warning else None
