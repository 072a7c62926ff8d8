"""Models in Python, shared by the exporter and the eager server: model SOURCEs (built-in
examples, `module:factory`, `.keras` files, SavedModels), calling them with a signature, tracing
them into concrete functions, and TF Serving's warm-up records. The layer that imports
TensorFlow."""
