"""The embedded phrasebook: a seedable generator of Japanese→English sentence pairs.

A small lexicon (times, meals, foods, drinks, people, places, adjectives and verbs with their
conjugated forms) is combined by a dozen templates: actions with tense and negation, likes,
"today's lunch is curry" copulas, adjective sentences, and yes/no, what/who/where questions. The
grammar is regular and every English sentence is a function of its Japanese sentence, so a small
Transformer can learn it almost exactly in minutes on a CPU; the sentences are short (at most 16
English words).
The running example 今日のランチはカレーだ。 → "Today's lunch is curry." is always in `train`.

What "combination" means for the splits: every pair records its content words, each tagged with
its category (`person:太郎`, `place:駅`, `meal:ランチ`, `food:カレー`, `adjective:辛い`; times and
verbs are recorded too but are too few to hold out). A combination is an unordered pair of content
words of two different categories among person, place, meal, food and adjective that occur in the
same sentence. From the combinations that occur, the seed draws two disjoint held-out sets. A
sentence containing a test combination goes to `test`; otherwise one containing a dev combination
goes to `dev`; everything else is `train`. Hence no training sentence contains both words of any
held-out combination, every test sentence contains a combination never seen together in training,
and (checked by the tests) every single word of the test set does occur in training.
"""

import itertools
import random
from typing import NamedTuple

RUNNING_EXAMPLE = ("今日のランチはカレーだ。", "Today's lunch is curry.")

# (japanese, adverb, possessive or None, tenses the time allows); "" is "no time word".
# Japanese marks only past / non-past; the time word decides whether non-past is English
# "will eat" (future) or "eats" (habitual), so the translation stays deterministic.
_TIMES = (
    ("", "", None, ("habitual", "past")),
    ("今日", "today", "today's", ("future", "past")),
    ("明日", "tomorrow", "tomorrow's", ("future",)),
    ("昨日", "yesterday", "yesterday's", ("past",)),
    ("今夜", "tonight", None, ("future",)),
    ("今朝", "this morning", None, ("past",)),
    ("先週", "last week", None, ("past",)),
    ("来週", "next week", None, ("future",)),
    ("毎日", "every day", None, ("habitual",)),
    ("毎朝", "every morning", None, ("habitual",)),
    ("毎晩", "every evening", None, ("habitual",)),
)
# (japanese, subject, possessive, takes English third-person -s, first person)
_PEOPLE = (
    ("私", "I", "my", False, True),
    ("私たち", "we", "our", False, True),
    ("彼", "he", "his", True, False),
    ("彼女", "she", "her", True, False),
    ("兄", "my brother", "my brother's", True, False),
    ("姉", "my sister", "my sister's", True, False),
    ("母", "my mother", "my mother's", True, False),
    ("父", "my father", "my father's", True, False),
    ("友達", "my friend", "my friend's", True, False),
    ("先生", "the teacher", "the teacher's", True, False),
    ("子供たち", "the children", "the children's", False, False),
    ("太郎", "Taro", "Taro's", True, False),
    ("花子", "Hanako", "Hanako's", True, False),
    ("健太", "Kenta", "Kenta's", True, False),
    ("由美", "Yumi", "Yumi's", True, False),
)
_PLACES = (
    ("家", "at home"),
    ("学校", "at school"),
    ("会社", "at the office"),
    ("駅", "at the station"),
    ("公園", "in the park"),
    ("食堂", "in the cafeteria"),
    ("台所", "in the kitchen"),
    ("庭", "in the garden"),
    ("海", "at the beach"),
    ("教室", "in the classroom"),
    ("レストラン", "at the restaurant"),
)
_MEALS = (
    ("朝ご飯", "breakfast"),
    ("ランチ", "lunch"),
    ("晩ご飯", "dinner"),
    ("おやつ", "snack"),
    ("デザート", "dessert"),
)
_FOODS = (
    ("カレー", "curry"),
    ("ラーメン", "ramen"),
    ("すし", "sushi"),
    ("パン", "bread"),
    ("ケーキ", "cake"),
    ("ピザ", "pizza"),
    ("サラダ", "salad"),
    ("スープ", "soup"),
    ("うどん", "udon"),
    ("そば", "soba"),
    ("天ぷら", "tempura"),
    ("魚", "fish"),
    ("肉", "meat"),
    ("ご飯", "rice"),
    ("チョコレート", "chocolate"),
    ("アイスクリーム", "ice cream"),
)
_DRINKS = (
    ("コーヒー", "coffee"),
    ("お茶", "green tea"),
    ("紅茶", "black tea"),
    ("牛乳", "milk"),
    ("水", "water"),
    ("ジュース", "juice"),
)
# "plain past negative negative-past polite polite-past", "English base -s past", objects
_VERB_FORMS = (
    ("食べる 食べた 食べない 食べなかった 食べます 食べました", "eat eats ate", _FOODS),
    ("作る 作った 作らない 作らなかった 作ります 作りました", "make makes made", _FOODS),
    ("買う 買った 買わない 買わなかった 買います 買いました", "buy buys bought", _FOODS + _DRINKS),
    ("飲む 飲んだ 飲まない 飲まなかった 飲みます 飲みました", "drink drinks drank", _DRINKS),
    (
        "注文する 注文した 注文しない 注文しなかった 注文します 注文しました",
        "order orders ordered",
        _FOODS + _DRINKS,
    ),
    (
        "温める 温めた 温めない 温めなかった 温めます 温めました",
        "heat heats heated",
        _FOODS + _DRINKS,
    ),
)
# Each verb as a flat tuple: six Japanese forms, three English forms, then its objects.
_VERBS = tuple((*ja.split(), *en.split(), objects) for ja, en, objects in _VERB_FORMS)
# na-adjectives of liking: (japanese, English base, -s, past)
_LIKES = (("好き", "like", "likes", "liked"), ("大好き", "love", "loves", "loved"))
# i-adjectives by stem (おいし-い, -かった, -くない, -くなかった) and what they describe
_ADJECTIVES = (
    ("おいし", "delicious", _FOODS + _DRINKS),
    ("辛", "spicy", _FOODS),
    ("甘", "sweet", _FOODS + _DRINKS),
    ("熱", "hot", _FOODS + _DRINKS),
    ("冷た", "cold", _FOODS + _DRINKS),
    ("高", "expensive", _FOODS + _DRINKS),
    ("安", "cheap", _FOODS + _DRINKS),
    ("苦", "bitter", _DRINKS),
    ("しょっぱ", "salty", _FOODS),
)
_COPULA = {  # (past, negative) → (Japanese ending, English be)
    (False, False): ("だ", "is"),
    (True, False): ("だった", "was"),
    (False, True): ("ではない", "isn't"),
    (True, True): ("ではなかった", "wasn't"),
}
_HELD_OUT_CATEGORIES = ("person", "place", "meal", "food", "adjective")
_DEV_SHARE, _TEST_SHARE = 0.02, 0.025  # shares of the occurring combinations held out


class PhrasePair(NamedTuple):
    """One generated pair: `source` (Japanese), `target` (English), its content `words`
    (a frozenset of `"category:japanese"` strings) and its `split` ("train", "dev", "test").

    Example:

    >>> pair = generate_phrasebook(seed=0, size=1000)[0]
    >>> sorted(pair.words), pair.split
    (['food:カレー', 'meal:ランチ', 'time:今日'], 'train')
    """

    source: str
    target: str
    words: frozenset
    split: str


def _cap(text):
    return text[0].upper() + text[1:]


def _verb_phrase(verb, tense, negative, third):
    base, third_form, past = verb[-4:-1]
    if tense == "past":
        return f"didn't {base}" if negative else past
    if tense == "future":
        return f"won't {base}" if negative else f"will {base}"
    if negative:
        return f"{'doesn' if third else 'don'}'t {base}"
    return third_form if third else base


def _tail(place, time):
    """English adverbials after the object: ' at the station tomorrow'."""
    return (f" {place[1]}" if place else "") + (f" {time[1]}" if time[0] else "")


def _time_ja(time):
    return f"{time[0]}、" if time[0] else ""


def _place_ja(place):
    return f"{place[0]}で" if place else ""


def _owner(rng, include_demonstratives):
    """A possessor of a meal or food with the tenses it allows: a time, a person or この/あの."""
    both = (False, True)  # may be non-past or past
    owners = [(t[0], t[2], tuple(x == "past" for x in t[3]), f"time:{t[0]}") for t in _TIMES]
    owners = [owner for owner in owners if owner[1]]  # times that have a possessive
    owners += [(p[0], p[2], both, f"person:{p[0]}") for p in _PEOPLE]
    if include_demonstratives:
        owners += [("この", "this", both, None), ("あの", "that", both, None)]
    ja, en, pasts, word = rng.choice(owners)
    prefix = ja if ja in ("この", "あの") else f"{ja}の"
    return prefix, en, rng.choice(pasts), word


def _action(rng, question=None):
    """Person (or 誰) does something to a food or drink, optionally at a place and time."""
    time = rng.choice(_TIMES)
    tense = rng.choice(time[3])
    people = [p for p in _PEOPLE if not (question and p[4])]
    person = rng.choice(people)
    verb = rng.choice(_VERBS)
    food = rng.choice(verb[-1])
    place = None if question == "where" or rng.random() < 0.3 else rng.choice(_PLACES)
    negative = question is None and rng.random() < 0.3
    third = person[3]
    words = {f"time:{time[0]}", f"verb:{verb[0]}", f"person:{person[0]}", f"food:{food[0]}"}
    if place:
        words.add(f"place:{place[0]}")
    if question is None:
        form = verb[1 + 2 * negative] if tense == "past" else verb[2 * negative]
        ja = f"{_time_ja(time)}{person[0]}は{_place_ja(place)}{food[0]}を{form}。"
        en = f"{_cap(person[1])} {_verb_phrase(verb, tense, negative, third)} {food[1]}"
        return ja, en + _tail(place, time) + ".", words
    polite = verb[5] if tense == "past" else verb[4]
    aux = {"past": "did", "future": "will", "habitual": "does" if third else "do"}[tense]
    if question == "who":
        words.remove(f"person:{person[0]}")
        ja = f"{_time_ja(time)}誰が{_place_ja(place)}{food[0]}を{polite}か。"
        en = f"Who {_verb_phrase(verb, tense, False, True)} {food[1]}"
    elif question == "what":
        words.remove(f"food:{food[0]}")
        ja = f"{_time_ja(time)}{person[0]}は{_place_ja(place)}何を{polite}か。"
        en = f"What {aux} {person[1]} {verb[-4]}"
    elif question == "where":
        ja = f"{_time_ja(time)}{person[0]}はどこで{food[0]}を{polite}か。"
        en = f"Where {aux} {person[1]} {verb[-4]} {food[1]}"
    else:  # yes/no
        ja = f"{_time_ja(time)}{person[0]}は{_place_ja(place)}{food[0]}を{polite}か。"
        en = f"{_cap(aux)} {person[1]} {verb[-4]} {food[1]}"
    return ja, en + _tail(place, time) + "?", words


def _like(rng):
    person, like = rng.choice(_PEOPLE), rng.choice(_LIKES)
    food = rng.choice(_FOODS + _DRINKS)
    past, negative = rng.random() < 0.5, rng.random() < 0.3
    ending = _COPULA[(past, negative)][0]
    verb = (None,) * 6 + (*like[1:], None)
    tense = "past" if past else "habitual"
    ja = f"{person[0]}は{food[0]}が{like[0]}{ending}。"
    en = f"{_cap(person[1])} {_verb_phrase(verb, tense, negative, person[3])} {food[1]}."
    return ja, en, {f"person:{person[0]}", f"verb:{like[0]}", f"food:{food[0]}"}


def _meal(rng, question=False):
    """今日のランチはカレーだ。 and 昨日の晩ご飯は何でしたか。"""
    prefix, owner, past, word = _owner(rng, include_demonstratives=False)
    meal = rng.choice(_MEALS)
    words = {word, f"meal:{meal[0]}"}
    if question:
        ja = f"{prefix}{meal[0]}は何{'でした' if past else 'です'}か。"
        return ja, f"What {'was' if past else 'is'} {owner} {meal[1]}?", words
    food = rng.choice(_FOODS)
    negative = rng.random() < 0.3
    ending, be = _COPULA[(past, negative)]
    words.add(f"food:{food[0]}")
    return (
        f"{prefix}{meal[0]}は{food[0]}{ending}。",
        f"{_cap(owner)} {meal[1]} {be} {food[1]}.",
        words,
    )


def _adjective(rng, question=False):
    """この天ぷらは熱かった。 and 母のケーキは甘いですか。"""
    prefix, owner, past, word = _owner(rng, include_demonstratives=True)
    adjective = rng.choice(_ADJECTIVES)
    food = rng.choice(adjective[2])
    words = {f"food:{food[0]}", f"adjective:{adjective[0]}い"}
    if word:
        words.add(word)
    if question:
        ja = f"{prefix}{food[0]}は{adjective[0]}{'かった' if past else 'い'}ですか。"
        return ja, f"{'Was' if past else 'Is'} {owner} {food[1]} {adjective[1]}?", words
    negative = rng.random() < 0.3
    ending = ("くな" if negative else "") + ("かった" if past else "い")
    be = _COPULA[(past, negative)][1]
    ja = f"{prefix}{food[0]}は{adjective[0]}{ending}。"
    return ja, f"{_cap(owner)} {food[1]} {be} {adjective[1]}.", words


# (share of the pairs, generator); the shares sum to 1.
_TEMPLATES = (
    (0.361, _action),
    (0.10, _like),
    (0.12, _meal),
    (0.005, lambda rng: _meal(rng, question=True)),
    (0.14, _adjective),
    (0.054, lambda rng: _adjective(rng, question=True)),
    (0.09, lambda rng: _action(rng, question="yes/no")),
    (0.04, lambda rng: _action(rng, question="who")),
    (0.04, lambda rng: _action(rng, question="what")),
    (0.04, lambda rng: _action(rng, question="where")),
)


def _combinations(words):
    """The unordered cross-category pairs of held-out-able content words of one sentence."""
    eligible = sorted(w for w in words if w.split(":")[0] in _HELD_OUT_CATEGORIES)
    pairs = itertools.combinations(eligible, 2)
    return {(a, b) for a, b in pairs if a.split(":")[0] != b.split(":")[0]}


def generate_phrasebook(seed=0, size=25_000):
    """Generates `size` distinct Japanese→English pairs and assigns each a split.

    Args:
        seed: integer seed; the same seed always gives the same pairs and splits.
        size: number of distinct pairs, 1,000 to 30,000 (the default gives about 22,700 train,
            1,000 dev and 1,300 test pairs).

    Returns:
        A list of `PhrasePair`, the running example first.

    Example:

    >>> pairs = generate_phrasebook(seed=0, size=2000)
    >>> len(pairs), pairs[0].source, pairs[0].target, pairs[0].split
    (2000, '今日のランチはカレーだ。', "Today's lunch is curry.", 'train')
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"`seed` must be an int, got seed={seed!r}.")
    if not isinstance(size, int) or not 1000 <= size <= 30_000:
        raise ValueError(f"`size` must be an int from 1000 to 30000, got size={size!r}.")
    rng = random.Random(seed)
    english, words = {RUNNING_EXAMPLE[0]: RUNNING_EXAMPLE[1]}, {}
    words[RUNNING_EXAMPLE[0]] = frozenset({"time:今日", "meal:ランチ", "food:カレー"})
    quotas = [round(share * size) for share, _ in _TEMPLATES]
    quotas[0] += size - sum(quotas)
    for quota, (_, template) in zip(quotas, _TEMPLATES, strict=True):
        target = len(english) + quota - (template is _meal)
        for _ in range(200 * quota):
            if len(english) >= target:
                break
            ja, en, used = template(rng)
            if english.setdefault(ja, en) != en:
                raise AssertionError(f"Two translations for {ja}: {english[ja]!r}, {en!r}.")
            words[ja] = frozenset(used)
        else:
            raise AssertionError(f"Template {template} ran out of distinct sentences.")
    combos = sorted(set().union(*(_combinations(w) for w in words.values())))
    combos = [c for c in combos if c != ("food:カレー", "meal:ランチ")]
    rng.shuffle(combos)
    n_test, n_dev = round(_TEST_SHARE * len(combos)), round(_DEV_SHARE * len(combos))
    test_combos, dev_combos = set(combos[:n_test]), set(combos[n_test : n_test + n_dev])
    pairs = []
    for ja, en in english.items():
        combos = _combinations(words[ja])
        split = "test" if combos & test_combos else "dev" if combos & dev_combos else "train"
        pairs.append(PhrasePair(ja, en, words[ja], split))
    return pairs


def load_phrasebook(seed=0, size=25_000):
    """The phrasebook as `{"train", "dev", "test"}` lists of `(japanese, english)` tuples.

    Args:
        seed: integer seed of `generate_phrasebook`.
        size: number of distinct pairs over all splits, 1,000 to 30,000.

    Returns:
        A dict from split name to a list of pairs, shuffled with the seed.

    Example:

    >>> splits = load_phrasebook(seed=0, size=2000)
    >>> sorted(splits), sum(len(pairs) for pairs in splits.values())
    (['dev', 'test', 'train'], 2000)
    """
    splits = {"train": [], "dev": [], "test": []}
    for pair in generate_phrasebook(seed, size):
        splits[pair.split].append((pair.source, pair.target))
    rng = random.Random(seed + 1)
    for pairs in splits.values():
        rng.shuffle(pairs)
    return splits
