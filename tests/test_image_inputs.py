"""A model whose serving function takes encoded images (JPEG or PNG bytes, decoded inside, one
by one in a `tf.map_fn` as users write it) exports with no flag: graphserve reads the decode op
from the graph and generates valid images of that format, at the size the model resizes them to,
for the probe, parity, warm-up, the eager server's load check and the load test's payload.
Samples of encoded bytes come as `.npz` bytes arrays or TF Serving JSON with `{"b64": ...}`; an
object array is refused with how to save it.

The models are small modules of the user's project; the servers are real, on 127.0.0.1."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.contract import SignatureContract
from graphserve.core.errors import SignatureError
from graphserve.core.inputs import InputSource, load_samples, sample_inputs
from graphserve.core.manifest import read_manifest
from graphserve.core.signature import ImageFormat, TensorSpec, ValueRange
from graphserve.exporter import ExportSpec, export_model
from tests.userproject import user_project

MODULES = {
    "image_models": """
        import keras
        import tensorflow as tf

        def _classifier():
            keras.utils.set_random_seed(0)  # the same weights in the export and the eager server
            return keras.Sequential([
                keras.Input((32, 32, 3)),
                keras.layers.Rescaling(1 / 255),
                keras.layers.Conv2D(4, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(3, activation="softmax"),
            ])

        class JpegClassifier(tf.Module):
            def __init__(self):
                super().__init__()
                self.model = _classifier()

            @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
            def __call__(self, image_bytes):
                def decode(one):
                    image = tf.io.decode_jpeg(one, channels=3)
                    return tf.image.resize(image, [32, 32])

                images = tf.map_fn(decode, image_bytes, fn_output_signature=tf.float32)
                return {"probabilities": self.model(images)}

        class PngMean(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="png")])
            def __call__(self, png):
                def decode(one):
                    return tf.reduce_mean(tf.cast(tf.io.decode_png(one, channels=3), tf.float32))

                return {"mean": tf.map_fn(decode, png, fn_output_signature=tf.float32)}

        def jpeg_classifier():
            return JpegClassifier()

        def png_mean():
            return PngMean()
    """,
}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with user_project(tmp_path_factory.mktemp("user_project"), MODULES) as root:
        yield root


def _jpeg(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_generated_images_decode_in_their_format_at_their_size() -> None:
    specs = [TensorSpec("jpg", "string", (None,)), TensorSpec("png", "string", (None,))]
    ranges = {
        "jpg": ValueRange(0, 255, "test", ImageFormat("jpeg", 24, 40)),
        "png": ValueRange(0, 255, "test", ImageFormat("png", 8, 8)),
    }
    arrays = sample_inputs(specs, batch_size=3, seed=1, ranges=ranges)
    assert arrays["jpg"].shape == (3,)
    for value in arrays["jpg"]:
        assert value[:3] == b"\xff\xd8\xff"  # a JPEG's start-of-image marker
        assert tf.io.decode_jpeg(value).shape == (24, 40, 3)
    for value in arrays["png"]:
        assert value[:8] == b"\x89PNG\r\n\x1a\n"
        assert tf.io.decode_png(value).shape == (8, 8, 3)
    assert len(set(arrays["jpg"])) == 3  # each image its own
    again = sample_inputs(specs, batch_size=3, seed=1, ranges=ranges)
    assert list(again["jpg"]) == list(arrays["jpg"])  # reproducible from the seed


def test_a_jpeg_classifier_exports_with_no_flag_on_generated_jpegs(
    user_dir: Path, tmp_path: Path
) -> None:
    out = CliRunner().invoke(
        app, ["export", "image_models:jpeg_classifier", "--name", "m", "--base-path", str(tmp_path)]
    )
    assert out.exit_code == 0, out.output
    version = tmp_path / "m" / "1"
    manifest = json.loads((version / "assets.extra" / "graphserve.json").read_text())
    image = manifest["inputs"]["ranges"]["image_bytes"]
    assert image["image"] == {"format": "jpeg", "height": 32, "width": 32}
    assert image["why"].startswith("it is decoded by DecodeJpeg")
    # The warm-up records TF Serving replays are real JPEGs.
    from tensorflow_serving.apis import prediction_log_pb2

    record = next(
        iter(tf.data.TFRecordDataset(str(version / "assets.extra" / "tf_serving_warmup_requests")))
    )
    log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
    sent = log.predict_log.request.inputs["image_bytes"].string_val
    assert sent and all(tf.io.decode_jpeg(v).shape == (32, 32, 3) for v in sent)
    # The export serves a JPEG of the user's, at another size than generated.
    serving = tf.saved_model.load(str(version)).signatures["serving_default"]
    photo = _jpeg(np.random.default_rng(0).integers(0, 256, (50, 70, 3)))
    probabilities = serving(image_bytes=tf.constant([photo]))["probabilities"].numpy()
    assert probabilities.shape == (1, 3)
    np.testing.assert_allclose(probabilities.sum(), 1.0, rtol=1e-5)


def test_a_png_model_that_does_not_resize_gets_224_pixel_pngs(
    user_dir: Path, tmp_path: Path
) -> None:
    result = export_model(
        ExportSpec(source="image_models:png_mean", name="m", base_path=tmp_path, parity_batches=1)
    )
    recorded = read_manifest(result.path)["inputs"]["ranges"]["png"]
    assert recorded["image"] == {"format": "png", "height": 224, "width": 224}
    contract = SignatureContract("serving_default", (TensorSpec("png", "string", (None,)),))
    source = InputSource.recorded(read_manifest(result.path), [contract])
    batch = source.batch("serving_default", contract.inputs, 2)
    assert all(tf.io.decode_png(v).shape == (224, 224, 3) for v in batch["png"])
    assert "png: string PNG images of 224x224 (it is decoded by DecodePng" in source.describe(
        contract.inputs
    )


def _contract() -> SignatureContract:
    return SignatureContract("serving_default", (TensorSpec("image_bytes", "string", (None,)),))


def test_samples_of_encoded_images_come_as_npz_bytes_arrays(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    photos = [_jpeg(rng.integers(0, 256, (16, 16, 3))) for _ in range(3)]
    path = tmp_path / "images.npz"
    np.savez(path, image_bytes=np.array(photos, dtype=bytes))
    samples = load_samples(path, [_contract()])
    assert list(samples["serving_default"]["image_bytes"]) == photos


def test_samples_of_encoded_images_come_as_tf_serving_json_with_b64(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    photos = [_jpeg(rng.integers(0, 256, (16, 16, 3))) for _ in range(2)]
    body = {"instances": [{"b64": base64.b64encode(p).decode()} for p in photos]}
    path = tmp_path / "images.json"
    path.write_text(json.dumps(body))
    samples = load_samples(path, [_contract()])
    assert list(samples["serving_default"]["image_bytes"]) == photos


def test_an_object_array_of_bytes_is_refused_with_how_to_save_it(tmp_path: Path) -> None:
    path = tmp_path / "images.npz"
    np.savez(path, image_bytes=np.array([b"\xff\xd8a", b"\xff\xd8b"], dtype=object))
    with pytest.raises(SignatureError) as caught:
        load_samples(path, [_contract()])
    text = str(caught.value)
    assert "'image_bytes' is an object array, which .npz stores as a pickle" in text
    assert "np.array(list_of_bytes, dtype=bytes)" in text
    assert '{"b64": ...}' in text


def test_the_refusal_hint_offers_ranges_only_for_number_inputs() -> None:
    specs = [TensorSpec("image_bytes", "string", (None,))]
    hint = InputSource().refused(specs)
    assert "--input-range" not in hint
    assert '{"b64": ...}' in hint
    mixed = [*specs, TensorSpec("ids", "int32", (None, 4))]
    assert "--input-range NAME=LOW:HIGH (ids)" in InputSource().refused(mixed)


def test_both_servers_load_it_and_answer_a_b64_jpeg_alike(user_dir: Path, tmp_path: Path) -> None:
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    export_model(ExportSpec(source="image_models:jpeg_classifier", name="m", base_path=tmp_path))
    graph, eager = ModelRegistry(), ModelRegistry()
    graph.load_graph("m", tmp_path / "m")
    eager.load_eager("m", "image_models:jpeg_classifier")  # its load check decodes JPEGs
    photo = _jpeg(np.random.default_rng(5).integers(0, 256, (40, 30, 3)))
    body = json.dumps({"instances": [{"b64": base64.b64encode(photo).decode()}]}).encode()
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    answers = []
    with ModelServer(graph, options) as g, ModelServer(eager, options) as e:
        for server in (g, e):
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.rest_port}/v1/models/m:predict", data=body
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
                answers.append(json.loads(response.read())["predictions"])
    np.testing.assert_allclose(answers[0], answers[1], rtol=1e-4, atol=1e-6)
    assert np.asarray(answers[0]).shape == (1, 3)


def test_an_input_range_on_a_string_input_is_refused(user_dir: Path, tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app,
        ["export", "image_models:png_mean", "--name", "m", "--base-path", str(tmp_path),
         "--input-range", "png=0:255"],
    )  # fmt: skip
    assert out.exit_code == 1, out.output
    text = " ".join(out.output.split())
    assert "--input-range 'png': a range is for number inputs, and 'png' is string" in text
    assert not (tmp_path / "m").exists()
