"""`tfblocks-serve`: the real server, started as a console script on a free port with a tiny
imported model, answers HTTP as it says: LibreTranslate's shape (its own Python client),
the native API, batches of concurrent requests, its limits, its API key, SIGTERM, the
page in a headless Chromium, and every direction of an imported NLLB model; the
translators of every option set share one loaded model."""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.cli.runs import marian_run
from tfblocks.serving.http.process import ServerProcess

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.heavy  # two servers, a minute of waiting on them: scheduled first

NLLB = os.path.join(os.path.dirname(__file__), os.pardir, "data", "m2m100", "nllb")
SENTENCES = [
    "the cat sleeps!", "the dog sits in the garden!", "a small cat!", "the cat sits!",
    "a dog sleeps in the garden!", "the small dog!", "a cat sits in the garden!", "the dog!",
    "the garden!", "a small garden!", "the cat sleeps in the garden!", "a dog sits!",
    "the small cat sleeps!", "a garden!", "the dog sleeps!", "a small dog sits!",
]  # fmt: skip
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run folder of the tiny Marian fixture (en->de, beam 2, 12 subwords at most): its
    preset and run.json, no SavedModel (the server loads the preset)."""
    return marian_run(tmp_path_factory.mktemp("serve") / "run")


Server = ServerProcess  # the real server, as a user starts it


def request(url, body=None, *, form=False, headers=None, raw=None, method=None):
    """`(status, answer JSON, headers)` of a request to `url`: a JSON `body`, a form one
    (`form`), or the bytes `raw`."""
    headers = dict(headers or {})
    data = raw
    if body is not None and form:
        data = urllib.parse.urlencode(body, doseq=True).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    call = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(call, timeout=120) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


def translations(server, texts, **options):
    status, answer, _ = request(server.url + "/v1/translate", {"texts": texts, **options})
    assert status == 200, answer
    return answer["translations"]


@pytest.fixture(scope="module")
def server(run):
    """The server most tests talk to: a long `--max-wait-ms` so that concurrent requests
    surely meet in a batch, small limits to go past."""
    started = Server(run, "--max-wait-ms", "100", "--max-body-bytes", "4096",
                     "--max-chars", "100", "--max-texts", "20")  # fmt: skip
    yield started
    assert started.stop() == 0, started.log()[-3000:]


def test_health_is_503_until_the_model_translated_a_line(server):
    # The fixture returns once the port is open; the model loads (and TensorFlow is
    # imported) after that, for seconds: /health answers 503 all that time.
    statuses = []
    while not any(line and "ready on" in line for line in server.lines):
        statuses.append(request(server.url + "/health")[0])
        time.sleep(0.05)
    assert statuses and set(statuses[:-1]) == {503}, statuses  # the last may be after
    status, answer, _ = request(server.url + "/health")
    assert status == 200 and answer["status"] == "ready", answer


def test_libretranslate_clients_get_their_shape(server):
    from libretranslatepy import LibreTranslateAPI

    server.ready()
    best = [t["text"] for t in translations(server, SENTENCES[:3])]
    client = LibreTranslateAPI(server.url)  # form-encoded bodies
    assert client.translate(SENTENCES[0], "en", "de") == best[0]
    assert client.languages() == [{"code": "en", "name": "en", "targets": ["de"]}]
    url = server.url + "/translate"
    status, answer, _ = request(url, {"q": SENTENCES[:3], "source": "en", "target": "de"})
    assert (status, answer) == (200, {"translatedText": best})
    form = {"q": SENTENCES[1], "source": "auto", "target": "de", "format": "text"}
    assert request(url, form, form=True)[:2] == (200, {"translatedText": best[1]})
    boundary = "tfblocks-boundary"
    multipart = (
        "".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            for name, value in form.items()
        )
        + f"--{boundary}--\r\n"
    )
    status, answer, _ = request(url, raw=multipart.encode(), headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    assert (status, answer) == (200, {"translatedText": best[1]})
    status, answer, _ = request(url, {**form, "alternatives": 1})
    assert status == 200 and answer["translatedText"] == best[1], answer
    assert len(answer["alternatives"]) == 1 and answer["alternatives"][0] != best[1], answer


def test_native_api_gives_n_best_lists_with_scores_prefixes_and_constraints(server):
    server.ready()
    plain = translations(server, SENTENCES[:2])
    two = translations(server, SENTENCES[:2], n_best=2)
    for one, both in zip(plain, two, strict=True):
        assert len(both["n_best"]) == 2 and both["text"] == one["text"]
        assert both["score"] == pytest.approx(one["score"], abs=1e-4)
        assert both["n_best"][0]["score"] >= both["n_best"][1]["score"]
    forced = translations(server, SENTENCES[:2], n_best=2, target_prefix=["die", ""],
                          constraints=[["katze"], ["garten"]])  # fmt: skip
    assert all(h["text"].startswith("die") for h in forced[0]["n_best"]), forced
    assert "katze" in forced[0]["text"] and "garten" in forced[1]["text"], forced
    assert translations(server, [""])[0]["text"] == ""
    # Sampling among the one most likely subword at each step is greedy search: every
    # sample is the greedy translation.
    greedy = translations(server, SENTENCES[:2], beam_size=1)
    sampled = translations(server, SENTENCES[:2], n_best=2, sampling_topk=1, seed=7)
    for one, samples in zip(greedy, sampled, strict=True):
        assert [h["text"] for h in samples["n_best"]] == [one["text"]] * 2, (one, samples)


def test_concurrent_requests_are_batched_and_each_gets_its_own_translation(server):
    server.ready()
    alone = [translations(server, [sentence])[0]["text"] for sentence in SENTENCES]
    got, start = {}, threading.Barrier(len(SENTENCES))

    def client(index):
        start.wait()
        body = {"q": SENTENCES[index], "source": "en", "target": "de"}
        got[index] = request(server.url + "/translate", body)[:2]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(SENTENCES))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [got[i] for i in range(len(SENTENCES))] == [
        (200, {"translatedText": text}) for text in alone
    ]
    metrics = urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
    single = float(re.search(r'^tfblocks_serve_batch_requests_bucket\{le="1.0"\} (\S+)$',
                             metrics, re.M).group(1))  # fmt: skip
    batches = float(re.search(r"^tfblocks_serve_batch_requests_count (\S+)$", metrics, re.M)[1])
    assert batches > single, metrics  # some batch answered several requests
    assert re.search(r"^tfblocks_serve_queue_length 0.0$", metrics, re.M), metrics
    assert re.search(r'^tfblocks_serve_request_seconds_count\{path="/translate"\}', metrics, re.M)


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/translate", {"q": "x" * 101, "source": "en", "target": "de"}, 400,
         "text 1 of `q` has 101 characters; this server takes at most 100 a text (--max-chars)"),
        ("/v1/translate", {"texts": ["a"] * 21}, 400,
         "`texts` holds 21 texts; this server takes at most 20 a request (--max-texts)"),
        ("/translate", {"q": "a", "source": "en", "target": "fr"}, 400,
         "this server translates en->de; got source='en' and target='fr'"),
        ("/v1/translate", {"texts": ["a"], "n_best": 3}, 400,
         "`n_best` must be 1 to 2 (the beam size), got n_best=3"),
        ("/v1/translate", {"texts": ["a"], "beam_size": 0}, 400,
         "`beam_size` must be 1 to 2 (--beam-size), got beam_size=0"),
        ("/v1/translate", {"texts": ["a"], "sampling_topp": 0}, 400,
         "`sampling_topp` must be above 0.0 to 1.0, got sampling_topp=0"),
        ("/v1/translate", {"texts": ["a"], "seed": 3}, 400, "`seed` seeds sampling"),
        ("/v1/translate", {"texts": ["a"], "sampling_topk": 2, "constraints": [["x"]]}, 400,
         "not with `constraints` or `beam_size`"),
        ("/translate", {"q": "a", "target": "de", "format": "html"}, 400, "format='html'"),
        ("/translate", {"source": "en", "target": "de"}, 400, "`q` is required"),
        ("/v1/translate", {"texts": ["a"], "padding": "x" * 4096}, 413,
         "this server takes at most 4096 (--max-body-bytes)"),
        ("/v1/translate", None, 400, "the body is not JSON"),
        ("/nowhere", {}, 404, "no such path: /nowhere"),
        ("/languages", {}, 405, "POST is not allowed on /languages"),
    ],
)  # fmt: skip
def test_bad_requests_get_one_json_line_naming_the_limit(server, path, body, status, words):
    server.ready()
    raw = b"{not json" if body is None else None
    got, answer, _ = request(server.url + path, body, raw=raw,
                             headers={"Content-Type": "application/json"})  # fmt: skip
    assert got == status and list(answer) == ["error"], answer
    assert words in answer["error"] and "\n" not in answer["error"], answer
    assert "Traceback" not in server.log()


def test_the_log_holds_no_text(server):
    server.ready()
    request(server.url + "/translate?q=secret", {"q": "a confidential cat!", "target": "de"})
    server.wait_for(r'"POST /translate" 200')
    assert "confidential" not in server.log() and "secret" not in server.log()


def page_dom(server, query, profile):
    """The DOM of the server's page at `/?query` (a dict) once headless Chromium ran its
    script; `(translation shown, DOM)`."""
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", "--virtual-time-budget=30000", "--dump-dom",
         f"{server.url}/?{urllib.parse.urlencode(query)}"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    shown = re.search(r'<div id="translation">(.*?)</div>', dom, re.S)
    return shown and shown.group(1), dom


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM} (.ci/run installs it)")
def test_the_page_translates_its_link_in_a_browser(server, tmp_path):
    server.ready()
    want = translations(server, [SENTENCES[1]], target_lang="de")[0]["text"]
    shown, dom = page_dom(server, {"q": SENTENCES[1], "source": "en", "target": "de"}, tmp_path)
    assert shown == want.replace("&", "&amp;"), dom[-2000:]
    assert '<option value="en|de">en → de</option>' in dom


def test_key_queue_and_sigterm(run):
    # A second server: an API key, room for 2 waiting requests, each batch waiting 3 s
    # for more. Two requests wait; a third is refused 503; SIGTERM answers the two and
    # exits 0.
    server = Server(run, "--api-key", "sesame", "--max-queue", "2", "--max-wait-ms", "3000",
                    "--beam-size", "1")  # fmt: skip
    try:
        url = server.ready().url + "/v1/translate"
        body = {"texts": [SENTENCES[0]]}
        assert request(url, body)[0] == 401
        status, answer, _ = request(url, body, headers={"Authorization": "Bearer wrong"})
        assert status == 401 and "API key" in answer["error"], answer
        got = []
        keys = [{"headers": {"Authorization": "Bearer sesame"}}, {}]
        bodies = [body, {**body, "api_key": "sesame"}]
        threads = [
            threading.Thread(target=lambda b=b, k=k: got.append(request(url, b, **k)))
            for b, k in zip(bodies, keys, strict=True)
        ]
        for thread in threads:
            thread.start()
        end = time.monotonic() + 60
        while request(server.url + "/health")[1]["queue"] < 2:
            assert time.monotonic() < end and all(t.is_alive() for t in threads), got
            time.sleep(0.02)
        status, answer, headers = request(url, bodies[1])
        assert status == 503 and headers["Retry-After"] == "1", answer
        assert "--max-queue" in answer["error"], answer
        server.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(60)
        assert [status for status, *_ in got] == [200, 200], got
        assert server.process.wait(60) == 0, server.log()[-3000:]
    finally:
        server.stop()


def test_every_option_set_shares_one_loaded_model(run, monkeypatch):
    # The server's translators for four option sets: one preset load, one model object.
    import tfblocks.models
    from tfblocks.cli import serve
    from tfblocks.serving.http.requests import Options
    from tfblocks.translation import engines

    made, loads = [], []
    preset_translator, load_preset = engines._preset_translator, tfblocks.models.load_preset
    monkeypatch.setattr(
        engines,
        "_preset_translator",
        lambda *a, **k: made.append(preset_translator(*a, **k)) or made[-1],
    )
    monkeypatch.setattr(
        tfblocks.models, "load_preset", lambda *a, **k: loads.append(a) or load_preset(*a, **k)
    )
    engine = serve._Engine(serve.parse_args(["--model", str(run)]))
    option_sets = [Options(), Options(n_best=2), Options(prefix=True, constraints=True),
                   Options(beam_size=1)]  # fmt: skip
    for options in option_sets:
        assert callable(engine.translate_for(options))
    assert len(loads) == 1 and len(made) == len(option_sets), (loads, made)
    translators = [translator for translator, _ in made]
    assert len({translator.num_hypotheses for translator in translators}) == 2
    for translator in translators[1:]:
        assert translator.model is translators[0].model
        assert translator.source_tokenizer is translators[0].source_tokenizer
        assert translator.target_tokenizer is translators[0].target_tokenizer


@pytest.fixture(scope="module")
def nllb_run(tmp_path_factory):
    """The tiny NLLB fixture imported eng_Latn->deu_Latn as tests/cli/test_import_m2m100.py
    does, greedy but of 16 tokens at most (one XLA program a direction and batch size),
    without its export/1: the server loads the preset, and writing the SavedModel is that
    module's minute."""
    from tfblocks.cli import import_ as import_cli
    from tfblocks.serving import Translator

    folder = tmp_path_factory.mktemp("nllb") / "hf"
    shutil.copytree(NLLB, folder)
    generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    (folder / "generation_config.json").write_text(
        json.dumps({**generation, "num_beams": 1, "max_length": 16}), encoding="utf-8"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Translator, "export", lambda self, path: path)
        args = ["nllb", str(folder), "--output", str(folder.parent / "run")]
        return import_cli.main([*args, "--source-lang", "eng_Latn", "--target-lang", "deu_Latn"])


def test_an_imported_nllb_run_translates_each_request_in_its_direction(nllb_run, tmp_path):
    # Sentences of the fixture, whose greedy translations by transformers it holds: the
    # server gives each request transformers' text in the request's direction (a longer
    # one where transformers stopped at its limit of 10 tokens).
    from tests.cli.test_import_m2m100 import _hugging_face_greedy
    from tfblocks.translation.run_folder import run_language_codes

    server = Server(nllb_run, "--xla", "off")  # directions, not XLA: compiles nothing
    try:
        codes, _ = run_language_codes(nllb_run)
        listed = request(server.ready().url + "/languages")[1]
        assert "no XLA)" in server.log(), server.log()[-2000:]  # the ready line says it
        assert [language["code"] for language in listed] == sorted(codes) and len(codes) == 202
        english = next(language for language in listed if language["code"] == "eng_Latn")
        assert english["targets"] == sorted(set(codes) - {"eng_Latn"})
        # Two directions at once (two batches, one model): ja->en, and the run's own
        # en->de asked for by name.
        texts, want, stopped, got = {}, {}, {}, {}
        for pair in (("jpn_Jpan", "eng_Latn"), ("eng_Latn", "deu_Latn")):
            sources, wanted, limits = _hugging_face_greedy(nllb_run, pair)
            texts[pair], want[pair], stopped[pair] = sources[:1], wanted[0], limits[0]

        def client(source, target):
            body = {"texts": texts[source, target], "source_lang": source, "target_lang": target}
            got[source, target] = [t["text"] for t in translations(server, **body)]

        threads = [threading.Thread(target=client, args=pair) for pair in texts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert set(got) == set(texts), got
        for pair, [text] in got.items():
            assert text.startswith(want[pair]) if stopped[pair] else text == want[pair], pair
        assert got[("jpn_Jpan", "eng_Latn")] != got[("eng_Latn", "deu_Latn")]
        want = got
        # NLLB's one code of a language written in one script (jpn), and LibreTranslate's
        # `auto`: the run's own source.
        pair = ("jpn_Jpan", "eng_Latn")
        alias = translations(server, texts[pair], source_lang="jpn", target_lang="eng_Latn")
        assert [t["text"] for t in alias] == want[pair]
        pair = ("eng_Latn", "deu_Latn")
        body = {"q": texts[pair], "source": "auto", "target": "deu_Latn"}
        assert request(server.url + "/translate", body)[:2] == (
            200, {"translatedText": want[pair]})  # fmt: skip
        for path, body, words in [
            ("/translate", {"q": "a", "source": "eng_Latn", "target": "deu_Latm"},
             "target='deu_Latm' is not a language of this nllb model (202 codes); the closest: "
             "deu_Latn"),
            ("/v1/translate", {"texts": ["a"], "source_lang": "eng_latn"},
             "source_lang='eng_latn' is not a language of this nllb model (202 codes); the "
             "closest: eng_Latn"),
            ("/v1/translate", {"texts": ["a"], "target_lang": 7},
             "`target_lang` must be a language code (a string), got target_lang=7"),
        ]:  # fmt: skip
            status, answer, _ = request(server.url + path, body)
            assert status == 400 and words in answer["error"], answer
        if os.path.exists(CHROMIUM):  # the page: a source and a target list, set by its link
            pair = ("jpn_Jpan", "eng_Latn")
            query = {"q": texts[pair][0], "source": pair[0], "target": pair[1]}
            shown, dom = page_dom(server, query, tmp_path)
            assert shown == want[pair][0].replace("&", "&amp;"), dom[-2000:]
            assert '<label id="directions" hidden="">' in dom, dom[-2000:]
            assert '<option value="jpn_Jpan">jpn_Jpan</option>' in dom, dom[-2000:]
    finally:
        assert server.stop() == 0, server.log()[-3000:]


def test_bounds_and_engines_that_cannot_work_are_refused_in_one_line(capsys):
    from tfblocks.cli import serve

    for args, words in [
        (("--engine", "ctranslate2", "--xla", "off"), "--xla off: CTranslate2 compiles nothing"),
        (("--port", "70000"), "--port must be 0 to 65535, got --port=70000"),
        (("--max-queue", "0"), "--max-queue must be 1 or more, got --max-queue=0"),
    ]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            serve.parse_args(["--model", "run", *args])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and words in err.splitlines()[-1], err
