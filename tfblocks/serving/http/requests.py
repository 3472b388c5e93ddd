"""From a request's body to the texts and options of a translation, and back: the
LibreTranslate shape (`POST /translate`), the native one (`POST /v1/translate`), the
server's directions (`Directions`, or `TokenDirections` for a model that names its
languages by tokens; `GET /languages`) and its limits (`Limits`).

Whatever a client sends wrong is a `RequestError`: an HTTP status and one line that names
the field, the value and the limit, which the app answers as `{"error": "..."}`.
"""

import contextlib
import dataclasses
import json
import urllib.parse
from typing import NamedTuple


class RequestError(Exception):
    """What the server answers a request it refuses: `status` and one line, `message`;
    `headers` to add (`Retry-After`)."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask of the server (`tfblocks-serve`'s flags of the same names).

    Attributes:
        max_body_bytes: the most bytes of a request's body (413 beyond).
        max_chars: the most characters of one text (400 beyond).
        max_texts: the most texts of one request (400 beyond).
        beam_size: the widest beam a request may ask for (`beam_size`), and the most
            hypotheses (`n_best`, LibreTranslate's `alternatives` + 1); None for a
            SavedModel, whose beam was fixed at export (neither may then be asked).
        timeout_s: how long a request waits for its translation (504 beyond).
    """

    max_body_bytes: int = 1 << 20
    max_chars: int = 5000
    max_texts: int = 64
    beam_size: int | None = 4
    timeout_s: float = 60.0


class Options(NamedTuple):
    """The options one search call decodes with: requests batch together only when these
    are the same. `beam_size` None is the server's own; `direction` is the
    `language_tokens` pair of a model that names its languages by tokens
    (`TokenDirections`), None for its own direction; `sampling`, `(top_k, top_p,
    temperature, seed)` of a sampled translation (`tfblocks.decoding.Sampling`), None for
    beam search."""

    n_best: int = 1
    prefix: bool = False
    constraints: bool = False
    beam_size: int | None = None
    direction: tuple | None = None
    sampling: tuple | None = None


class Job(NamedTuple):
    """A parsed translation request: its `options`, its `items` (texts, or `(text,
    prefix, phrases)` tuples holding what `options` asks for) and whether `q` was a list."""

    options: Options
    items: list
    as_list: bool = True


class Directions:
    """The languages a server's model translates between (`GET /languages`).

    Args:
        pairs: the `(source, target)` directions the model was trained on; `[]` when
            its run recorded none (any `source` and `target` are then taken).
        tag: `tag(text, target)` for a model of several directions, which reads the
            target language from a tag in front of the source (`tfblocks.text.
            multilingual.tag_source`); None for a model of one direction.

    Example:

    >>> Directions([("ja", "en")]).languages()
    [{'code': 'ja', 'name': 'ja', 'targets': ['en']}]
    """

    def __init__(self, pairs, tag=None):
        self.pairs, self.tag = [tuple(pair) for pair in pairs], tag
        self.codes = sorted({code for pair in self.pairs for code in pair})

    def targets(self, source):
        """The languages `source` translates into: its trained targets, and with several
        directions any other language of the model (zero-shot)."""
        if self.tag is not None:
            return [code for code in self.codes if code != source]
        return [target for pair_source, target in self.pairs if pair_source == source]

    def languages(self):
        """LibreTranslate's `/languages`: `[{"code", "name", "targets"}]` per source."""
        sources = self.codes if self.tag is not None else sorted({s for s, _ in self.pairs})
        return [{"code": code, "name": code, "targets": self.targets(code)} for code in sources]

    def check(self, source, target, where):
        """`(tag, direction)`: the language to tag the sources with (None: untagged) and
        `Options.direction` (None here; `TokenDirections`' otherwise); a RequestError
        when the model does not translate `source` (None or "auto": any) into `target`
        (None: its one target), named as `where` names the fields."""
        source = None if source in (None, "", "auto") else source
        if not self.pairs:
            return None, None
        if self.tag is None:
            known = [pair for pair in self.pairs
                     if source in (None, pair[0]) and target in (None, pair[1])]  # fmt: skip
            if not known:
                shown = ", ".join(f"{s}->{t}" for s, t in self.pairs)
                raise RequestError(
                    400, f"this server translates {shown}; got {where[0]}={source!r} and "
                    f"{where[1]}={target!r}",
                )  # fmt: skip
            return None, None
        if target not in self.codes or (source is not None and source not in self.codes):
            raise RequestError(
                400, f"`{where[1]}` must be one of this server's languages "
                f"({', '.join(self.codes)}), and `{where[0]}` one of them or auto; got "
                f"{where[0]}={source!r} and {where[1]}={target!r}",
            )  # fmt: skip
        return target, None


class TokenDirections(Directions):
    """The languages of a model that names them by tokens (an imported M2M-100 / NLLB
    run): any of its codes into any other, each direction an `Options.direction` (the
    model's own source for `source` None or "auto", its own target for `target` None).

    Args:
        codes: the model's codes as clients send them (`de`, `deu_Latn`).
        direction: `direction(source, target, where)` -> the `language_tokens` pair
            of that direction (None: the model's own); `source` / `target` None for the
            model's own; a ValueError naming the field (`where`: the names of the two)
            and the closest codes for a code the model does not have.

    Example:

    >>> TokenDirections(["de", "en", "ja"], lambda s, t, where: (s, t)).languages()[0]
    {'code': 'de', 'name': 'de', 'targets': ['en', 'ja']}
    """

    def __init__(self, codes, direction):
        super().__init__([])
        self.codes, self.direction = sorted(codes), direction

    def targets(self, source):
        """Every other language of the model."""
        return [code for code in self.codes if code != source]

    def languages(self):
        """LibreTranslate's `/languages`: every code, into every other."""
        return [{"code": code, "name": code, "targets": self.targets(code)} for code in self.codes]

    def check(self, source, target, where):
        """`(None, direction)`: no tag, and the `Options.direction` of `source` into
        `target`; a RequestError (400) naming the field for a code the model lacks."""
        given = [None if value in (None, "") or (value == "auto" and name == where[0]) else value
                 for name, value in zip(where, (source, target), strict=True)]  # fmt: skip
        for name, value in zip(where, given, strict=True):
            if value is not None and not isinstance(value, str):
                raise RequestError(400, f"`{name}` must be a language code (a string), got "
                                        f"{name}={value!r}")  # fmt: skip
        try:
            return None, self.direction(*given, where)
        except ValueError as error:
            raise RequestError(400, " ".join(str(error).split())) from None


def parse_body(body, content_type, form=None):
    """The fields of a request's `body` (bytes): a JSON object, or a form
    (`application/x-www-form-urlencoded`, or `form`: the multipart form already read,
    a list of `(name, value)`); a field given several times in a form is a list.

    >>> parse_body(b"q=Hello&source=en&q=World", "application/x-www-form-urlencoded")
    {'q': ['Hello', 'World'], 'source': 'en'}
    """
    kind = content_type.split(";")[0].strip().lower()
    if form is None and kind != "application/x-www-form-urlencoded":
        try:
            fields = json.loads(body.decode("utf-8")) if body.strip() else {}
        except (UnicodeDecodeError, ValueError) as error:
            raise RequestError(400, f"the body is not JSON ({error}); send a JSON object or "
                                    "a form") from None  # fmt: skip
        if not isinstance(fields, dict):
            raise RequestError(400, f"the body must be a JSON object, got {type(fields).__name__}")
        return fields
    if form is None:
        try:
            form = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            raise RequestError(400, "the form is not UTF-8") from None
    fields = {}
    for name, value in form:
        if name in fields:
            before = fields[name]
            fields[name] = [*before, value] if isinstance(before, list) else [before, value]
        else:
            fields[name] = value
    return fields


def check_texts(texts, field, limits):
    """`texts` refused (RequestError 400) unless a list of at most `limits.max_texts` str
    of at most `limits.max_chars` characters each; `field` names them."""
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise RequestError(400, f"`{field}` must be a string or a list of strings")
    if len(texts) > limits.max_texts:
        raise RequestError(
            400, f"`{field}` holds {len(texts)} texts; this server takes at most "
            f"{limits.max_texts} a request (--max-texts)",
        )  # fmt: skip
    for number, text in enumerate(texts, 1):
        if len(text) > limits.max_chars:
            raise RequestError(
                400, f"text {number} of `{field}` has {len(text)} characters; this server "
                f"takes at most {limits.max_chars} a text (--max-chars)",
            )  # fmt: skip


def integer(fields, name, default, low, high, limit_flag=None):
    """The integer field `name` of `fields` (a number, or a form's digits), `default` when
    absent; a RequestError naming it unless `low` <= value <= `high` (`limit_flag`: the
    server flag that sets `high`)."""
    value = fields.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"`{name}` must be an integer, got {name}={value!r}")
    if high is None:
        raise RequestError(
            400, f"this server's model decodes with the beam it was exported with (a "
            f"SavedModel): `{name}` cannot be chosen, got {name}={value}",
        )  # fmt: skip
    if not low <= value <= high:
        bound = f" ({limit_flag})" if limit_flag else ""
        raise RequestError(400, f"`{name}` must be {low} to {high}{bound}, got {name}={value}")
    return value


def real(fields, name, low, high, open_low=False):
    """The number field `name` of `fields` (a number, or a form's text), None when
    absent; a RequestError naming it unless finite and within `low`..`high` (`low`
    excluded with `open_low`)."""
    value = fields.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise RequestError(400, f"`{name}` must be a number, got {name}={value!r}")
    if (value <= low if open_low else value < low) or value > high:
        bounds = f"{'above' if open_low else 'from'} {low} to {high}"
        raise RequestError(400, f"`{name}` must be {bounds}, got {name}={value}")
    return float(value)


def sampling(fields):
    """`Options.sampling` of a `/v1/translate` request: `(top_k, top_p, temperature,
    seed)` when any of `sampling_topk`, `sampling_topp`, `sampling_temperature` is given
    (as `tfblocks-translate`'s flags: 0 / 1 / 1 by default; `seed` 0), else None."""
    top_k = integer(fields, "sampling_topk", None, 0, 2**31 - 1)
    top_p = real(fields, "sampling_topp", 0.0, 1.0, open_low=True)
    temperature = real(fields, "sampling_temperature", 0.0, float("inf"), open_low=True)
    seed = integer(fields, "seed", None, 0, 2**31 - 1)
    if (top_k, top_p, temperature) == (None, None, None):
        if seed is not None:
            raise RequestError(400, "`seed` seeds sampling: give a `sampling_*` field too")
        return None
    return (top_k or 0, 1.0 if top_p is None else top_p,
            1.0 if temperature is None else temperature, seed or 0)  # fmt: skip


def libretranslate_job(fields, limits, directions):
    """The `Job` of a LibreTranslate request: `q` (a string or a list), `source`,
    `target`, `format` ("text"), `alternatives` (that many more translations)."""
    if "q" not in fields:
        raise RequestError(400, "`q` is required: the text (or list of texts) to translate")
    as_list = isinstance(fields["q"], list)
    texts = fields["q"] if as_list else [fields["q"]]
    check_texts(texts, "q", limits)
    if fields.get("target") in (None, ""):
        raise RequestError(400, "`target` is required: the language to translate into")
    kind = fields.get("format") or "text"
    if kind != "text":
        raise RequestError(400, f"`format` must be text (HTML is not translated), got "
                                f"format={kind!r}")  # fmt: skip
    high = (limits.beam_size or 1) - 1
    alternatives = integer(fields, "alternatives", 0, 0, high, "--beam-size less one")
    tag, direction = directions.check(fields.get("source"), fields["target"],
                                      ("source", "target"))  # fmt: skip
    items = [text if tag is None or not text.strip() else directions.tag(text, tag)
             for text in texts]  # fmt: skip
    return Job(Options(n_best=alternatives + 1, direction=direction), items, as_list)


def libretranslate_answer(job, results):
    """LibreTranslate's answer: `translatedText` (a list when `q` was), and with
    `alternatives` the other translations of each text."""
    best = [hypotheses[0][0] for hypotheses in results]
    answer = {"translatedText": best if job.as_list else best[0]}
    if job.options.n_best > 1:
        others = [[text for text, _ in hypotheses[1:]] for hypotheses in results]
        answer["alternatives"] = others if job.as_list else others[0]
    return answer


def native_job(fields, limits, directions):
    """The `Job` of a `/v1/translate` request: `texts`, and optionally `n_best`,
    `target_prefix` (a string per text), `constraints` (a list of phrases per text),
    `beam_size`, `source_lang` and `target_lang`, or sampling (`sampling`: `n_best`
    samples)."""
    texts = fields.get("texts")
    if isinstance(texts, str):
        texts = [texts]
    if texts is None:
        raise RequestError(400, "`texts` is required: the list of texts to translate")
    check_texts(texts, "texts", limits)
    beam = integer(fields, "beam_size", None, 1, limits.beam_size, "--beam-size")
    widest = (limits.beam_size or 1) if beam is None else beam
    n_best = integer(fields, "n_best", 1, 1, widest, "the beam size")
    beam = None if beam == limits.beam_size else beam  # the server's own: one batch key
    columns = []
    for name, kind in (("target_prefix", str), ("constraints", list)):
        value = fields.get(name)
        if value is None:
            continue
        if not isinstance(value, list) or len(value) != len(texts):
            raise RequestError(400, f"`{name}` must be a list of one entry per text "
                                    f"({len(texts)})")  # fmt: skip
        if not all(isinstance(entry, kind) for entry in value) or (
            kind is list and not all(isinstance(p, str) for entry in value for p in entry)
        ):
            what = "a string" if kind is str else "a list of phrases (strings)"
            raise RequestError(400, f"each entry of `{name}` must be {what}")
        columns.append(value)
    tag, direction = directions.check(fields.get("source_lang"), fields.get("target_lang"),
                                      ("source_lang", "target_lang"))  # fmt: skip
    texts = [text if tag is None or not text.strip() else directions.tag(text, tag)
             for text in texts]  # fmt: skip
    items = list(zip(texts, *columns, strict=True)) if columns else texts
    given = [fields.get(name) is not None for name in ("target_prefix", "constraints")]
    sampled = sampling(fields)
    if sampled is not None and (given[1] or fields.get("beam_size") is not None):
        raise RequestError(400, "sampling draws samples, without beam search: not with "
                                "`constraints` or `beam_size`")  # fmt: skip
    options = Options(n_best, given[0], given[1], beam, direction, sampled)
    return Job(options, items)


def native_answer(results):
    """`/v1/translate`'s answer: per text its best translation, score and n-best list."""
    return {
        "translations": [
            {
                "text": hypotheses[0][0],
                "score": hypotheses[0][1],
                "n_best": [{"text": text, "score": score} for text, score in hypotheses],
            }
            for hypotheses in results
        ]
    }
