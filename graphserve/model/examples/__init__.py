"""Built-in example models, addressed on the command line as `examples:NAME`.

Each module defines `build()` returning the model and `INPUT_SIGNATURE`. Weights come from a fixed
seed, so the eager server and the exported SavedModel hold the same numbers.
"""
