"""tfblocks.translation.job: overrides, splits, evaluation metrics and the training time limit."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfblocks.models.hyperparameters import parse_overrides
from tfblocks.text import load_splits
from tfblocks.training.callbacks import TimeLimit
from tfblocks.translation import evaluation, job


def test_parse_overrides_types_and_errors():
    got = parse_overrides("hidden_size=64, norm_first=false,label_smoothing=0.2")
    assert got == {"hidden_size": 64, "norm_first": False, "label_smoothing": 0.2}
    assert isinstance(got["label_smoothing"], float)
    assert parse_overrides("") == {}
    with pytest.raises(ValueError, match=r"hiden_size.*hidden_size"):
        parse_overrides("hiden_size=3")
    with pytest.raises(ValueError, match="hidden_size='big'"):
        parse_overrides("hidden_size=big")
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides("hidden_size")
    with pytest.raises(ValueError, match="norm_first='maybe'"):
        parse_overrides("norm_first=maybe")


def test_tsv_split_is_deterministic_and_disjoint(tmp_path):
    path = tmp_path / "jpn.txt"
    path.write_text(
        "".join(f"sentence {i}.\t文{i}。\tCC-BY\n" for i in range(200)), encoding="utf-8"
    )
    a = load_splits(tsv=str(path), seed=3, tsv_columns=(1, 0))  # manythings' ja -> en
    b = load_splits(tsv=str(path), seed=3, tsv_columns=(1, 0))
    assert a == b
    assert [len(a[k]) for k in ("train", "dev", "test")] == [196, 2, 2]
    assert a["test"][0][0].startswith("文")
    assert not set(a["train"]) & (set(a["dev"]) | set(a["test"]))
    with pytest.raises(ValueError, match="not both"):
        load_splits(corpus_dir=str(tmp_path), tsv=str(path))


def test_evaluate_scores_bleu_and_exact_match():
    pairs = [("a", "The cat sat on the mat ."), ("b", "A dog barked at the mailman ."), ("c", "x")]
    answers = {"a": "The cat sat on the mat .", "b": "A dog barked at the postman .", "c": "y"}

    def translator(sources):
        return tf.constant([answers[s] for s in sources])

    metrics, hypotheses = evaluation.evaluate(translator, pairs, batch_size=2)
    assert hypotheses == [answers[s] for s, _ in pairs]
    assert metrics["exact_match"] == pytest.approx(1 / 3)
    assert 0 < metrics["bleu"] < 100 and 0 < metrics["chrf"] < 100
    assert "tok:13a" in metrics["bleu_signature"] and metrics["sentences"] == 3


def test_time_limit_stops_fit_early():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    limit = TimeLimit(seconds=1e-9)
    history = model.fit(
        np.zeros((64, 4)), np.zeros((64, 1)), batch_size=8, epochs=5, callbacks=[limit], verbose=0
    )
    assert limit.stopped_early and len(history.history["loss"]) == 1
    with pytest.raises(ValueError, match="seconds=0"):
        TimeLimit(0)


def test_write_metrics_is_complete_json(tmp_path):
    path = job.write_metrics(tmp_path / "out", {"bleu": 12.5, "text": "今日"})
    written = json.loads((tmp_path / "out" / "metrics.json").read_text(encoding="utf-8"))
    assert str(path).endswith("metrics.json") and written == {"bleu": 12.5, "text": "今日"}
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["metrics.json"]  # no tmp file
