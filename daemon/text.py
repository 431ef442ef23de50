"""Plain-text helpers shared by every system: one stop-word list and one light stemmer.

The topic router, the memory behaviours and the offline model all fold words the same way,
so "dreams" meets "dream" and "booked" meets "booking" wherever a match is decided.
(Search queries keep their own, retrieval-tuned list in `daemon.memory.query`.)
"""

from __future__ import annotations

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
