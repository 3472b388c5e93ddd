"""`tfblocks-train` refuses every option that cannot work before its run folder is created
or touched, so the corrected command works; `~` in a path is the home folder; a folder
another run holds is refused. `main` runs in this process, with tiny settings."""

import gzip
import json
import random
import re

import pytest

from tests.cli.test_commands import FAST, TINY, TRAIN, in_process
from tfblocks import text
from tfblocks.cli import evaluate as evaluate_cli
from tfblocks.cli import train as train_cli
from tfblocks.ids import UNK_ID
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # one whole (tiny) run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--vocab-size", "0"), "--vocab-size=0"),
        (("--epochs", "0"), "--epochs=0"),
        (("--steps-per-epoch", "0"), "--steps-per-epoch=0"),
        (("--steps-per-epoch", "-2"), "--steps-per-epoch=-2"),
        (("--tokenizer-sample", "0"), "--tokenizer-sample=0"),
        (("--seed", "-1"), "--seed=-1"),
        (("--batch-tokens", "-5"), "--batch-tokens=-5"),
        (("--limit-train", "-3"), "--limit-train=-3"),
        (("--limit-test", "0"), "--limit-test=0"),
        (("--max-train-minutes", "nan"), "--max-train-minutes=nan"),
        (("--alpha", "inf"), "--alpha=inf"),
        (("--beam-size", "1", "--alpha", "0.6"), "--beam-size 1 searches greedily: drop --alpha"),
        (("--early-stopping", "2"), "--early-stopping=2 with --dev-sentences=0"),
        (("--hparams-override", f"{TINY},max_length=0"), "max_length=0"),
        (("--hparams-override", f"{TINY},max_length=1"), "max_length=1"),
        (("--hparams-override", f"{TINY},learning_rate_constant=inf"), "constant=inf"),
        (("--hparams-override", f"{TINY},optimizer_adam_epsilon=inf"), "epsilon=inf"),
        (("--hparams-override", f"{TINY},vocab_size=300"), "use --vocab-size"),
        (("--batch-tokens", "16"), "--batch-tokens=16"),  # below max_length=24
        (("--corpus-dir", ""), "--corpus-dir=''"),
        (("--accumulate-steps", "0"), "--accumulate-steps=0"),
        (("--hparams-override", f"{TINY},accumulate_steps=2"), "use --accumulate-steps"),
        (("--ema", "1.0"), "--ema=1.0"),
        (("--ema", "0"), "--ema=0.0"),
        (("--ema", "nan"), "--ema=nan"),
        (("--lora-rank", "2"), "--lora-rank=2 without --init-from"),
        (("--init-from", "run", "--lora-rank", "0"), "--lora-rank=0"),
        (("--lora-ffn",), "--lora-ffn without --lora-rank"),
        (("--source-lang", "de"), "the embedded phrasebook is ja->en"),
        (("--source-lang", "x/y"), "--source-lang='x/y'"),
        (
            ("--target-lang", "ja", "--tsv", "p.tsv"),
            "got --source-lang='ja' and --target-lang='ja'",
        ),
        (("--train-source", "a.de"), "`--train-source` needs `--train-target`"),
        (("--train-source", "a", "--train-target", "b"), "the dev split has no files"),
        (("--tsv", "p.tsv", "--test-source", "a", "--test-target", "b"), "either --tsv or"),
        (("--tsv", "p.tsv", "--corpus-dir", "c"), "got --tsv='p.tsv' and --corpus-dir"),
        (("--source-column", "1"), "--source-column=1 without --tsv"),
        (("--stream",), "`--stream` streams line-aligned train files"),
        (("--stream", "--tsv", "p.tsv"), "not --tsv='p.tsv'"),
        (("--tsv", "p.tsv", "--source-lang", "de"), "`--source-column` is needed"),
        (("--tsv", "p.tsv", "--target-column", "-1"), "--target-column=-1"),
        (("--tsv", "p.tsv", "--source-column", "0"), "`--target-column` is needed"),
        (
            ("--tsv", "p.tsv", "--source-column", "0", "--target-column", "0"),
            "must differ, got --source-column 0 --target-column 0",
        ),
        (("--dev-source", " ", "--dev-target", "b"), "--dev-source=' '"),
        (("--separate-vocab", "--init-from", "run"), "--separate-vocab with --init-from='run'"),
        (
            (
                "--separate-vocab",
                "--hparams-override",
                f"{TINY},shared_embedding_and_softmax_weights=True",
            ),
            "cannot set shared_embedding",
        ),
        (("--strategy", "multi_worker", "--max-train-minutes", "5"), "--max-train-minutes=5.0"),
    ],
)
def test_a_bad_option_is_refused_before_the_folder_is_touched(tmp_path, args, message):
    output = tmp_path / "run"
    with pytest.raises(ValueError, match=re.escape(message)):
        train_cli.main([*FAST, *args, "--output", str(output)])
    assert not output.exists()


@pytest.mark.parametrize(
    ("cluster", "task", "output", "expected"),
    [
        ({"worker": ["a:1", "b:1"]}, ("worker", 0), "runs/x", "runs/x"),
        ({"worker": ["a:1", "b:1"]}, ("worker", 1), "runs/x/", "runs/x-worker-1"),
        ({"chief": ["c:1"], "worker": ["a:1"]}, ("worker", 0), "runs/x", "runs/x-worker-0"),
        ({"chief": ["c:1"], "worker": ["a:1"]}, ("chief", 0), "runs/x", "runs/x"),
        ({"worker": ["a:1", "b:1"]}, ("worker", 1), None, None),  # a temporary folder
    ],
)
def test_only_the_chief_writes_the_run_folder(monkeypatch, cluster, task, output, expected):
    config = {"cluster": cluster, "task": {"type": task[0], "index": task[1]}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert train_cli.worker_output(output) == expected


def test_init_from_a_run_of_other_languages_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    settings = {"source_lang": "ko", "target_lang": "en"}
    (run / "run.json").write_text(json.dumps({"format": 1, "settings": settings}))
    with pytest.raises(ValueError, match=r"`--init-from` is a ko->en run, got .*'ja'"):
        train_cli.main([*FAST, "--init-from", str(run), "--output", str(tmp_path / "new")])
    assert not (tmp_path / "new").exists()


def test_init_from_an_m2m100_run_without_its_codes_is_refused_before_anything_is_written(
    tmp_path,
):
    # An M2M-100 / NLLB run imported before run.json recorded every language code: its
    # language tokens could not be written for another direction, so it is refused.
    run = tmp_path / "run"
    run.mkdir()
    tokens = {"source": "jpn_Jpan", "target": "eng_Latn", "target_id": 207}
    settings = {"source_lang": "ja", "target_lang": "en", "language_tokens": tokens}
    (run / "run.json").write_text(json.dumps({"format": 1, "settings": settings}))
    (run / "model").mkdir()
    (run / "model" / "config.json").write_text("{}")  # never read: refused before
    with pytest.raises(ValueError, match=r"imported before tfblocks recorded its language codes"):
        train_cli.main([*FAST, "--init-from", str(run), "--output", str(tmp_path / "new")])
    assert not (tmp_path / "new").exists()


def made_up_pairs(n, seed):
    """Pairs of a made-up language pair xx -> yy: each xx word is written backwards and
    capitalised in yy, in the same order (`ka mo` -> `Ak Om`)."""
    rng = random.Random(seed)
    words = ["ka", "mo", "ri", "tesu", "nabo", "luki", "sef", "ong"]
    pairs = []
    for _ in range(n):
        sentence = [rng.choice(words) for _ in range(rng.randint(2, 5))]
        pairs.append((" ".join(sentence), " ".join(w[::-1].capitalize() for w in sentence)))
    return pairs


# A model that learns the made-up pair in two short epochs (peak learning rate ~5e-3).
LEARNS = (
    "hidden_size=64,filter_size=128,num_heads=2,num_encoder_layers=1,num_decoder_layers=1,"
    "max_length=16,learning_rate_warmup_steps=50,learning_rate_constant=0.3,"
    "layer_prepostprocess_dropout=0.0"
)


def test_after_a_failed_start_the_corrected_command_works(tmp_path, monkeypatch, capsys):
    # A made-up pair xx -> yy, its train split in two shards (gzipped on the xx side)
    # streamed (--stream: never held in memory), one vocabulary per language: the run
    # learns it, and tfblocks-evaluate on the run folder reads its files and its two
    # tokenizers as training did, to the same test BLEU.
    monkeypatch.setenv("HOME", str(tmp_path))  # `~` is tmp_path
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    splits = {"train": made_up_pairs(2000, 0), "dev": made_up_pairs(8, 1)}
    splits["test"] = made_up_pairs(30, 2)
    for split, pairs in splits.items():
        parts = [pairs[:1200], pairs[1200:]] if split == "train" else [pairs]
        for side, language in enumerate(("xx", "yy")):
            if (split, language) == ("dev", "yy"):  # missing: the first command fails
                continue
            for i, part in enumerate(parts):
                data = "".join(pair[side] + "\n" for pair in part).encode("utf-8")
                name = f"{split}.{language}"
                if split == "train":
                    name += f"-{i:05d}-of-00002" + (".gz" if language == "xx" else "")
                    data = gzip.compress(data) if language == "xx" else data
                (corpus / name).write_bytes(data)
    command = [*TRAIN, "--source-lang", "xx", "--target-lang", "yy", "--corpus-dir", "~/corpus",
               "--epochs", "2", "--hparams-override", LEARNS, "--batch-tokens", "512",
               "--dev-sentences", "0", "--beam-size", "1", "--vocab-size", "60",
               "--separate-vocab", "--stream", "--output", "~/run"]  # fmt: skip
    with pytest.raises(FileNotFoundError, match=re.escape(str(corpus / "dev.yy"))):
        train_cli.main(command)
    assert not (tmp_path / "run").exists()  # the corpus is read first

    # A start that fails in the folder (before an epoch is recorded) binds nothing: the
    # next command may use other settings.
    (corpus / "dev.yy").write_text("".join(p[1] + "\n" for p in splits["dev"]), "utf-8")

    def failing_tokenizer(*args, **kwargs):
        raise ValueError("the tokenizer failed")

    with monkeypatch.context() as patch:
        patch.setattr(text, "train_tokenizers", failing_tokenizer)
        with pytest.raises(ValueError, match="the tokenizer failed"):
            train_cli.main([*command, "--vocab-size", "300"])
    assert json.loads((tmp_path / "run" / "run.json").read_text())["settings"]["vocab_size"] == 300

    held = r"in use by another tfblocks run \(process id"
    with RunFolder(tmp_path / "run"), pytest.raises(ValueError, match=held):  # another run's
        train_cli.main(command)

    metrics = train_cli.main(command)
    assert metrics["epochs"] == 2 and metrics["sentences"] == 30
    assert metrics["bleu"] >= 30.0, metrics  # 61.3 measured; an untrained model scores ~2
    settings = json.loads((tmp_path / "run" / "run.json").read_text())["settings"]
    assert settings["vocab_size"] == 60 and settings["init_from"] is None
    assert (settings["source_lang"], settings["target_lang"]) == ("xx", "yy")
    assert (tmp_path / "run" / "export" / "1" / "saved_model.pb").exists()
    assert settings["separate_vocab"] is True and settings["stream"] is True
    assert settings["beam_size"] == 1  # what its test and export/1 decoded with
    # The folder's epochs are passes: a continuation in epochs of N steps is refused
    # before anything is trained (tests/translation/test_steps_per_epoch.py trains them).
    message = "steps_per_epoch: the folder has None, this run asks for 4"
    with pytest.raises(ValueError, match=message):
        train_cli.main([*command, "--steps-per-epoch", "4", "--epochs", "3"])
    assert RunFolder(tmp_path / "run").progress()["epochs"] == 2
    from tfblocks.models import load_preset, load_target_tokenizer

    model, source_tokenizer, _ = load_preset(tmp_path / "run" / "model")
    target_tokenizer = load_target_tokenizer(tmp_path / "run" / "model")
    assert not model.shared_embedding_and_softmax_weights
    ids = [
        t.tokenize(["Oban Ak"]).flat_values.numpy() for t in (source_tokenizer, target_tokenizer)
    ]
    assert UNK_ID in ids[0] and UNK_ID not in ids[1]  # yy's letters are yy's own
    run, test = tmp_path / "run", ("--src", corpus / "test.xx", "--ref", corpus / "test.yy")
    # Without --beam-size, the run's own (run.json): greedy, as its test translation was.
    status, out, err = in_process(evaluate_cli, monkeypatch, capsys, "--model", run, *test)
    assert status == 0 and json.loads(out)["bleu"] == metrics["bleu"], err[-2000:]
    assert list(metrics["samples"]) == [source for source, _ in splits["test"][:2]]  # no ja


def test_continuing_a_streamed_run_reads_no_corpus_first(tmp_path):
    # A new streamed run samples its train files for the tokenizer before the folder is
    # touched; a folder that has its tokenizer starts training without that pass.
    from tfblocks.text.streamed import StreamedPairs
    from tfblocks.translation.job import TrainingJob
    from tfblocks.translation.run_folder import TOKENIZER_FILE

    run = tmp_path / "run"
    args = train_cli.parse_args(["--stream", "--corpus-dir", str(tmp_path),
                                     "--output", str(run)])  # fmt: skip
    missing = str(tmp_path / "missing.xx")
    splits = {"train": StreamedPairs((missing,), (missing,))}
    job = TrainingJob(train_cli.training_options(args), splits)
    with pytest.raises(FileNotFoundError, match=r"missing\.xx"):
        job.tokenizer_sample(None, str(run))
    run.mkdir()
    (run / TOKENIZER_FILE).write_bytes(b"")
    assert job.tokenizer_sample(None, str(run)) is None


def test_without_a_stream_flag_large_train_files_are_streamed(tmp_path, monkeypatch):
    # `--stream` / `--no-stream` decide; unset, the train files' size does (gzip counted
    # at GZIP_RATIO times its bytes); a TSV and the phrasebook are held in memory.
    from tfblocks.cli.corpus import corpus_source
    from tfblocks.translation import corpus_source as source_module
    from tfblocks.translation.corpus_source import CorpusSource

    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.xx").write_text("a b\n" * 10, encoding="utf-8")  # 40 bytes
        with gzip.open(tmp_path / f"{split}.yy.gz", "wt", encoding="utf-8") as file:
            file.write("A B\n" * 10)
    size = 40 + 4 * (tmp_path / "train.yy.gz").stat().st_size

    def choose(*flags):
        args = train_cli.parse_args(
            ["--corpus-dir", str(tmp_path), "--source-lang", "xx", "--target-lang", "yy", *flags]
        )
        return corpus_source(args).chosen_stream()

    monkeypatch.setattr(source_module, "STREAM_AUTO_BYTES", size)
    assert choose() is False and choose("--stream") is True
    monkeypatch.setattr(source_module, "STREAM_AUTO_BYTES", size - 1)
    assert choose() is True and choose("--no-stream") is False
    files = ["--train-source", str(tmp_path / "train.xx"), "--train-target",
             str(tmp_path / "train.yy.gz")]  # fmt: skip
    assert train_cli.parse_args(files).stream is None
    assert corpus_source(train_cli.parse_args(files)).chosen_stream() is True
    assert CorpusSource(tsv="p.tsv").chosen_stream() is False
    assert CorpusSource().chosen_stream() is False
    (tmp_path / "train.xx").unlink()
    with pytest.raises(FileNotFoundError, match=r"train\.xx"):
        choose()
