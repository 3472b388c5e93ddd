"""Serving: raw strings in, translations out, as SavedModels (`Translator`, `Generator`),
through CTranslate2 (`export_ctranslate2`, `CTranslate2Translator`) or as one LiteRT
file for phones (`Translator.export_litert`, `tfblocks.serving.litert`); their n-best
lists hold `Hypothesis(text, score)`."""

from tfblocks.serving.ctranslate2 import CTranslate2Translator, export_ctranslate2
from tfblocks.serving.generator import Generator
from tfblocks.serving.hypothesis import Hypothesis
from tfblocks.serving.savedmodel import Translator

__all__ = ["CTranslate2Translator", "Generator", "Hypothesis", "Translator", "export_ctranslate2"]
