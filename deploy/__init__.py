"""graphserve deploy: TensorFlow Serving GPU containers (docker compose) and Kubernetes manifests."""
