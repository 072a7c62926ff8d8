from pathlib import Path

from graphserve.loadtest import Arm, CompareSpec, LoadSpec, compare, load_report
from graphserve.serving import EagerModel, ServeConfig, ServerOptions, build_server
from graphserve.serving.config import ModelConfig

ports = ServerOptions(grpc_port=0, rest_port=0)
graph_config = ServeConfig(models=(ModelConfig("mlp", Path("models/mlp")),), options=ports)
eager_config = ServeConfig(eager=(EagerModel("mlp", "examples:mlp"),), options=ports)

with build_server(graph_config) as graph, build_server(eager_config) as eager:
    spec = CompareSpec(
        arms=(
            Arm("graph", f"127.0.0.1:{graph.grpc_port}"),
            Arm("eager", f"127.0.0.1:{eager.grpc_port}"),
        ),
        model_name="mlp",
        load=LoadSpec(loads=(1, 4), warmup_s=1, window_s=1, min_windows=2, max_windows=2),
    )
    report = compare(spec, Path("reports/api"))

step = report.steps[-1]
graph_arm = step.arms["graph"]
print(graph_arm.latency_ms.p99, graph_arm.throughput_rps, step.ratios["graph/eager"].p50.value)
assert report == load_report(Path("reports/api/report.json"))
