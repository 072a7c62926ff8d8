#!/bin/bash
# The entrypoint of TF Serving's own image (tensorflow_serving/tools/docker/Dockerfile), as it is.
tensorflow_model_server --port=8500 --rest_api_port=8501 \
  --model_name=${MODEL_NAME} --model_base_path=${MODEL_BASE_PATH}/${MODEL_NAME} "$@"
