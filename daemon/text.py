"""Plain-text helpers shared by every system: one stop-word list and one light stemmer.

The topic router, the memory behaviours and the offline model all fold words the same way,
so "dreams" meets "dream" and "booked" meets "booking" wherever a match is decided.
Search queries keep their own, retrieval-tuned list (`QUERY_STOP_WORDS`), with the word
splitting memory search and the offline model's answers share (`words`, `terms`,
`asked_stems`, `mentioned_stems`).
"""

from __future__ import annotations

import re
from functools import lru_cache

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against agent all also am an and any anything are aren't as
    assistant at be because been before being below between both but by can can't cannot could
    couldn't did didn't do does doesn't doing don't done down during each either else even ever
    few for from further get gets going gonna got had hadn't has hasn't have haven't having he
    he'd he'll he's hello her here here's hers herself hi him himself his how how's however i
    i'd i'll i'm i've if in into is isn't it it's its itself just know let let's like made make
    may maybe me message messages might more most much must mustn't my myself need no nor not
    note now of off ok okay on once one only or other ought our ours ourselves out over own
    please quite rather really reverie said same say says session shall shan't she she'd she'll
    she's should shouldn't so some something still such sure tell than thank thanks that that's
    the their theirs them themselves then there there's these they they'd they'll they're
    they've thing things think this those though through thus to told too two under until up
    upon us user very via want wanted wants was wasn't we we'd we'll we're we've well were
    weren't what what's whatever when when's where where's whether which while who who's whom
    whose why why's will with within without won't would wouldn't yeah yes yet you you'd you'll
    you're you've your yours yourself yourselves
    """.split()
)

# Words that look inflected but are not ("embed" is not "emb" + "ed").
_UNINFLECTED = frozenset(
    {
        "embed",
        "speed",
        "breed",
        "greed",
        "bless",
        "news",
        "series",
        "species",
        "lens",
        "gas",
        "bias",
        "always",
        "sometimes",
        "perhaps",
        "during",
        "thing",
        "spring",
        "string",
        "ceiling",
        "morning",
        "evening",
        "wedding",
    }
)


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """Fold common English inflections so 'dreams', 'dreaming' and 'dreamed' meet 'dream'.

    Cached: search re-stems the words of every candidate it re-ranks, and words repeat.
    """
    if word.endswith("'s"):
        word = word[:-2]
    if not word.isalpha() or len(word) <= 3 or word in _UNINFLECTED:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
        if word in _UNINFLECTED:
            return word
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("eed"):
            root = word[: -len(suffix)]
            if root[-1] == root[-2] and root[-1] not in "lsz":
                root = root[:-1]
            return root
    if word.endswith("e") and len(word) >= 4:
        word = word[:-1]
    return word


# -- query words: what memory search looks for ---------------------------------------------

QUERY_STOP_WORDS: frozenset[str] = frozenset(
    """a about above after again against all also am an and any are aren as at be because been
    before being below between both but by can could couldn did didn do does doesn doing don down
    during each else ever few for from further get got had hadn has hasn have haven having he her
    here hers herself him himself his how i i'd i'll i'm i've if in into is isn it it's its itself
    just let like ll me might more most much must my myself no nor not now of off on once only or
    other our ours ourselves out over own re really remember recall s said same say says she should
    so some such t tell than that that's the their theirs them themselves then there these they
    this those through to too under until up us ve very was wasn we were weren what what's when
    where which while who whom why will with won would you your yours yourself yourselves
    know think thing things anything something one ones told talk talked mention mentioned
    d m o y ago""".split()
)

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def words(text: str) -> list[str]:
    """Return the lowercase word tokens of `text` (apostrophes kept inside words)."""
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def terms(text: str) -> list[str]:
    """Return the content words of `text`: lowercase, stop words out, first occurrence order."""
    seen: dict[str, None] = {}
    for w in words(text):
        w = w.removesuffix("'s")
        if len(w) > 1 and w not in QUERY_STOP_WORDS and w not in seen:
            seen[w] = None
    return list(seen)


def asked_stems(text: str) -> frozenset[str]:
    """Return the stems of what a question asks about, for deciding what answers it.

    The words memory search looks for (`terms`): a two-letter name such as "Jo" stays, and
    so does a capitalised one, while the asking itself ("recall", "remember", "tell") goes,
    along with the everyday stop words and bare numbers.
    """
    return frozenset(stem(w) for w in terms(text) if w not in STOP_WORDS and not w.isdigit())


def mentioned_stems(text: str) -> frozenset[str]:
    """Return the stems of every word of `text` that `asked_stems` could ask for."""
    return frozenset(stem(w.removesuffix("'s")) for w in words(text) if len(w) > 1)
