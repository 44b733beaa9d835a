"""The English patterns of the ``rules`` extractor, as one table of small data records.

Each :class:`Pattern` is a regular expression over one sentence plus what to make of a match:

* ``subj`` group: a proper name ("Alice", "Mary Ann Lee"); without it the subject is the speaker
  (the pattern is in the first person: "I ...", "my ...");
* ``obj`` group: the object, cut down by :func:`clean_object` according to the pattern's ``kind``;
* ``n`` group (optional): fills ``{n}`` in ``relation`` ("my risk tolerance is high" →
  ``risk_tolerance``); the fold's spec then canonicalises the relation name and its aliases.

Precision matters more than recall. A question, or a match that its sentence hedges before it
("if", "wish", "would", "not", "I think", ...), yields nothing; an object that is a pronoun, an
opinion ("great", "awesome"), a verb phrase, too long, or (for places and names) not capitalised
is dropped rather than guessed at.

``PATTERNS`` is the documented table (docs/rules.md lists it); within a sentence, facts come in
table order. Changing the table changes extraction output: bump :data:`RULES_VERSION` (and the
spec's ``extractor_version``) when you do. A pattern's ``needs`` (the words every match contains)
only spares running it on sentences it cannot match; keep it true when you change the regex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Version of the pattern table; part of what a FoldSpec using the ``rules`` extractor names.
#: (Still "1" after the ``needs`` pre-filter came in: it changes which patterns are run on a
#: sentence, never what is extracted, so extractions cached under "1" stay valid.)
RULES_VERSION = "1"

# ---------------------------------------------------------------------------------------------
# Building blocks

#: Words that may stand between "I" and the verb without changing the statement.
_ADV = (r"(?:(?:really|absolutely|just|totally|also|still|truly|now|currently|actually|recently|finally|"
        r"even|usually|often|always|definitely|personally|already)\s+)*")
#: Capitalised words that start sentences but are not names.
NOT_NAMES = frozenset(
    "The This That These Those It He She They We You I There Here My Our His Her Their Your What "
    "Who Where When Why How Everyone Someone Somebody Nobody Everything Nothing Today Yesterday "
    "Tomorrow Hey Hi Hello Thanks Thank Yes No Oh Wow And But So Also Then Now Well Yeah Sure "
    "Last Next Every One Mine Ours Both Plus Just Maybe Sometimes Honestly".split()
)
_NOT_NAME = r"(?!(?:" + "|".join(sorted(NOT_NAMES)) + r")\b)"
#: A proper name of one to three capitalised words, e.g. "Alice", "Mary Ann Lee".
_PROPER = r"\b" + _NOT_NAME + r"[A-Z][a-z]+(?:\s" + _NOT_NAME + r"[A-Z][a-z]+){0,2}"
_NAME = r"(?P<subj>" + _PROPER + ")"
#: The rest of the sentence; clean_object cuts it down to the object proper.
_OBJ = r"(?P<obj>.+)"
#: A relation word or up to three in lower case: "risk tolerance", "dog", "favorite_color".
_N = r"(?P<n>[a-z]+(?:[ _][a-z]+){0,2})"
_I = r"\bI\s+" + _ADV
_IM = r"\b(?:I\s+am|I'm|I’m)\s+" + _ADV
_IVE = r"\b(?:I\s+have|I've|I’ve)\s+" + _ADV
_MY = r"\b[Mm]y\s+"
_A = r"(?:an?\s+)"
#: A statement that opens its sentence or clause ("My car is red", "..., my mood is terrible").
_CLAUSE = r"(?:^|(?<=[,;:]\s)|(?<=\sand\s)|(?<=\sbut\s)|(?<=\sso\s))"
#: Closed set of people and pets for "Tom is my brother" and "my sister Ann".
_KIN = (r"(?P<n>husband|wife|partner|boyfriend|girlfriend|fianc[eé]e?|son|daughter|kid|child|mom|"
        r"mother|dad|father|brother|sister|sibling|twin|grandma|grandmother|grandpa|grandfather|"
        r"aunt|uncle|cousin|niece|nephew|best\s+friend|friend|roommate|boss|coach|mentor|"
        r"neighbou?r|colleague|dog|cat|puppy|pup|kitten|pet|horse|bird|rabbit|hamster|turtle)")


@dataclass(frozen=True)
class Pattern:
    """One documented English pattern: ``regex`` over a sentence → (subject, relation, object).

    ``kind`` picks how the object is cleaned (see :func:`clean_object`): ``place``, ``org``,
    ``name`` (capitalised), ``noun`` (short noun phrase), ``like`` (noun phrase that is not a
    reference to the context, "the idea"), ``role`` ("teacher"), ``value`` (short attribute
    value, not an opinion). ``example`` and ``expected`` document the pattern and are checked by
    the tests; the speaker of every example is ``"Caroline"``.
    """

    name: str
    regex: re.Pattern[str]
    relation: str
    kind: str
    confidence: float
    example: str
    expected: tuple[str, str, str]
    #: What every match contains, as groups of lower-case words: each group has one of its words
    #: somewhere in the lower-cased sentence (a substring, not a whole word). A pre-filter for
    #: speed only: a sentence that lacks a group cannot match, so the pattern is not run on it;
    #: ``()`` runs it on every sentence. It must hold for every match, or facts are lost (the
    #: tests compare the filtered extractor with a scan of every pattern).
    needs: tuple[tuple[str, ...], ...] = ()


def _p(name: str, regex: str, relation: str, kind: str, confidence: float, example: str,
       expected: tuple[str, str, str], *, needs: str) -> Pattern:
    """``needs``: the groups separated by ``+``, the words of a group by spaces."""
    groups = tuple(tuple(group.split()) for group in needs.split("+"))
    return Pattern(name, re.compile(regex), relation, kind, confidence, example, expected, groups)


# fmt: off
PATTERNS: tuple[Pattern, ...] = (
    # -- places --------------------------------------------------------------------------------
    _p("i_live_in", _I + r"(?i:live|reside)\s+in\s+" + _OBJ, "lives_in", "place", 0.8,
       "I live in Boston with my partner.", ("Caroline", "lives_in", "Boston"), needs="live reside"),
    _p("x_lives_in", _NAME + r"\s+(?:lives|resides)\s+in\s+" + _OBJ, "lives_in", "place", 0.8,
       "Melanie lives in Portland.", ("Melanie", "lives_in", "Portland"), needs="lives resides"),
    _p("i_moved_to", _I + r"(?i:moved|relocated)\s+(?:back\s+)?to\s+" + _OBJ, "moved_to", "place", 0.75,
       "I moved to Sweden last year.", ("Caroline", "lives_in", "Sweden"), needs="moved relocated"),
    _p("x_moved_to", _NAME + r"\s+(?:moved|relocated)\s+(?:back\s+)?to\s+" + _OBJ, "moved_to", "place", 0.75,
       "Jon moved to Chicago in May.", ("Jon", "lives_in", "Chicago"), needs="moved relocated"),
    _p("x_located_in", _NAME + r"\s+is\s+(?:located|based)\s+in\s+" + _OBJ, "located_in", "place", 0.8,
       "Acme is located in Berlin.", ("Acme", "located_in", "Berlin"), needs="located based"),
    _p("i_born_in", _I + r"(?i:was\s+born)\s+in\s+" + _OBJ, "born_in", "place", 0.8,
       "I was born in Sweden.", ("Caroline", "born_in", "Sweden"), needs="born"),
    _p("i_grew_up_in", _I + r"(?i:grew\s+up)\s+in\s+" + _OBJ, "grew_up_in", "place", 0.75,
       "I grew up in Ohio, near Dayton.", ("Caroline", "grew_up_in", "Ohio"), needs="grew"),
    _p("im_from", _IM + r"(?:originally\s+)?from\s+" + _OBJ, "from", "place", 0.7,
       "I'm from Sweden originally.", ("Caroline", "from", "Sweden"), needs="am 'm ’m + from"),
    _p("i_visited", _I + r"(?:visited|(?:went|traveled|travelled|flew)\s+to|got\s+back\s+from)\s+" + _OBJ,
       "visited", "noun", 0.6,
       "Last weekend I went to a music festival in Boston.", ("Caroline", "visited", "music festival"),
       needs="visited went traveled travelled flew got"),
    # -- work ----------------------------------------------------------------------------------
    _p("i_work_at", _I + r"(?i:work)\s+(?:at|for)\s+" + _OBJ, "works_at", "org", 0.8,
       "I work at Google as an engineer.", ("Caroline", "works_at", "Google"), needs="work"),
    _p("x_works_at", _NAME + r"\s+works\s+(?:at|for)\s+" + _OBJ, "works_at", "org", 0.8,
       "Dave works for Acme Corp.", ("Dave", "works_at", "Acme Corp"), needs="works"),
    _p("i_work_as", _I + r"(?i:work)\s+as\s+" + _A + "?" + _OBJ, "job_title", "role", 0.75,
       "I work as a nurse at the clinic.", ("Caroline", "job_title", "nurse"), needs="work"),
    _p("i_volunteer_at", _I + r"(?i:volunteer)\s+(?:at|for|with)\s+" + _OBJ, "volunteers_at", "noun", 0.7,
       "I volunteer at a homeless shelter.", ("Caroline", "volunteers_at", "homeless shelter"), needs="volunteer"),
    _p("i_opened", _I + r"(?:opened|launched|founded|run|own)\s+" + _A + _OBJ, "runs", "noun", 0.65,
       "I opened an online clothing store.", ("Caroline", "runs", "online clothing store"),
       needs="opened launched founded run own"),
    # -- identity, family and pets -------------------------------------------------------------
    _p("im_a_fan_of", _IM + _A + r"(?:(?:big|huge|great)\s+)?fan\s+of\s+" + _OBJ, "likes", "like", 0.7,
       "I'm a big fan of sci-fi books.", ("Caroline", "likes", "sci-fi books"), needs="am 'm ’m + fan"),
    _p("im_a", _IM + _A + r"(?!(?:(?:big|huge|great)\s+)?fan\b)" + _OBJ, "is_a", "role", 0.7,
       "I'm a Weight Watchers coach in my group now!", ("Caroline", "is_a", "Weight Watchers coach"),
       needs="am 'm ’m"),
    _p("x_married_to", _NAME + r"\s+is\s+married\s+to\s+" + _OBJ, "married_to", "name", 0.8,
       "Anna is married to Tom Berg.", ("Anna", "married_to", "Tom Berg"), needs="married"),
    _p("im_married_to", _IM + r"married\s+to\s+" + _OBJ, "married_to", "name", 0.8,
       "I'm married to Tom.", ("Caroline", "married_to", "Tom"), needs="am 'm ’m + married"),
    _p("i_have_named", r"\bI(?:\s+|'ve\s+|’ve\s+)" + _ADV + r"(?:have|got|adopted|rescued)\s+(?:an?|another)\s+"
       r"(?:[a-z-]+\s+){0,2}(?P<n>[a-z]+)\s+(?:named|called)\s+" + _OBJ, "has_{n}", "name", 0.8,
       "I have a puppy named Oscar.", ("Caroline", "has_puppy", "Oscar"),
       needs="have got adopted rescued + named called"),
    _p("my_n_named", _MY + _N + r"(?:'s|’s)?\s+(?:is\s+named|is\s+called|name\s+is)\s+" + _OBJ,
       "has_{n}", "name", 0.8,
       "My dog's name is Max.", ("Caroline", "has_dog", "Max"), needs="my + name called"),
    _p("x_is_my_kin", r"(?P<obj>" + _PROPER + r")\s+is\s+my\s+" + _KIN + r"\b(?!['’])", "{n}", "name", 0.75,
       "Tom is my brother.", ("Caroline", "brother", "Tom"), needs="my"),
    _p("my_kin_name", _MY + _KIN + r"\s+(?P<obj>" + _PROPER + r")", "{n}", "name", 0.7,
       "My sister Ann came over.", ("Caroline", "sister", "Ann"), needs="my"),
    _p("i_have_count", _I + r"(?i:have)\s+(?P<obj>\d+|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
       r"(?P<n>kids|children|sons|daughters|brothers|sisters|siblings|dogs|cats|pets|grandchildren)\b",
       "number_of_{n}", "value", 0.75,
       "I have two kids.", ("Caroline", "number_of_kids", "two"), needs="have"),
    _p("i_am_age", _IM + r"(?P<obj>\d{1,3})\s+years?\s+old\b", "age", "value", 0.8,
       "I'm 32 years old.", ("Caroline", "age", "32"), needs="am 'm ’m + old"),
    # -- attributes ----------------------------------------------------------------------------
    _p("my_favorite", _MY + r"(?i:fav(?:ou?rite)?)\s+" + _N + r"\s+(?:is|was)\s+" + _OBJ,
       "favorite_{n}", "noun", 0.75,
       "My favorite recipe is Chicken Pot Pie.", ("Caroline", "favorite_recipe", "Chicken Pot Pie"),
       needs="my + fav"),
    _p("my_n_is", _CLAUSE + _MY + r"(?!fav)" + _N + r"\s+is\s+(?!named\b|called\b)" + _OBJ, "{n}", "value", 0.7,
       "My risk tolerance is high.", ("Caroline", "risk_tolerance", "high"), needs="my"),
    _p("xs_n_is", _CLAUSE + _NAME + r"(?:'s|’s)\s+" + _N + r"\s+is\s+" + _OBJ, "{n}", "value", 0.7,
       "Bob's risk tolerance is low.", ("Bob", "risk_tolerance", "low"), needs="'s ’s"),
    _p("x_is_ys_n", r"(?P<obj>" + _PROPER + r")\s+is\s+(?P<subj>" + _PROPER + r")(?:'s|’s)\s+"
       + _N + r"\b\s*(?:[.!,;]|$)", "{n}", "name", 0.7,
       "Tom is Anna's brother.", ("Anna", "brother", "Tom"), needs="'s ’s"),
    # -- likes, activities, belongings ---------------------------------------------------------
    _p("i_like", _I + r"(?i:like|love|adore|enjoy)\s+" + _OBJ, "likes", "like", 0.6,
       "I love Hawaiian pizza!", ("Caroline", "likes", "Hawaiian pizza"), needs="like love adore enjoy"),
    _p("im_into", _IM + r"(?:(?:really|so|very)\s+)?(?:into|passionate\s+about|obsessed\s+with|drawn\s+to|"
       r"enjoying|loving|fascinated\s+by)\s+" + _OBJ,
       "likes", "like", 0.6,
       "I'm really into pottery these days.", ("Caroline", "likes", "pottery"),
       needs="am 'm ’m + into passionate obsessed drawn enjoying loving fascinated"),
    _p("i_play", r"(?:" + _I + r"play|" + _IVE + r"been\s+playing|" + _IM + r"playing)\s+(?:the\s+)?" + _OBJ,
       "plays", "noun", 0.6,
       "I play the violin.", ("Caroline", "plays", "violin"), needs="play"),
    _p("i_joined", _I + r"(?:joined|signed\s+up\s+for)\s+" + _OBJ, "joined", "noun", 0.6,
       "I joined a local book club last month.", ("Caroline", "joined", "local book club"), needs="joined signed"),
    _p("i_started", r"(?:" + _I + r"(?:started|began|took\s+up)|" + _IVE + r"started)\s+" + _OBJ,
       "started", "noun", 0.6,
       "I started surfing five years ago.", ("Caroline", "started", "surfing"), needs="started began took"),
    _p("i_am_doing", r"(?:" + _IM + r"|" + _IVE + r"been\s+)(?P<n>reading|writing|learning|studying|teaching|"
       r"restoring|fixing|building|painting|working\s+on|training\s+for|volunteering\s+(?:at|with)|"
       r"organi[sz]ing)\s+" + _OBJ, "{n}", "noun", 0.6,
       "I'm learning Spanish.", ("Caroline", "learning", "Spanish"),
       needs="am 'm ’m been + reading writing learning studying teaching restoring fixing building painting "
             "working training volunteering organi"),
    _p("i_did", _I + r"(?P<n>won|finished|completed|wrote|painted|built|restored|published|organi[sz]ed|"
       r"hosted|attended|graduated\s+from|made|(?:took|saw)(?=\s+an?\s)|watched|tried|learned|read|baked|cooked|"
       r"climbed|ran|planted|designed|created|recorded|released)\s+" + _OBJ, "{n}", "noun", 0.6,
       "I won a regional chess tournament.", ("Caroline", "won", "regional chess tournament"),
       needs="won finished completed wrote painted built restored published organi hosted attended graduated "
             "made took saw watched tried learned read baked cooked climbed ran planted designed created "
             "recorded released"),
    _p("i_acquired", _I + r"(?:bought|adopted|rescued|got)\s+" + _A + _OBJ, "acquired", "noun", 0.6,
       "I just got a new Ferrari!", ("Caroline", "acquired", "new Ferrari"), needs="bought adopted rescued got"),
    _p("we_went_doing", r"\b(?:I|[Ww]e)\s+" + _ADV + r"went\s+(?P<obj>[a-z]+ing)\b", "went", "noun", 0.6,
       "We went camping at the lake.", ("Caroline", "went", "camping"), needs="went"),
    _p("i_lost_my", _I + r"lost\s+my\s+(?P<obj>job|home|house|" + _KIN[6:], "lost", "noun", 0.65,
       "I lost my job last month.", ("Caroline", "lost", "job"), needs="lost + my"),
    _p("i_met", _I + r"met\s+(?:up\s+with\s+)?(?P<obj>" + _PROPER + r")", "met", "name", 0.6,
       "Yesterday I met Rob at the gym.", ("Caroline", "met", "Rob"), needs="met"),
)
# fmt: on

# ---------------------------------------------------------------------------------------------
# Guards and object cleaning

#: A match is ignored when one of these appears in its sentence before the match: the speaker is
#: hedging, wishing, negating or guessing, not stating.
HEDGE = re.compile(
    r"\b(?:if|wish|hope|maybe|perhaps|might|would|could|should|unless|whether|not|never|no\s+longer|"
    r"used\s+to|want|wanted|wanna|gonna|going\s+to|plan|planning|dream|imagine|pretend|think|"
    r"thinking|considering|guess|suppose|feel\s+like|someday)\b|n[’']t\b",
    re.IGNORECASE,
)

#: Where an object ends: punctuation and clause-joining words.
_BOUNDARY = re.compile(
    r"\s*(?:[,;:!?()\"“”…]|\.(?:\s|$)|[-–—]+\s|[-–—]{2,}|—|\s(?:and|but|or|because|so|which|who|"
    r"whom|whose|that|when|where|while|since|though|although|as|if|until|after|before|than|to|"
    r"cause|like|such|including|called|named|i|i'm|i’m|by\s+the\s+way|btw|anyway|anyways)\b)",
    re.IGNORECASE,
)
_TIME = (r"yesterday|today|tonight|tomorrow|last|next|this|these|recently|now|ago|again|already|"
         r"soon|lately|every|each|once|twice|originally|anymore|together|too|lol|haha|more|"
         r"first|finally|earlier|later|nonstop|ever|\d+\s+(?:years?|months?|weeks?|days?|hours?|times?)|one|two|three|four|five|six|seven|eight|nine|ten|few|"
         r"couple|several|a\s+few|a\s+couple")
_PREP = r"for|with|from|since|during|back|right|at|on|in|by|near|around|about|into|over|through"
_TAIL = {
    "place": re.compile(rf"\s(?:{_TIME}|{_PREP})\b.*$", re.IGNORECASE | re.S),
    # a second "the" starts a new noun phrase ("a great omelette the first time")
    "noun": re.compile(rf"\s(?:{_TIME}|{_PREP}|the)\b.*$", re.IGNORECASE | re.S),
    "like": re.compile(rf"\s(?:{_TIME}|{_PREP}|the)\b.*$", re.IGNORECASE | re.S),
    "role": re.compile(rf"\s(?:{_TIME}|{_PREP}|the)\b.*$", re.IGNORECASE | re.S),
    # organisations keep "of" and "for" ("Bank of America", "Center for X")
    "org": re.compile(rf"\s(?:{_TIME}|with|since|during|as|at|on|in|near|around)\b.*$", re.IGNORECASE | re.S),
    "value": re.compile(rf"\s(?:{_TIME})\b.*$", re.IGNORECASE | re.S),
}
_LEADING = re.compile(r"^(?:the|a|an|some)(?:\s+|$)", re.IGNORECASE)
#: Opinion words dropped from the front of a noun phrase ("an awesome music festival").
_PRAISE = re.compile(r"^(?:(?:awesome|cool|coolest|great|greatest|amazing|fancy|rad|nice|lovely|"
                     r"beautiful|fantastic|incredible|wonderful|epic|fun|super|really|very|huge|big)\s+)+",
                     re.IGNORECASE)
#: Words after a gerund object that show its own object was cut away ("listening to ...").
_DANGLING = frozenset((_PREP + "|to|of|up|out|off|down|the|a|an|my|your|his|her|our|their|more|"
                       "some|new|different|myself|yourself|it|them|this|that|these|those").split("|"))
#: A match right after one of these is inside a relative clause ("the things I love makes ...").
RELATIVE = re.compile(r"\b(?:things?|stuff|something|everything|anything|nothing|ones?|what|"
                      r"whatever|which|whom|who)\s*$", re.IGNORECASE)
#: Nouns too generic to be worth a fact on their own ("I visited a place").
_GENERIC = frozenset(
    "place places event events trip store shop area spot project thing stuff addition surprise "
    "people person one ones time day week moment experience chance opportunity idea pic picture "
    "photo shot news break game games book books project addition difference friends progress "
    "mistake decision effort change choice walk look step trip deep breath note rest nap call".split()
)
#: Modifiers that do not make a generic noun specific ("a new project").
_PLAIN = frozenset("new old big small little another other".split())
#: Objects containing any of these words are references we cannot resolve, or not objects at all.
_PRONOUNS = frozenset(
    "i me my mine myself you your yours yourself he him his she her hers it its we us our ours they "
    "them their theirs this that these those there here what how why when where who which whatever "
    "something anything everything nothing someone anyone everyone somebody anybody "
    "lot lots bit kind sort way one ones thing things stuff ton tons bunch while".split()
)
#: First words that mean the object is a verb phrase, a modifier or a time, not a thing.
_BAD_START = frozenset(
    "to so very really too just also all more most much many both being getting having doing going "
    "seeing hearing knowing making taking trying feeling working spending almost still always already "
    "finally not pretty quite super kinda kind totally definitely actually probably sure like such "
    "is are was were be been has have had can will every each today yesterday now lately real "
    "in on at up out with for from by about into over off back few couple several no as ever "
    "nonstop down last next recently lately earlier tonight ago another other others different".split()
)
#: Opinions, not attribute values ("my art is important", "my car is the best").
_OPINION = frozenset(
    "awesome great good best better nice cool amazing incredible important key terrible bad worse "
    "worst fine okay ok perfect lovely beautiful wonderful fantastic fun hard tough crazy huge big "
    "special everything priority precious different same unique interesting weird strange "
    "exciting awful horrible sweet cute gorgeous stunning epic insane wild".split()
)
#: Relation words (the {n} group) that name no attribute ("my life is ...", "my heart is ...").
_BAD_N = frozenset(
    "life work heart soul mind head body plan plans dream dreams goal goals hope thing things way "
    "journey passion love time day week year days family place home job main favorite favourite "
    "fave advice point guess bet question answer pleasure own new old first last next only".split()
)
#: Role words for is_a that are feelings or states, not roles ("I'm a bit tired", "I'm a mess").
_BAD_ROLE = frozenset(
    "bit little lot mess wreck firm strong true total complete real fan part sucker believer "
    "fool huge big great lucky happy proud".split()
)
MAX_OBJECT_CHARS = 60
_YOU = re.compile(r"\byou(?:r|rs)?\b", re.IGNORECASE)
_DEFINITE = re.compile(r"the\s+[a-z]")
_ONLINE = re.compile(r"\s+online$")
_MAX_WORDS = {"place": 4, "org": 5, "name": 3, "noun": 4, "like": 4, "role": 4, "value": 3}


def clean_object(raw: str, kind: str) -> str | None:
    """Cut the text after a pattern down to its object, or ``None`` when it is no usable object.

    1. cut at the first clause boundary (punctuation, "and", "but", "because", "that", ...); a
       one-word first conjunct sharing its noun keeps the second ("sci-fi and fantasy books");
    2. cut at a time word, and (except for values, names and organisations) a preposition;
    3. strip a leading article; reject pronouns, verb phrases, opinions, prepositions left
       hanging after a gerund ("listening to ..."), uncapitalised places and names, and
       objects over :data:`MAX_OBJECT_CHARS` characters or too many words for their kind.
    """
    boundary = _BOUNDARY.search(raw)
    clause = raw[: boundary.start()] if boundary else raw
    if _YOU.search(clause):
        return None  # the statement involves the listener: not a fact about the speaker alone
    text = clause
    if boundary and boundary.group().strip().lower() == "and" and len(text.split()) == 1:
        second = _BOUNDARY.split(raw[boundary.end():], maxsplit=1)[0].strip()
        if 2 <= len(second.split()) <= 3:  # "action and sci-fi movies": the noun is shared
            text = f"{text} and {second}"
    text = text.strip()
    definite = bool(_DEFINITE.match(text))
    text = _LEADING.sub("", text)
    if kind in ("noun", "like"):
        text = _PRAISE.sub("", text)
    if kind in _TAIL:
        text = _TAIL[kind].sub("", text)
    text = _ONLINE.sub("", text.strip(" '’."))  # "a programming group online"
    if not text or not text[0].isalnum() or len(text) > MAX_OBJECT_CHARS:
        return None
    words = text.split()
    lowered = [w.lower().strip("'’") for w in words]
    if len(words) > _MAX_WORDS[kind] or lowered[0] in _BAD_START or lowered[0] in ("a", "an", "the"):
        return None
    if any(w in _PRONOUNS for w in lowered):
        return None
    if kind in ("place", "name") and not words[0][0].isupper():
        return None
    if kind in ("noun", "like", "role", "value"):
        if words[0].islower() and lowered[0].endswith("ly"):
            return None  # an adverb ("mostly", "professionally"), not a thing
        if any(w in ("of", "a", "an") for w in lowered):
            return None  # "the smell of rain", "creating a safe ...": the head noun is unclear
    if kind in ("noun", "like") and lowered[-1] in _GENERIC and all(w in _PLAIN for w in lowered[:-1]):
        return None
    if kind == "like" and definite:
        return None  # "I love the idea": a definite lowercase object points into the context
    if kind in ("noun", "like") and lowered[-1].endswith("ing"):
        rest = raw[raw.find(words[-1]) + len(words[-1]):].split()
        following = rest[0].lower().strip(".,!?;:\"'“”‘’") if rest else ""
        if following in _DANGLING:
            return None  # "I love listening to ...": the gerund's own object was cut away
    if kind == "role" and (lowered[0] in _BAD_ROLE or lowered[-1] in _BAD_ROLE):
        return None
    if kind == "value" and (lowered[0] in _OPINION or lowered[0].endswith("ing")):
        return None
    return text


def relation_word(raw: str) -> str | None:
    """The ``{n}`` part of a relation, or ``None`` when it names no attribute ("my life is ...")."""
    words = raw.lower().replace("_", " ").split()
    if not words or words[-1] in _BAD_N or words[0] in _BAD_N or any(w in _PRONOUNS for w in words):
        return None
    return "_".join(words)
