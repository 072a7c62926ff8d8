"""The TF-free core every package shares: the signature spec (one SignatureDef → spec), the tensor
codec (TensorProto and JSON ⇄ numpy), the one error tree, SavedModel files and version
directories read without TensorFlow, and TensorFlow's log level. It never imports TensorFlow's
Python API; it reads TensorFlow's and TF Serving's protocol buffers only. Nor does it import the
command line's libraries (typer, rich): those are graphserve.clikit's."""
