"""Small PyTorch modules exported to ONNX with ``torch.onnx.export`` (needs torch; optional).

Exported with the TorchScript exporter (``dynamo=False``: the torch.export-based one needs
onnxscript) and dynamic axes, so the graphs carry the ``Shape``/``Gather``/``Concat`` chains
PyTorch writes for ``x.size()`` arithmetic, ``view``/``reshape`` and ``interpolate``.

- ``encoder``: ``nn.TransformerEncoder`` (two post-norm layers, GELU, batch first) with a
  learned positional table sliced to the sequence length; ``x[batch, 10, 32]``.
- ``mobile``: Conv/BatchNorm/Hardswish, a depthwise block with squeeze-excite
  (``hardsigmoid``), ReLU6, ``adaptive_avg_pool2d``, ``flatten``, ``Linear``; ``x[batch, 3, h, w]``.
- ``unet``: convolutions, ``max_pool2d``, ``ConvTranspose2d``, bilinear ``interpolate`` to a
  skip connection's size (``align_corners`` False and True), nearest upsampling, reflect
  ``pad``, ``cat``, ``sigmoid``; ``x[batch, 3, h, w]`` with h, w multiples of 4.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable

import onnx

__all__ = ["TORCH_MODELS", "torch_model"]


def _modules() -> dict[str, Callable[[], tuple[object, tuple[object, ...], dict[str, dict[int, str]]]]]:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.positions = nn.Parameter(torch.randn(64, 32) * 0.1)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.positions[: x.size(1)]
            return self.head(self.encoder(x)).softmax(-1)

    class SqueezeExcite(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.reduce, self.expand = nn.Conv2d(channels, channels // 2, 1), nn.Conv2d(channels // 2, channels, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale = F.adaptive_avg_pool2d(x, 1)
            return x * F.hardsigmoid(self.expand(F.relu(self.reduce(scale))))

    class Mobile(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
            self.block = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16),
                                       nn.ReLU6(), SqueezeExcite(16), nn.Conv2d(16, 24, 1), nn.BatchNorm2d(24))
            self.head = nn.Linear(24, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            features = self.block(self.stem(x))
            return self.head(torch.flatten(F.adaptive_avg_pool2d(features, 1), 1))

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down1, self.down2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
            self.fuse = nn.Conv2d(24, 8, 3)
            self.out = nn.Conv2d(8, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            skip = F.relu(self.down1(x))
            deep = F.leaky_relu(self.down2(F.max_pool2d(skip, 2)), 0.1)
            coarse = F.interpolate(deep, scale_factor=0.5, mode="nearest")
            restored = F.interpolate(coarse, size=deep.shape[2:], mode="bilinear", align_corners=True)
            up = self.up(deep + restored)
            side = F.interpolate(deep, size=skip.shape[2:], mode="bilinear", align_corners=False)
            merged = torch.cat([up, side[:, :8], skip], 1)
            return torch.sigmoid(self.out(F.relu(self.fuse(F.pad(merged, (1, 1, 1, 1), mode="reflect")))))

    image_axes = {"x": {0: "batch", 2: "height", 3: "width"}}
    return {
        # The TorchScript exporter bakes the traced sequence length into MultiheadAttention's
        # reshapes, so only the batch is dynamic.
        "encoder": lambda: (Encoder(), (torch.randn(2, 10, 32),), {"x": {0: "batch"}}),
        "mobile": lambda: (Mobile(), (torch.randn(2, 3, 32, 32),), image_axes),
        "unet": lambda: (UNet(), (torch.randn(2, 3, 16, 24),), image_axes),
    }


TORCH_MODELS = ("encoder", "mobile", "unet")


def torch_model(name: str, *, opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """Export module ``name`` (weights from ``torch.manual_seed(seed)``; batch norm statistics
    perturbed so inference differs from identity) with dynamic axes."""
    import torch

    torch.manual_seed(seed)
    module, example, axes = _modules()[name]()
    with torch.no_grad():
        for layer in module.modules():  # type: ignore[attr-defined]
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.running_mean.uniform_(-0.1, 0.1)
                layer.running_var.uniform_(0.5, 1.5)
    module.eval()  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    # Not under no_grad: there nn.TransformerEncoderLayer takes its fused fast path, which has no
    # ONNX export.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, buffer, dynamo=False, opset_version=opset, input_names=["x"],
                          output_names=["y"], dynamic_axes={**axes, "y": {0: "batch"}})
    return onnx.load_from_string(buffer.getvalue())
