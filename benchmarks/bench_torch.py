"""PyTorch models through ``torch.compile(backend="ember")`` beside eager PyTorch and
``torch.compile``'s default backend (inductor), on the CPU.

Run: ``python benchmarks/bench_torch.py --threads 2 --rounds 5`` (``--models`` picks some
of resnet18, mobilenet_v2, encoder). Each model (seeded weights, eval mode, no grad) is
compiled by each backend first, the first call's time printed as its compile time, and its
outputs checked against eager. Then the three take turns for ``--rounds`` rounds: each a
block of runs of at least ``--block-ms``, then a pause of ``--pause-ms`` so that no thread
pool (PyTorch's OpenMP team spins after each call) is still spinning when the next starts.
Medians are printed with the ratios inductor / Ember and eager / Ember (above 1: Ember
faster). The transformer layer runs as PyTorch runs it by default: eager and inductor take
its fused fast path (``_transformer_encoder_layer_fwd``), which Ember converts. On a shared
machine the figures move with its load: rerun alone
before quoting.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any


def _models() -> dict[str, Callable[[], tuple[Any, Any]]]:
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                nn.MaxPool2d(3, 2, 1),
            )  # fmt: skip
            chans, layers, cin = (64, 128, 256, 512), [], 64
            for i, c in enumerate(chans):
                layers += [Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)]
                cin = c
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x: Any) -> Any:
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            mid = cin * expand
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
                nn.ReLU6(), nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
            )  # fmt: skip
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.body(x)
            return x + y if self.residual else y

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            spec = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                    (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip
            blocks, cin = [], 32
            for t, c, n, s in spec:
                for i in range(n):
                    blocks.append(Inverted(cin, c, s if i == 0 else 1, t))
                    cin = c
            self.stem = nn.Sequential(
                nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()
            )
            self.blocks = nn.Sequential(*blocks)
            self.head = nn.Sequential(
                nn.Conv2d(320, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()
            )
            self.fc = nn.Linear(1280, 1000)

        def forward(self, x: Any) -> Any:
            x = self.head(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class Encoder(nn.Module):
        def __init__(self, d: int = 256, heads: int = 4, layers: int = 4) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(
                d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True
            )
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

        def forward(self, x: Any) -> Any:
            return self.enc(x)

    return {
        "resnet18": lambda: (ResNet18(), torch.randn(1, 3, 224, 224)),
        "mobilenet_v2": lambda: (MobileNetV2(), torch.randn(1, 3, 224, 224)),
        "encoder": lambda: (Encoder(), torch.randn(1, 128, 256)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="resnet18,mobilenet_v2,encoder")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block-ms", type=float, default=300)
    p.add_argument("--pause-ms", type=float, default=300)
    opts = p.parse_args()
    import os

    os.environ.setdefault("EMBER_NUM_THREADS", str(opts.threads))
    import numpy as np
    import torch
    from bench_autosched_groups import _block_s  # one block timer for the scripts

    from ember.torch_backend import ember_backend

    torch.set_num_threads(opts.threads)
    torch.manual_seed(0)
    catalog = _models()
    print(f"torch {torch.__version__}, {opts.threads} threads, {opts.rounds} rounds")
    print("model | compile s: ember / inductor | ms: ember / inductor / eager | "
          "inductor/ember | eager/ember")  # fmt: skip
    for name in opts.models.split(","):
        model, x = catalog[name]()
        model = model.eval()
        runs: dict[str, Callable[[], Any]] = {"eager": model}
        compile_s = {}
        with torch.no_grad():
            want = model(x)
            for label, backend in (("ember", ember_backend), ("inductor", "inductor")):
                fn = torch.compile(model, backend=backend)
                start = time.perf_counter()
                got = fn(x)
                compile_s[label] = time.perf_counter() - start
                err = float((got - want).abs().max())
                if not np.isfinite(err) or err > 1e-3 * max(1.0, float(want.abs().max())):
                    raise SystemExit(f"{name}: {label} differs from eager by {err}")
                runs[label] = fn
            times: dict[str, list[float]] = {k: [] for k in runs}
            for _ in range(opts.rounds):
                for label, fn in runs.items():
                    times[label].append(_block_s(lambda fn=fn, x=x: fn(x), opts.block_ms / 1e3))
                    time.sleep(opts.pause_ms / 1e3)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"{name} | {compile_s['ember']:.1f} / {compile_s['inductor']:.1f} | "
            f"{med['ember']:.3f} / {med['inductor']:.3f} / {med['eager']:.3f} | "
            f"{med['inductor'] / med['ember']:.2f}x | {med['eager'] / med['ember']:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
