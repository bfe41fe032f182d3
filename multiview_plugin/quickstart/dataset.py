"""The quickstart's embedded demo dataset: procedurally generated encyclopedia passages about fictional entities.

Every passage describes one made-up entity (a town, an inventor, a ship, a festival, a mountain or a band)
in 4-6 short sentences, each sentence stating ONE attribute (founding year, river, main industry, ...).
Each entity is asked 3-5 questions, each about a DIFFERENT attribute, so one passage is reached from
several "views" -- the situation multi-vector document representations are meant for. Attribute values
are shared by many entities of the same kind (many towns lie on the same river), so a question can only
be answered by combining the entity's name with the attribute it asks about.

All names and texts are generated here from syllables and word lists written for this project; nothing
is copied from elsewhere and no entity is a real one. The output depends only on ``num_entities`` and
``seed`` (a private :class:`random.Random`; no ``hash()``, no set iteration), so it is the same on every
machine and Python version.

Entities are split by entity, per kind: about 70% of them give the training questions, the rest the
evaluation questions. The corpus holds every passage, and evaluation passages never appear in
``train`` (neither as positives nor as negatives).

>>> data = build_quickstart_data(num_entities=18, seed=1)
>>> len(data.corpus), sorted(set(data.doc_kinds.values()))[:2]
(18, ['band', 'festival'])
>>> record = data.train[0]
>>> record["answers"][0].lower() in record["positive_passages"][0]["text"].lower()
True
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["QuickstartData", "build_quickstart_data", "write_quickstart_data", "FILE_NAMES", "KIND_NAMES"]

#: Share of each kind's entities whose questions go to ``train`` (the rest go to the evaluation split).
TRAIN_FRACTION = 0.7

#: Names of the files :func:`write_quickstart_data` writes, by role.
FILE_NAMES = {
    "corpus": "corpus.jsonl",
    "train": "train.jsonl",
    "eval_queries": "eval_queries.jsonl",
    "eval_qrels": "eval_qrels.txt",
    "eval_answers": "eval_answers.jsonl",
}


@dataclass
class QuickstartData:
    """The quickstart dataset, in memory.

    Attributes
    ----------
    corpus : dict[str, dict]
        Docid (``"qs-017"``) -> ``{"docid", "title", "text"}``; every passage, train and eval entities alike.
    train : list[dict]
        Tevatron legacy train records ``{"query_id", "query", "answers", "positive_passages",
        "negative_passages"}`` with one positive and one hard negative (a passage about another entity
        of the same kind, preferring one that shares the asked attribute's value).
    eval_queries : dict[str, str]
        Query id -> question, about entities none of whose passages appear in ``train``.
    eval_answers : dict[str, list[str]]
        Query id -> answer strings (each appears verbatim in the gold passage).
    eval_qrels : dict[str, dict[str, int]]
        Query id -> ``{gold docid: 1}``.
    doc_kinds : dict[str, str]
        Docid -> entity kind (``"town"``, ``"inventor"``, ...), for inspection and tests.
    """

    corpus: dict[str, dict]
    train: list[dict]
    eval_queries: dict[str, str]
    eval_answers: dict[str, list[str]]
    eval_qrels: dict[str, dict[str, int]]
    doc_kinds: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------- name generation

_SYLLABLES = (
    "al", "bar", "bel", "cor", "dan", "del", "dor", "el", "fen", "gal", "har", "is", "jor", "kel", "kor",
    "lan", "lor", "mar", "mir", "nor", "os", "pel", "quin", "ras", "rin", "sel", "sor", "tal", "tor", "ul",
    "val", "ven", "vor", "wen", "zan", "ka", "le", "mo", "ri", "ta", "vi", "na", "sa", "do", "lu", "bre",
    "dra", "gri", "tha",
)
_PLACE_ENDINGS = ("", "", "a", "en", "holm", "mere", "wick", "stead", "by", "ia", "ford", "mouth")
_ROOT_ENDINGS = ("", "", "a", "is", "on", "el", "ine")
_FIRST_ENDINGS = ("a", "o", "en", "is", "e", "ia", "an", "ir")
_LAST_ENDINGS = ("", "", "s", "er", "ov", "ind", "ley", "ard")


class _Names:
    """Fresh fictional names from syllables.

    No name word repeats, and none is part of another (no "Dori" beside "Dorian"), so a name, or an answer
    that is a name, only ever matches where it is meant to -- also for substring-based answer matching.
    """

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.words: list[str] = []  # lower-cased words of every name generated so far
        self.used: set[str] = set()  # whole names that are not made of fresh words (album titles)

    def _word(self, endings: tuple[str, ...], syllables: int = 2) -> str:
        parts = [self.rng.choice(_SYLLABLES) for _ in range(syllables)]
        word = "".join(parts) + self.rng.choice(endings)
        for ch in "aeiourlnsd":  # no triple letters ("Nallla"), no "aa" / "ii" / "uu"
            word = word.replace(ch * 3, ch * 2)
        for ch in "aiu":
            word = word.replace(ch * 2, ch)
        return word.capitalize()

    def _clashes(self, word: str) -> bool:
        return len(word) < 4 or any(word in w or w in word for w in self.words)

    def fresh(self, make: Callable[[], str]) -> str:
        """A name from ``make()`` whose words are all new (see the class docstring)."""
        for _ in range(10_000):
            name = make()
            words = name.lower().split()
            if not any(self._clashes(w) for w in words) and len(set(words)) == len(words):
                self.words += words
                return name
        raise ValueError("ran out of fictional names; use fewer entities")

    def place(self) -> str:
        return self.fresh(lambda: self._word(_PLACE_ENDINGS))

    def root(self) -> str:
        return self.fresh(lambda: self._word(_ROOT_ENDINGS))

    def person(self) -> str:
        def make() -> str:
            first = self._word(_FIRST_ENDINGS, syllables=self.rng.choice((1, 1, 2)))
            last = self._word(_LAST_ENDINGS, syllables=self.rng.choice((1, 2, 2)))
            return f"{first} {last}"

        return self.fresh(make)

    def pattern(self, patterns: tuple[str, ...]) -> str:
        """A name like ``"Mount {x}"`` whose root ``{x}`` is a fresh name."""
        return self.rng.choice(patterns).format(x=self.root())

    def album(self) -> str:
        """A two-word album title not given before (its words are common words, so they may recur)."""
        for _ in range(10_000):
            title = f"{self.rng.choice(_ALBUM_ADJECTIVES)} {self.rng.choice(_ALBUM_NOUNS)}"
            if title not in self.used:
                self.used.add(title)
                return title
        raise ValueError("ran out of album titles; use fewer entities")


_ALBUM_ADJECTIVES = ("Quiet", "Paper", "Silver", "Hollow", "Amber", "Northern", "Restless", "Velvet", "Crooked",
                     "Distant", "Salt", "Winter", "Borrowed", "Lantern", "Copper", "Sleepless")
_ALBUM_NOUNS = ("Harbours", "Engines", "Orchards", "Signals", "Rooftops", "Tides", "Maps", "Bridges", "Sparrows",
                "Kingdoms", "Weather", "Postcards", "Staircases", "Islands", "Radios", "Kites")


# ----------------------------------------------------------------------------- kinds and attributes


class _Gen:
    """What attribute values are drawn from: the dataset's random stream, names and shared name pools."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.names = _Names(rng)
        self.pools: dict[str, list[str]] = {}

    def pool(self, name: str, size: int, make: Callable[[_Names], str]) -> list[str]:
        if name not in self.pools:
            self.pools[name] = [make(self.names) for _ in range(size)]
        return self.pools[name]


ValueFn = Callable[[_Gen], str]


def _choice(*values: str) -> ValueFn:
    """A value shared by many entities: one of ``values``."""
    return lambda gen: gen.rng.choice(values)


def _pool(name: str, size: int, make: Callable[[_Names], str]) -> ValueFn:
    """A value shared by many entities: one of ``size`` fictional names generated once per dataset."""
    return lambda gen: gen.rng.choice(gen.pool(name, size, make))


def _fresh(make: Callable[[_Names], str]) -> ValueFn:
    """A value of this entity alone: a new fictional name."""
    return lambda gen: make(gen.names)


def _year(low: int, high: int) -> ValueFn:
    return lambda gen: str(gen.rng.randint(low, high))


def _count(low: int, high: int, step: int, suffix: str = "") -> ValueFn:
    return lambda gen: f"{gen.rng.randrange(low, high + 1, step):,}{suffix}"


@dataclass(frozen=True)
class _Attribute:
    """One fact about an entity: how to draw its value, say it (sentences) and ask it (questions).

    Sentence templates may use ``{name}``, ``{v}`` (the value) and references to the entity: ``{Subj}`` /
    ``{subj}`` (subject), ``{Poss}`` / ``{poss}`` (possessive), ``{obj}`` (object); question templates
    use ``{name}``. The value appears verbatim in every sentence template.
    """

    key: str
    value: ValueFn
    sentences: tuple[str, ...]
    questions: tuple[str, ...]


@dataclass(frozen=True)
class _Kind:
    """A kind of entity: how to name one, its noun and pronoun, its introducing attribute and the others."""

    name: str
    make_name: Callable[[_Gen], str]
    noun: str
    pronoun: str | None  # "it", "person" (she/he drawn per entity) or None (no pronoun: bands)
    intro: _Attribute
    attributes: tuple[_Attribute, ...]


_TOWN = _Kind(
    name="town",
    make_name=lambda gen: gen.names.place(),
    noun="town",
    pronoun="it",
    intro=_Attribute(
        "region", _pool("region", 6, _Names.root),
        ("{name} is an old market town in the {v} region, known for its narrow streets and stone bridges.",
         "{name} is a small town in the {v} region, surrounded by farmland and low wooded hills.",
         "The town of {name} lies in the quiet {v} region, a few hours by road from the coast."),
        ("In which region is the town of {name}?",
         "What region does {name} belong to?",
         "{name} is a town in what part of the country?")),
    attributes=(
        _Attribute(
            "founded", _year(1180, 1860),
            ("{Subj} was founded in {v}, when a handful of farming families built houses around a well.",
             "The first settlers arrived there in {v} and built a chapel that still stands today.",
             "According to the town archives, {poss} charter dates from {v}."),
            ("When was {name} founded?",
             "In what year was {name} established?",
             "What year did settlement at {name} begin?")),
        _Attribute(
            "river", _pool("river", 8, _Names.root),
            ("{Subj} sits on the banks of the {v} River, which often floods the lower meadows in spring.",
             "The {v} River flows through the centre of {obj}, crossed by three old bridges.",
             "{Subj} grew up around a ford on the {v} River, where traders once paid a toll."),
            ("Which river runs through {name}?",
             "On what river is {name} located?",
             "Name the waterway beside the town of {name}.")),
        _Attribute(
            "industry", _choice("copper smelting", "wool weaving", "glassblowing", "salt harvesting",
                                "boat building", "clockmaking", "paper milling", "cheese making", "rope making",
                                "pottery"),
            ("{Poss} main trade is {v}, and several family workshops have operated for generations.",
             "Most people in {obj} earn a living from {v}, as their grandparents did before them.",
             "For centuries the local economy has depended on {v}, which still employs many residents."),
            ("What industry is {name} known for?",
             "What is the chief industry of {name}?",
             "How do most workers in {name} make their money?")),
        _Attribute(
            "twin", _pool("twin", 10, _Names.place),
            ("{Subj} is twinned with {v}, and pupils from both towns visit each other every summer.",
             "Since the last century a formal partnership has linked {obj} with the town of {v}.",
             "{Poss} sister town is {v}, whose council visits the autumn fair every year."),
            ("Which town is {name} twinned with?",
             "What is the sister town of {name}?",
             "{name} has an official partnership with which other town?")),
        _Attribute(
            "dish", _choice("smoked eel pie", "barley soup with plums", "honey rye bread", "fried river trout",
                            "lentil dumplings", "apple and onion tart", "pickled herring", "chestnut cake",
                            "mushroom pasties"),
            ("Visitors are encouraged to try {v}, the local speciality served in every inn.",
             "{Subj} is famous for a dish called {v}, traditionally eaten on holidays.",
             "No market day in {obj} is complete without {v}, sold from wooden stalls in the square."),
            ("What dish is {name} famous for?",
             "What local food should a visitor to {name} taste?",
             "Which speciality comes from the kitchens of {name}?")),
        _Attribute(
            "population", _count(10_000, 48_000, 100),
            ("About {v} people live there today, many of them in new houses along the main road.",
             "The most recent census counted {v} residents in {obj} and the surrounding villages.",
             "{Subj} has a population of roughly {v}, which has grown slowly over the past decades."),
            ("How many people live in {name}?",
             "What is the population of {name}?",
             "How many inhabitants does {name} have?")),
    ),
)

_INVENTOR = _Kind(
    name="inventor",
    make_name=lambda gen: gen.names.person(),
    noun="inventor",
    pronoun="person",
    intro=_Attribute(
        "birthplace", _pool("birthplace", 8, _Names.place),
        ("{name} was a self-taught inventor born in the busy harbour city of {v}.",
         "Born in {v} to a family of carpenters, {name} became a celebrated inventor.",
         "The inventor {name} was born and raised in {v}, where the family ran a small shop."),
        ("Where was {name} born?",
         "What is the birthplace of the inventor {name}?",
         "Which city is {name} originally from?")),
    attributes=(
        _Attribute(
            "invention", _choice("folding water pump", "pneumatic letter sorter", "wind-powered loom",
                                 "pocket barometer", "clockwork seed drill", "mirror telegraph", "fireproof lantern",
                                 "tidal clock", "steam-driven lathe"),
            ("{Poss} best-known creation is the {v}, which was soon copied across the country.",
             "{Subj} is remembered above all for the {v}, a design still shown in museums.",
             "The {v} made {obj} famous and brought orders from workshops far and wide."),
            ("What did {name} invent?",
             "Which device is {name} known for?",
             "What is the most famous invention of {name}?")),
        _Attribute(
            "field", _choice("mechanics", "chemistry", "astronomy", "hydraulics", "optics", "metallurgy",
                             "acoustics", "cartography"),
            ("{Subj} trained in {v} for several years before opening a workshop.",
             "{Poss} early studies were in {v}, under a strict but generous teacher.",
             "As a student {subj} concentrated on {v} and filled many notebooks with sketches."),
            ("What subject did {name} study?",
             "In which field was {name} educated?",
             "What was the academic background of {name}?")),
        _Attribute(
            "patent", _year(1790, 1925),
            ("{Subj} received a first patent in {v}, after two years of careful experiments.",
             "The first patent in {poss} name was granted in {v}, following several rejected applications.",
             "In {v} the patent office finally approved {poss} first design."),
            ("When did {name} obtain a first patent?",
             "In what year was {name} granted a patent for the first time?",
             "What year did {name} get patent protection for the first time?")),
        _Attribute(
            "award", _choice("Copper Compass Medal", "Lantern Prize", "Brasswheel Award", "Northlight Medal",
                             "Golden Cog Prize", "Harrowfield Medal", "Order of the Open Gate"),
            ("{Subj} was honoured with the {v} for services to engineering.",
             "Late in life {subj} won the {v}, an honour accepted with typical modesty.",
             "{Poss} work earned the {v}, which was presented at a crowded ceremony."),
            ("Which award did {name} win?",
             "What prize was {name} given?",
             "What distinction was awarded to {name}?")),
        _Attribute(
            "partner", _pool("collaborator", 10, _Names.person),
            ("{Subj} worked closely with the engineer {v}, who made the costly metal parts.",
             "The engineer {v} was {poss} long-time collaborator and closest friend.",
             "Many of {poss} machines were built together with {v} in a rented barn."),
            ("Who was the collaborator of {name}?",
             "With which engineer did {name} work?",
             "Who helped {name} build machines?")),
    ),
)

_SHIP = _Kind(
    name="ship",
    make_name=lambda gen: gen.names.pattern(("{x}", "Star of {x}", "{x} Queen", "Lady {x}", "Spirit of {x}")),
    noun="ship",
    pronoun="it",
    intro=_Attribute(
        "type", _choice("cargo schooner", "paddle steamer", "three-masted barque", "river ferry", "whaling brig",
                        "mail packet", "fishing smack", "coastal lugger"),
        ("{name} was a {v} that worked along the northern coast for most of its life.",
         "Built as a {v}, {name} served owners in several ports over the decades.",
         "The vessel {name} was a sturdy {v} with a reputation for handling rough seas."),
        ("What type of vessel was {name}?",
         "What kind of ship was {name}?",
         "{name} was what sort of boat?")),
    attributes=(
        _Attribute(
            "launched", _year(1822, 1936),
            ("{Subj} was launched in {v} in front of a large crowd of dock workers.",
             "{Subj} first went to sea in {v}, after a long delay caused by bad weather.",
             "{Poss} maiden voyage took place in {v}, on a calm morning in early spring."),
            ("When was {name} launched?",
             "In what year did {name} start sailing?",
             "What year did the ship {name} enter service?")),
        _Attribute(
            "shipyard", _pool("port", 8, _Names.place),
            ("{Subj} was built at the shipyards of {v} from oak and pine.",
             "Shipwrights in {v} constructed the hull over the course of a long winter.",
             "{Poss} keel was laid in the port of {v}, in the oldest of its dry docks."),
            ("Where was {name} built?",
             "Which shipbuilding port produced {name}?",
             "In what town was {name} made?")),
        _Attribute(
            "cargo", _choice("salted cod", "timber", "coal", "wool bales", "tea chests", "marble", "grain", "olive oil",
                             "copper ore"),
            ("{Subj} mostly carried {v} between the small harbours of the region.",
             "For most of its career the hold was filled with {v}, loaded by hand at every stop.",
             "{Poss} usual cargo was {v}, although passengers were sometimes taken aboard as well."),
            ("What goods were transported on {name}?",
             "What did {name} usually haul?",
             "What freight did {name} move?")),
        _Attribute(
            "captain", _pool("captain", 10, _Names.person),
            ("{Poss} longest-serving captain was {v}, a strict but well-liked sailor.",
             "Captain {v} commanded {obj} for many years and kept a detailed logbook.",
             "For two decades {v} served as master of {obj}, rarely missing a voyage."),
            ("Who captained {name}?",
             "Who was in command of {name}?",
             "Which captain led {name}?")),
        _Attribute(
            "figurehead", _choice("swan", "mermaid", "golden lion", "horned owl", "dolphin", "stag", "sea eagle",
                                  "sea serpent", "fox"),
            ("{Poss} figurehead was a carved {v}, repainted by the crew every year.",
             "A wooden {v} decorated the bow of {obj} and became a familiar sight in port.",
             "Sailors recognised {obj} from far away by the painted {v} on the prow."),
            ("What was the figurehead of {name}?",
             "What figure adorned the front of {name}?",
             "What carving was on the front of {name}?")),
    ),
)

_FESTIVAL = _Kind(
    name="festival",
    make_name=lambda gen: gen.names.pattern(("{x} Festival", "{x} Days", "{x} Fair", "Feast of {x}",
                                             "{x} Gathering")),
    noun="festival",
    pronoun="it",
    intro=_Attribute(
        "host", _pool("host", 8, _Names.place),
        ("{name} is a festival held each year in the town of {v}, drawing visitors from the whole region.",
         "Every year the town of {v} hosts {name}, filling its streets with music and stalls.",
         "{name} is an annual celebration in {v} that began as a small village gathering."),
        ("Where does {name} take place?",
         "Which town is the home of {name}?",
         "In what town is {name} organised?")),
    attributes=(
        _Attribute(
            "month", _choice("January", "February", "March", "April", "May", "June", "July", "August",
                             "September", "October", "November", "December"),
            ("{Subj} takes place every {v}, over three long days and nights.",
             "The celebrations fall in {v}, when the town is at its busiest.",
             "{Subj} is held each {v}, and hotels are often fully booked months ahead."),
            ("In which month is {name} held?",
             "When during the year does {name} happen?",
             "At what time of year is {name} celebrated?")),
        _Attribute(
            "first", _year(1610, 1992),
            ("{Subj} was first held in {v}, according to a notice kept in the town hall.",
             "The first edition was organised in {v} by a group of local musicians.",
             "{Poss} history goes back to {v}, although the programme has changed a great deal."),
            ("When was {name} first celebrated?",
             "What year did {name} begin?",
             "Since what year has {name} existed?")),
        _Attribute(
            "highlight", _choice("a lantern parade", "a cheese-rolling race", "a boat procession",
                                 "a bread-baking contest", "a bonfire on the hill", "a kite competition",
                                 "a night of folk dancing", "a horse fair", "a pumpkin regatta"),
            ("The main event is {v}, which takes place on the final evening.",
             "Crowds gather for {v}, the highlight of the programme.",
             "{Poss} best-known tradition is {v}, followed by a long communal meal."),
            ("What is the main attraction of {name}?",
             "What is the most popular event at {name}?",
             "What do visitors to {name} come to see?")),
        _Attribute(
            "occasion", _choice("the end of the harvest", "the return of the swallows", "the first snowfall",
                                "the longest day of the year", "the spring thaw", "the opening of the fishing season",
                                "the grape picking"),
            ("{Subj} celebrates {v}, an important moment in the local calendar.",
             "Originally {subj} marked {v}, and many old customs survive from that time.",
             "The festival was created to honour {v}, as the organisers still explain in every programme."),
            ("What does {name} celebrate?",
             "What occasion is marked by {name}?",
             "What is {name} held in honour of?")),
        _Attribute(
            "drink", _choice("spiced cider", "mulled wine", "plum brandy", "birch sap beer", "hot chocolate",
                             "elderflower cordial", "honey mead"),
            ("Stalls serve {v} throughout the festival, often in small clay cups.",
             "The traditional drink at {obj} is {v}, prepared by volunteers in large pots.",
             "Visitors to {obj} warm up with {v} as the evening grows colder."),
            ("What drink is served at {name}?",
             "What do people drink at {name}?",
             "Which beverage is associated with {name}?")),
    ),
)

_MOUNTAIN = _Kind(
    name="mountain",
    make_name=lambda gen: gen.names.pattern(("Mount {x}", "Mount {x}", "{x} Peak")),
    noun="mountain",
    pronoun="it",
    intro=_Attribute(
        "range", _pool("range", 6, _Names.root),
        ("{name} is a steep mountain in the {v} Range, popular with walkers in summer.",
         "{name} rises above the valleys of the {v} Range and is visible from far away.",
         "Among the many peaks of the {v} Range stands {name}, with its broad rocky shoulder."),
        ("Which mountain range is {name} part of?",
         "In what range is {name} found?",
         "To which range does {name} belong?")),
    attributes=(
        _Attribute(
            "height", _count(1450, 4850, 1, " metres"),
            ("{Subj} reaches a height of {v}, and snow often lingers on top until July.",
             "{Poss} summit stands {v} above sea level.",
             "At {v}, {subj} dominates the skyline of the surrounding villages."),
            ("How high is {name}?",
             "What is the elevation of {name}?",
             "How tall is {name}?")),
        _Attribute(
            "ascent", _year(1786, 1962),
            ("The first recorded ascent was made in {v}, after several failed attempts.",
             "Climbers first reached the summit in {v}, using ropes and iron spikes.",
             "Nobody stood on top of {obj} until {v}, despite many earlier tries."),
            ("When was {name} first climbed?",
             "In what year did anyone first get to the top of {name}?",
             "What year was {name} conquered?")),
        _Attribute(
            "climber", _pool("climber", 10, _Names.person),
            ("The mountaineer {v} pioneered the route to the top along the eastern ridge.",
             "{v} is credited with the first climb of {obj} and wrote a short book about it.",
             "The classic route up {obj} was opened by {v}, a local guide."),
            ("Who first climbed {name}?",
             "Which mountaineer found the way up {name}?",
             "Who conquered {name} first?")),
        _Attribute(
            "rock", _choice("granite", "limestone", "basalt", "sandstone", "slate", "gneiss", "marble",
                            "quartzite"),
            ("{Subj} is made mostly of {v}, which gives its cliffs a distinctive colour.",
             "{Poss} slopes are formed of {v}, deeply cut by streams and old glaciers.",
             "Geologists describe the peak as largely {v}, shaped over millions of years."),
            ("What rock is {name} made of?",
             "What type of stone forms {name}?",
             "What is the geology of {name}?")),
        _Attribute(
            "wildlife", _choice("ibex", "marmots", "golden eagles", "snow hares", "chamois", "wild goats",
                                "ptarmigans", "lynxes"),
            ("{Poss} upper slopes are home to {v}, which are protected by law.",
             "Hikers often spot {v} near the summit on quiet mornings.",
             "The lower forests of {obj} shelter {v} throughout the year."),
            ("What animals live on {name}?",
             "Which wildlife can be seen on {name}?",
             "What creatures inhabit {name}?")),
    ),
)

_BAND = _Kind(
    name="band",
    make_name=lambda gen: gen.names.pattern(("{x} Trio", "{x} Quartet", "{x} Collective", "{x} Project",
                                             "{x} Ensemble", "{x} Club")),
    noun="band",
    pronoun=None,
    intro=_Attribute(
        "city", _pool("bandcity", 8, _Names.place),
        ("{name} is an independent band from the city of {v}, known for long energetic concerts.",
         "Formed in {v}, {name} is a popular live band with a loyal following.",
         "The band {name} comes from {v} and still rehearses in an old warehouse there."),
        ("Where is the band {name} from?",
         "What city is {name} based in?",
         "Which city is home to {name}?")),
    attributes=(
        _Attribute(
            "genre", _choice("folk rock", "jazz fusion", "synth pop", "bluegrass", "post-punk", "chamber pop",
                             "surf rock", "dream pop"),
            ("{Subj} plays {v} with catchy melodies and thoughtful lyrics.",
             "Critics describe {poss} sound as {v} with a touch of humour.",
             "{Poss} music is mostly {v}, recorded live in a single room."),
            ("What genre does {name} play?",
             "What style of music does {name} perform?",
             "What kind of music is {name} known for?")),
        _Attribute(
            "formed", _year(1964, 2016),
            ("{Subj} was formed in {v} by friends who met at school.",
             "The original line-up got together in {v} and played its first shows in small bars.",
             "{Poss} first concert took place in {v}, in front of fewer than thirty people."),
            ("When was {name} formed?",
             "In what year did {name} start out?",
             "What year was {name} founded?")),
        _Attribute(
            "album", _fresh(_Names.album),
            ("{Poss} debut album was {v}, recorded in just two weeks.",
             "The first record by {obj} was called {v} and sold out its first pressing.",
             "{Subj} released {v} as a first album, to warm reviews."),
            ("What was the first album by {name}?",
             "What is the name of the debut record of {name}?",
             "Which album did {name} put out first?")),
        _Attribute(
            "singer", _fresh(_Names.person),
            ("{Poss} lead singer is {v}, who also writes most of the songs.",
             "{v} fronts {obj} on vocals and often talks with the audience between songs.",
             "The vocals of {obj} are handled by {v}, whose voice is easy to recognise."),
            ("Who is the lead singer of {name}?",
             "Who sings in {name}?",
             "Who is the vocalist of {name}?")),
        _Attribute(
            "instrument", _choice("hurdy-gurdy", "twelve-string guitar", "accordion", "harmonium", "cello",
                                  "banjo", "theremin", "mandolin", "steel drum"),
            ("{Poss} sound is built around the {v}, an unusual choice for a modern group.",
             "The {v} plays a central role in the songs of {obj}.",
             "Fans know {obj} for the {v} heard on nearly every track."),
            ("What instrument is {name} known for?",
             "Which instrument features in the music of {name}?",
             "What unusual instrument does {name} use?")),
    ),
)

_KINDS: tuple[_Kind, ...] = (_TOWN, _INVENTOR, _SHIP, _FESTIVAL, _MOUNTAIN, _BAND)

#: The kinds of fictional entity the dataset describes.
KIND_NAMES: tuple[str, ...] = tuple(kind.name for kind in _KINDS)


# ----------------------------------------------------------------------------- building


@dataclass
class _Entity:
    docid: str
    kind: _Kind
    name: str
    values: dict[str, str]      # attribute key -> value, for the attributes the passage states
    stated: list[_Attribute]    # intro first, then the other stated attributes in passage order
    text: str = ""


def _references(kind: _Kind, name: str, pronoun: tuple[str, str, str] | None, rng: random.Random) -> dict[str, str]:
    """Ways to refer to the entity in one sentence: pronoun, "the <noun>" or its (short) name."""
    short = name.split()[-1] if kind.pronoun == "person" else name
    options = [("the " + kind.noun, "the " + kind.noun + "'s", "the " + kind.noun), (short, short + "'s", short)]
    if pronoun is not None:
        options = [pronoun, pronoun, *options]  # pronouns twice as likely
    subj, poss, obj = rng.choice(options)
    return {"subj": subj, "Subj": subj[0].upper() + subj[1:], "poss": poss, "Poss": poss[0].upper() + poss[1:],
            "obj": obj}


def _make_entity(docid: str, kind: _Kind, gen: _Gen) -> _Entity:
    rng = gen.rng
    name = kind.make_name(gen)
    pronoun: tuple[str, str, str] | None = None
    if kind.pronoun == "it":
        pronoun = ("it", "its", "the " + kind.noun)  # "the first climb of it" reads badly
    elif kind.pronoun == "person":
        pronoun = rng.choice((("she", "her", "her"), ("he", "his", "him")))
    others = rng.sample(kind.attributes, rng.choice((3, 4, 4, 5, 5)))  # 4-6 sentences with the intro
    stated = [kind.intro, *others]
    values: dict[str, str] = {}
    sentences = []
    for i, attribute in enumerate(stated):
        values[attribute.key] = attribute.value(gen)
        refs = _references(kind, name, pronoun, rng) if i else {}
        sentences.append(rng.choice(attribute.sentences).format(name=name, v=values[attribute.key], **refs))
    return _Entity(docid, kind, name, values, stated, " ".join(sentences))


def _passage(entity: _Entity) -> dict:
    return {"docid": entity.docid, "title": entity.name, "text": entity.text}


def _hard_negative(entity: _Entity, attribute: _Attribute, pool: list[_Entity], rng: random.Random) -> _Entity:
    """Another entity of the same kind sharing the most values with ``entity`` (the asked one counts double)."""
    def score(other: _Entity) -> int:
        asked = 2 * (other.values.get(attribute.key) == entity.values[attribute.key])
        return asked + sum(other.values.get(k) == v for k, v in entity.values.items() if k != attribute.key)

    candidates = [other for other in pool if other.kind is entity.kind and other.docid != entity.docid]
    best = max(map(score, candidates))
    return rng.choice([c for c in candidates if score(c) == best])


def build_quickstart_data(num_entities: int = 150, seed: int = 13) -> QuickstartData:
    """Generate the quickstart dataset.

    Parameters
    ----------
    num_entities : int
        Number of fictional entities, i.e. of passages; kinds take turns (town, inventor, ship, festival,
        mountain, band, town, ...). At least 3 per kind (18).
    seed : int
        Seed of the generator; the same arguments give the same data everywhere.

    Returns
    -------
    QuickstartData
        With the defaults: 150 passages of 50-95 words (about 73 on average), about 400 train questions
        (108 entities) and about 160 eval questions (42 entities); every entity gets 3-5 questions, each
        about a different attribute.

    Raises
    ------
    ValueError
        ``num_entities`` is below 3 per kind, or so large (over about 1,500) that names run out.
    """
    minimum = 3 * len(_KINDS)
    if num_entities < minimum:
        raise ValueError(f"num_entities must be at least {minimum} (3 per kind), got {num_entities}")
    rng = random.Random(seed)
    gen = _Gen(rng)
    width = max(3, len(str(num_entities - 1)))
    entities = [_make_entity(f"qs-{i:0{width}d}", _KINDS[i % len(_KINDS)], gen) for i in range(num_entities)]

    train_entities: list[_Entity] = []
    eval_docids: set[str] = set()
    for kind in _KINDS:
        members = [e for e in entities if e.kind is kind]
        rng.shuffle(members)
        n_train = min(len(members) - 1, max(2, round(TRAIN_FRACTION * len(members))))
        train_entities += members[:n_train]
        eval_docids.update(e.docid for e in members[n_train:])
    train_entities.sort(key=lambda e: e.docid)

    def questions(entity: _Entity) -> list[tuple[str, _Attribute, str]]:
        count = min(len(entity.stated), rng.choice((3, 3, 4, 4, 5)))
        asked = sorted(rng.sample(entity.stated, count), key=entity.stated.index)
        return [(f"{entity.docid}-{a.key}", a, rng.choice(a.questions).format(name=entity.name)) for a in asked]

    train: list[dict] = []
    for entity in train_entities:
        for qid, attribute, question in questions(entity):
            negative = _hard_negative(entity, attribute, train_entities, rng)
            train.append({"query_id": qid, "query": question, "answers": [entity.values[attribute.key]],
                          "positive_passages": [_passage(entity)], "negative_passages": [_passage(negative)]})
    rng.shuffle(train)  # questions about one passage should not sit side by side in a batch

    eval_queries: dict[str, str] = {}
    eval_answers: dict[str, list[str]] = {}
    eval_qrels: dict[str, dict[str, int]] = {}
    for entity in entities:
        if entity.docid in eval_docids:
            for qid, attribute, question in questions(entity):
                eval_queries[qid] = question
                eval_answers[qid] = [entity.values[attribute.key]]
                eval_qrels[qid] = {entity.docid: 1}

    return QuickstartData(
        corpus={e.docid: _passage(e) for e in entities},
        train=train,
        eval_queries=eval_queries,
        eval_answers=eval_answers,
        eval_qrels=eval_qrels,
        doc_kinds={e.docid: e.kind.name for e in entities},
    )


# ----------------------------------------------------------------------------- writing


def _write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` (newline-terminated, UTF-8) to ``path`` via a temporary file in the same folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _json(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False)


def write_quickstart_data(data: QuickstartData, output_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the dataset as files the package's readers (and Tevatron / Pyserini tools) read.

    Parameters
    ----------
    data : QuickstartData
        From :func:`build_quickstart_data`.
    output_dir : str or os.PathLike
        Folder to write into (created if missing). Each file is replaced atomically.

    Returns
    -------
    dict[str, Path]
        Role -> path: ``corpus`` (``corpus.jsonl``, ``{"docid", "title", "text"}``), ``train``
        (``train.jsonl``, Tevatron legacy records), ``eval_queries`` (``eval_queries.jsonl``,
        ``{"query_id", "query"}``), ``eval_qrels`` (``eval_qrels.txt``, TREC ``qid 0 docid 1``) and
        ``eval_answers`` (``eval_answers.jsonl``, ``{"query_id", "answers"}``).
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {role: folder / name for role, name in FILE_NAMES.items()}
    _write_lines_atomic(paths["corpus"], (_json(p) for p in data.corpus.values()))
    _write_lines_atomic(paths["train"], (_json(r) for r in data.train))
    _write_lines_atomic(paths["eval_queries"],
                        (_json({"query_id": q, "query": text}) for q, text in data.eval_queries.items()))
    _write_lines_atomic(paths["eval_qrels"], (f"{q} 0 {docid} {rel}" for q, judged in data.eval_qrels.items()
                                              for docid, rel in judged.items()))
    _write_lines_atomic(paths["eval_answers"],
                        (_json({"query_id": q, "answers": a}) for q, a in data.eval_answers.items()))
    return paths
