"""The quickstart's embedded demo dataset: procedurally generated encyclopedia passages about fictional entities.

Every entity (a town, an inventor, a ship, a festival, a mountain or a band) is described by 2-3 short
passages, one per *section* of its article -- for a town: history, economy, culture; for a ship:
construction, voyages, crew -- like the passages of a multi-passage encyclopedia article. Every passage
has the entity's name as its title and names it in its first sentence; each of its 3-4 sentences states
ONE fact (founding year, river, main industry, ...). Every fact is asked about once, in words that
paraphrase the passage's sentence, so

* a question names its entity, and the name matches all 2-3 passages of that entity: only the passage
  with the asked fact is gold (the answer string appears in it and in no other passage of the entity),
  so the retriever has to match the asked fact -- the passage's "view" -- not just the name;
* a passage is reached from 3-4 questions about different facts -- the situation multi-vector document
  representations are meant for;
* attribute values are shared by many entities of the same kind (many towns lie on the same river), so
  the answer string alone does not identify the passage either.

All names and texts are generated here from syllables and word lists written for this project; nothing
is copied from elsewhere and no entity is a real one. The output depends only on ``num_entities`` and
``seed`` (a private :class:`random.Random`; no ``hash()``, no set iteration), so it is the same on every
machine and Python version.

Entities are split by entity, per kind: about 70% of them give the training questions, the rest the
evaluation questions. The corpus holds every passage; no passage of an evaluation entity appears in
``train`` (neither as a positive nor as a negative). A training question's hard negative is another
section of the same entity: it shares the name, like the other passages of a real article.

>>> data = build_quickstart_data(num_entities=18, seed=1)
>>> len({docid.rsplit("-", 1)[0] for docid in data.corpus}), sorted(set(data.doc_kinds.values()))[:2]
(18, ['band', 'festival'])
>>> record = data.train[0]
>>> record["answers"][0].lower() in record["positive_passages"][0]["text"].lower()
True
>>> positive, negative = record["positive_passages"][0], record["negative_passages"][0]
>>> negative["title"] == positive["title"] and record["answers"][0].lower() not in negative["text"].lower()
True
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from multiview_plugin.atomic import write_lines

__all__ = ["QuickstartData", "build_quickstart_data", "write_quickstart_data", "FILE_NAMES", "KIND_NAMES"]

#: Share of each kind's entities whose questions go to ``train`` (the rest go to the evaluation split).
TRAIN_FRACTION = 0.7

#: Bounds on a passage's length in words (title excluded); passages are redrawn until they fit.
MIN_WORDS, MAX_WORDS = 35, 70

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
        Docid (``"qs-017-economy"``: entity ``qs-017``, section ``economy``) -> ``{"docid", "title",
        "text"}``; every passage, train and eval entities alike. The title is the entity's name, the same
        for all passages of one entity.
    train : list[dict]
        Tevatron legacy train records ``{"query_id", "query", "answers", "positive_passages",
        "negative_passages"}`` with one positive and one hard negative (another section of the same
        entity: same title, same name in the text, but not the asked fact).
    eval_queries : dict[str, str]
        Query id (``"<docid>-<attribute>"``) -> question, about entities none of whose passages appear in
        ``train``.
    eval_answers : dict[str, list[str]]
        Query id -> answer strings (each appears verbatim in the gold passage and in no other passage of
        the same entity).
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


# ----------------------------------------------------------------------------- kinds, sections and attributes


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


def _count(low: int, high: int, step: int = 1, suffix: str = "") -> ValueFn:
    """A number; keep all of an attribute's numbers the same number of digits (``"12,300"`` must never
    be a part of another answer such as ``"112,300"``)."""
    return lambda gen: f"{gen.rng.randrange(low, high + 1, step):,}{suffix}"


#: Placeholders that refer to the entity; a section's first sentence fills them with the entity's name.
_REFERENCES = ("{Subj}", "{subj}", "{Poss}", "{poss}", "{obj}")


@dataclass(frozen=True)
class _Attribute:
    """One fact about an entity: how to draw its value, say it (sentences) and ask it (questions).

    Sentence templates use ``{v}`` (the value, verbatim in every template) and may refer to the entity as
    ``{Subj}`` / ``{subj}`` (subject), ``{Poss}`` / ``{poss}`` (possessive) or ``{obj}`` (object); at
    least two of them do, so that any attribute can open a section (where the reference is the name).
    Question templates use ``{name}`` and paraphrase the sentences rather than repeat their words.
    """

    key: str
    value: ValueFn
    sentences: tuple[str, ...]
    questions: tuple[str, ...]


@dataclass(frozen=True)
class _Section:
    """One section of an entity's article, i.e. one passage: a topic and the attributes it may state."""

    key: str
    attributes: tuple[_Attribute, ...]


@dataclass(frozen=True)
class _Kind:
    """A kind of entity: how to name one, its noun and pronoun, and the sections of its article."""

    name: str
    make_name: Callable[[_Gen], str]
    noun: str
    pronoun: str | None  # "it", "person" (she/he drawn per entity) or None (no pronoun: bands)
    sections: tuple[_Section, ...]


_TOWN = _Kind(
    name="town",
    make_name=lambda gen: gen.names.place(),
    noun="town",
    pronoun="it",
    sections=(
        _Section("history", (
            _Attribute(
                "founded", _year(1180, 1860),
                ("{Subj} was founded in {v}, when a handful of farming families built houses around a well "
                 "near the river.",
                 "The first settlers arrived at {obj} in {v} and built a small chapel that still stands beside "
                 "the square.",
                 "According to the old archives, {poss} charter dates from {v}, the year the first stone walls "
                 "went up."),
                ("In what year was {name} established?",
                 "When did people first settle at {name}?",
                 "What year marks the birth of {name}?")),
            _Attribute(
                "founder", _pool("founder", 5, _Names.person),
                ("{Subj} owes its existence to {v}, a wealthy merchant who bought the land from a monastery.",
                 "Legend says the first streets of {obj} were laid out by {v} and a few loyal servants.",
                 "A bronze statue of {v}, who drew up {poss} first street plan, stands in front of the town "
                 "hall."),
                ("Who is credited with creating {name}?",
                 "Which person started the settlement of {name}?",
                 "Who gave {name} its beginnings?")),
            _Attribute(
                "oldname", _fresh(_Names.place),
                ("Until the eighteenth century {subj} was known as {v}, a name still used by older farmers.",
                 "Old maps call {obj} {v}, and the former name survives on a few weathered road signs.",
                 "{Poss} original name was {v}, which was changed after a long quarrel between two noble "
                 "families."),
                ("What was {name} called in earlier times?",
                 "By what previous title did people refer to {name}?",
                 "What did {name} use to be named?")),
            _Attribute(
                "arms", _choice("a silver fish", "three golden keys", "a red ox", "a black tower", "a green oak",
                                "two crossed oars", "a white goose", "a blue wheel"),
                ("{Poss} coat of arms shows {v} on a plain shield, a design granted by a forgotten duke.",
                 "The flag of {obj} carries {v}, painted on every council building and post box.",
                 "Above the old gate of {obj}, {v} is carved in stone as the symbol of its citizens."),
                ("What emblem represents {name}?",
                 "What is pictured in the heraldry of {name}?",
                 "Which image appears on the banner of {name}?")),
        )),
        _Section("economy", (
            _Attribute(
                "industry", _choice("copper smelting", "wool weaving", "glassblowing", "salt harvesting",
                                    "boat building", "clockmaking", "paper milling", "cheese making",
                                    "rope making", "pottery"),
                ("{Poss} main trade is {v}, and several family workshops there have operated for generations.",
                 "Most people in {obj} earn a living from {v}, as their parents and grandparents did before "
                 "them.",
                 "For centuries the local economy of {obj} has depended on {v}, which still employs many "
                 "residents."),
                ("What industry is {name} known for?",
                 "What is the chief industry of {name}?",
                 "How do most workers in {name} make their money?")),
            _Attribute(
                "market", _choice("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"),
                ("Every {v} farmers bring cattle, cheese and cloth to the big market in {obj}.",
                 "{Poss} square fills with stalls each {v}, when the shops stay open until late.",
                 "Buyers come from far away to {obj} on {v} mornings for the busy cattle auction."),
                ("On which day of the week do traders sell their goods in {name}?",
                 "When does {name} hold its weekly fair?",
                 "Which day is trading day in {name}?")),
            _Attribute(
                "river", _pool("river", 5, _Names.root),
                ("Barges on the {v} River carry {poss} goods down to the coast, as they have for centuries.",
                 "{Subj} sits on the banks of the {v} River, which often floods the lower meadows in spring.",
                 "The {v} River turns the mill wheels of {obj} and is crossed by three old stone bridges."),
                ("Which waterway passes through {name}?",
                 "Along what stream does {name} lie?",
                 "What body of water runs past {name}?")),
            _Attribute(
                "population", _count(10_000, 48_000, 100),
                ("About {v} people live in {obj} today, many of them in new houses along the main road.",
                 "The last census counted {v} residents in {obj} and the villages around it.",
                 "{Subj} is home to roughly {v} souls, a number that has grown slowly for decades."),
                ("What is the population of {name}?",
                 "How many inhabitants does {name} have?",
                 "How populous is {name}?")),
        )),
        _Section("culture", (
            _Attribute(
                "dish", _choice("smoked eel pie", "barley soup with plums", "honey rye bread", "fried river trout",
                                "lentil dumplings", "apple and onion tart", "pickled herring", "chestnut cake",
                                "mushroom pasties"),
                ("Visitors to {obj} are urged to try {v}, the local speciality served in every inn.",
                 "{Subj} is famous for a dish called {v}, traditionally eaten on holidays.",
                 "No holiday in {obj} is complete without {v}, sold from wooden stalls in the square."),
                ("What food is {name} celebrated for?",
                 "Which recipe comes from the kitchens of {name}?",
                 "What should someone eating out in {name} order?")),
            _Attribute(
                "twin", _pool("twin", 5, _Names.place),
                ("{Subj} is twinned with {v}, and pupils from both towns visit each other every summer.",
                 "Since the last century a formal friendship agreement has linked {obj} with distant {v}.",
                 "{Poss} sister town is {v}, whose mayor visits the autumn fair every year."),
                ("Which foreign town has a partnership with {name}?",
                 "Which community abroad is paired with {name}?",
                 "With what town does {name} have official ties?")),
            _Attribute(
                "museum", _choice("old maps", "carved masks", "music boxes", "stained glass", "toy soldiers",
                                  "antique clocks", "painted fans", "ship models"),
                ("The small museum of {obj} is proud of its {v}, donated by a retired doctor.",
                 "Schoolchildren visiting {obj} are taken to see the {v} kept in the former mill.",
                 "Inside an old granary, {poss} museum shows {v} gathered over two centuries."),
                ("What objects are exhibited in {name}?",
                 "What is on display in the gallery of {name}?",
                 "What treasures does {name} keep for guests to admire?")),
            _Attribute(
                "landmark", _choice("a ruined castle", "a round watchtower", "a covered bridge",
                                    "a leaning bell tower", "a windmill on the hill", "a stone abbey",
                                    "a painted lighthouse"),
                ("The best-known sight in {obj} is {v}, which appears on countless postcards.",
                 "Tourists climb up to {v} above {obj} for a view across the whole valley.",
                 "{Subj} is recognised from afar by {v}, restored with money raised by residents."),
                ("What landmark is {name} famous for?",
                 "Which structure do sightseers photograph in {name}?",
                 "What is the most recognisable feature of {name}?")),
        )),
    ),
)

_INVENTOR = _Kind(
    name="inventor",
    make_name=lambda gen: gen.names.person(),
    noun="inventor",
    pronoun="person",
    sections=(
        _Section("youth", (
            _Attribute(
                "birthplace", _pool("birthplace", 5, _Names.place),
                ("{Subj} was born in the busy harbour city of {v}, the youngest of five children.",
                 "Born in {v} to a family of carpenters, {subj} showed a gift for machines very early.",
                 "{Subj} grew up in {v}, where the family ran a small hardware shop near the docks."),
                ("What is the hometown of {name}?",
                 "In which place did {name} come into the world?",
                 "Where does {name} originally come from?")),
            _Attribute(
                "field", _choice("mechanics", "chemistry", "astronomy", "hydraulics", "optics", "metallurgy",
                                 "acoustics", "cartography"),
                ("{Subj} trained in {v} for several years before building anything of note.",
                 "{Poss} early lessons were in {v}, under a strict but generous teacher.",
                 "As a student {subj} concentrated on {v} and filled many notebooks with sketches."),
                ("What subject did {name} study?",
                 "In which field was {name} educated?",
                 "What was the academic background of {name}?")),
            _Attribute(
                "apprentice", _choice("a watchmaker", "a blacksmith", "a printer", "a ship's carpenter",
                                      "an apothecary", "a miller", "a locksmith", "a glazier"),
                ("At fourteen {subj} was apprenticed to {v}, sweeping floors and learning to handle tools.",
                 "{Subj} spent several youthful years working for {v}, which taught patience and precision.",
                 "Long before any invention, {subj} served as a helper to {v} in a cramped back room."),
                ("What trade did {name} learn as a teenager?",
                 "Under what kind of craftsman did {name} begin?",
                 "What was the first job of {name}?")),
            _Attribute(
                "teacher", _pool("teacher", 5, _Names.person),
                ("{Poss} first mentor was {v}, a retired engineer who lent out books and tools.",
                 "The engineer {v} gave {obj} free lessons in drawing and arithmetic every evening.",
                 "{Subj} always said that everything began with the patient advice of {v}."),
                ("Who taught {name}?",
                 "Who guided the young {name}?",
                 "Which tutor shaped the education of {name}?")),
        )),
        _Section("career", (
            _Attribute(
                "invention", _choice("folding water pump", "pneumatic letter sorter", "wind-powered loom",
                                     "pocket barometer", "clockwork seed drill", "mirror telegraph",
                                     "fireproof lantern", "tidal clock", "steam-driven lathe"),
                ("{Poss} greatest creation is the {v}, which was soon copied across the country.",
                 "{Subj} is remembered above all for the {v}, a design still shown in museums.",
                 "The {v} made {obj} famous and brought orders from workshops far and wide."),
                ("What did {name} invent?",
                 "Which device is {name} known for?",
                 "What is the most celebrated machine of {name}?")),
            _Attribute(
                "patent", _year(1790, 1925),
                ("{Subj} received a first patent in {v}, after two years of careful experiments.",
                 "The first patent in {poss} name was granted in {v}, following several rejected applications.",
                 "In {v} the patent office finally approved {poss} first design."),
                ("In what year did {name} first secure legal protection for an idea?",
                 "When did the authorities first register an invention by {name}?",
                 "When did {name} first obtain exclusive rights to an idea?")),
            _Attribute(
                "partner", _pool("collaborator", 5, _Names.person),
                ("{Subj} worked closely with the engineer {v}, who made the costly metal parts.",
                 "The engineer {v} was {poss} long-time collaborator and closest friend.",
                 "Many of {poss} machines were built together with {v} in a rented barn."),
                ("Who was the partner of {name} in the workshop?",
                 "Which colleague teamed up with {name}?",
                 "Who assisted {name}?")),
            _Attribute(
                "workshop", _pool("workshop", 5, _Names.place),
                ("{Subj} ran a busy workshop in {v}, employing a dozen skilled hands.",
                 "Most of {poss} designs were developed in a rented loft in {v}, above a bakery.",
                 "{Subj} moved to {v} to open a workshop near the new railway station."),
                ("In which city did {name} set up business?",
                 "Where did {name} carry out the work?",
                 "Which city housed the business of {name}?")),
        )),
        _Section("legacy", (
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
                "statue", _pool("statue", 5, _Names.place),
                ("A bronze statue of {obj} stands in the main square of {v}, facing the old station.",
                 "The city of {v} put up a monument to {obj}, paid for by grateful factory owners.",
                 "{Subj} is remembered in {v}, where a tall statue was unveiled after a long campaign."),
                ("Which town honours {name} with a memorial?",
                 "Where can a sculpture of {name} be seen?",
                 "Which place commemorates {name} in public?")),
            _Attribute(
                "student", _pool("student", 5, _Names.person),
                ("{Poss} most gifted pupil, {v}, carried on the experiments after the workshop closed.",
                 "{Subj} trained {v}, who later improved several of the old designs.",
                 "The young engineer {v} learned everything from {obj} and kept the notebooks safe."),
                ("Who was the best student of {name}?",
                 "Who was taught the craft by {name}?",
                 "Who continued what {name} had started?")),
            _Attribute(
                "nickname", _choice("the Clockwork Wizard", "the Tinker of the North", "Old Copperhands",
                                    "the Quiet Engineer", "the Lamp Doctor", "Professor Sparks"),
                ("Newspapers called {obj} {v}, a nickname that stuck for the rest of a long life.",
                 "Among friends {subj} was simply {v}, after a joke told at a dinner.",
                 "To this day many people remember {obj} only as {v}."),
                ("What did the press like to call {name}?",
                 "By what epithet was {name} known?",
                 "What affectionate title did admirers give {name}?")),
        )),
    ),
)

_SHIP = _Kind(
    name="ship",
    make_name=lambda gen: gen.names.pattern(("{x}", "Star of {x}", "{x} Queen", "Lady {x}", "Spirit of {x}")),
    noun="ship",
    pronoun="it",
    sections=(
        _Section("construction", (
            _Attribute(
                "type", _choice("cargo schooner", "paddle steamer", "three-masted barque", "river ferry",
                                "whaling brig", "mail packet", "fishing smack", "coastal lugger"),
                ("{Subj} was a {v} that worked along the northern coast for most of its life.",
                 "Built as a {v}, {subj} served owners in several ports over the decades.",
                 "{Subj} was a sturdy {v} with a reputation for handling rough seas."),
                ("What type of vessel was {name}?",
                 "What kind of ship was {name}?",
                 "{name} was what sort of boat?")),
            _Attribute(
                "launched", _year(1822, 1936),
                ("{Subj} was launched in {v} in front of a large crowd of dock workers.",
                 "{Subj} first went to sea in {v}, after a long delay caused by bad weather.",
                 "{Poss} maiden voyage took place in {v}, on a calm morning in early spring."),
                ("In what year did {name} first touch the water?",
                 "When did {name} enter service?",
                 "What year did {name} begin her career?")),
            _Attribute(
                "shipyard", _pool("port", 5, _Names.place),
                ("{Subj} was built at the yards of {v} from oak and pine felled nearby.",
                 "Carpenters in {v} assembled the hull of {obj} over the course of a long winter.",
                 "{Poss} keel was laid in {v}, in the oldest of its dry docks."),
                ("Where was {name} constructed?",
                 "Which shipbuilding town produced {name}?",
                 "In what place was {name} made?")),
            _Attribute(
                "figurehead", _choice("swan", "mermaid", "golden lion", "horned owl", "dolphin", "stag",
                                      "sea eagle", "sea serpent", "fox"),
                ("{Poss} figurehead was a carved {v}, repainted by the crew every year.",
                 "A wooden {v} stood at the bow of {obj} and became a familiar sight in port.",
                 "Sailors recognised {obj} from far away by the painted {v} on the prow."),
                ("What adorned the front of {name}?",
                 "What ornament was fixed to the front of {name}?",
                 "Which creature was shown on the stem of {name}?")),
        )),
        _Section("voyages", (
            _Attribute(
                "cargo", _choice("salted cod", "timber", "coal", "wool bales", "tea chests", "marble", "grain",
                                 "olive oil", "copper ore"),
                ("{Subj} mostly carried {v} between the small harbours of the region.",
                 "For most of its career the hold of {obj} was filled with {v}, loaded by hand at every stop.",
                 "{Poss} usual cargo was {v}, although passengers were sometimes taken aboard as well."),
                ("What goods were transported on {name}?",
                 "What did {name} usually haul?",
                 "What freight did {name} move?")),
            _Attribute(
                "homeport", _pool("homeport", 5, _Names.place),
                ("{Poss} home port was {v}, where the owners kept a small office on the quay.",
                 "{Subj} was registered in {v} and flew the colours of its merchants.",
                 "Most voyages of {obj} began and ended at {v}, a busy port with a lighthouse."),
                ("Which harbour was the base of {name}?",
                 "Where did {name} have its base?",
                 "Where was {name} based?")),
            _Attribute(
                "destination", _pool("farport", 5, _Names.place),
                ("The longest voyage of {obj} went as far as {v}, a journey of many weeks.",
                 "{Subj} made regular runs to distant {v}, the farthest port on its route.",
                 "In its best years {subj} often reached {v}, far beyond the usual coastal waters."),
                ("What was the most remote destination of {name}?",
                 "What faraway place did {name} sail to?",
                 "Which remote harbour was visited by {name}?")),
            _Attribute(
                "record", _count(11, 29, 1, " days"),
                ("{Subj} once crossed the open sea in just {v}, a record for a vessel of its size.",
                 "On {poss} fastest passage the crossing took only {v}, thanks to strong autumn winds.",
                 "The owners boasted that {subj} could finish the long run to the south in {v}."),
                ("What was the quickest trip ever made by {name}?",
                 "How speedy was {name} at its best?",
                 "In how much time did {name} complete its best journey?")),
        )),
        _Section("crew", (
            _Attribute(
                "captain", _pool("captain", 5, _Names.person),
                ("{Poss} longest-serving captain was {v}, a strict but well-liked sailor.",
                 "Captain {v} commanded {obj} for many years and kept a detailed logbook.",
                 "For two decades {v} served as master of {obj}, rarely missing a voyage."),
                ("Who captained {name}?",
                 "Who was in command of {name}?",
                 "Which skipper led {name}?")),
            _Attribute(
                "crewsize", _count(12, 60, 1, " sailors"),
                ("At full strength {subj} carried {v}, who slept in hammocks below deck.",
                 "{Subj} needed {v} to handle the sails, more than most vessels of its kind.",
                 "The payroll of {obj} listed {v}, most of them young men from the coast."),
                ("How large was the crew of {name}?",
                 "How many hands worked aboard {name}?",
                 "How many people did it take to sail {name}?")),
            _Attribute(
                "mascot", _choice("a ginger cat", "a grey parrot", "a tame crow", "a one-eyed dog", "a white goat",
                                  "a small monkey"),
                ("{Subj} kept {v} on board, and the animal was said to bring good luck.",
                 "The men of {obj} adopted {v}, which appears in several old photographs.",
                 "Every sailor aboard {obj} knew {v}, fed with scraps from the galley."),
                ("What pet lived on {name}?",
                 "What lucky charm travelled with {name}?",
                 "What creature did the crew of {name} look after?")),
            _Attribute(
                "doctor", _pool("doctor", 5, _Names.person),
                ("{Poss} surgeon for many years was {v}, who also taught the sailors to read.",
                 "Sick or injured men aboard {obj} were treated by {v}, a former army surgeon.",
                 "{v} looked after the health of everyone on {obj} during the long voyages."),
                ("Who was the medic of {name}?",
                 "Who cared for the wounded on {name}?",
                 "Which physician served on {name}?")),
        )),
    ),
)

_FESTIVAL = _Kind(
    name="festival",
    make_name=lambda gen: gen.names.pattern(("{x} Festival", "{x} Days", "{x} Fair", "Feast of {x}",
                                             "{x} Gathering")),
    noun="festival",
    pronoun="it",
    sections=(
        _Section("origins", (
            _Attribute(
                "host", _pool("host", 5, _Names.place),
                ("{Subj} is held each year in the town of {v}, drawing visitors from the whole region.",
                 "Every year the town of {v} hosts {obj}, filling its streets with music and stalls.",
                 "{Subj} is an annual celebration in {v} that began as a small village party."),
                ("Where does {name} take place?",
                 "Which town is the home of {name}?",
                 "In what town is {name} organised?")),
            _Attribute(
                "first", _year(1610, 1992),
                ("{Subj} was first held in {v}, according to a notice kept in the town hall.",
                 "The first edition of {obj} was organised in {v} by a group of local musicians.",
                 "{Poss} history goes back to {v}, although the programme has changed a great deal."),
                ("What year did {name} begin?",
                 "Since what year has {name} existed?",
                 "When did {name} start?")),
            _Attribute(
                "occasion", _choice("the end of the harvest", "the return of the swallows", "the first snowfall",
                                    "the longest day of the year", "the spring thaw",
                                    "the opening of the fishing season", "the grape picking"),
                ("{Subj} celebrates {v}, an important moment in the local calendar.",
                 "Originally {subj} marked {v}, and many old customs survive from that time.",
                 "{Subj} was created as a tribute to {v}, as the organisers still explain in every programme."),
                ("What does {name} commemorate?",
                 "What occasion is behind {name}?",
                 "What is {name} held in honour of?")),
            _Attribute(
                "organiser", _pool("organiser", 5, _Names.person),
                ("{Subj} was started by {v}, a schoolteacher who wanted to bring neighbours together.",
                 "{v}, a local baker, persuaded the council to support {obj} from the very start.",
                 "The first committee of {obj} was chaired by {v}, whose portrait hangs in the town hall."),
                ("Who founded {name}?",
                 "Who came up with the idea for {name}?",
                 "Whose initiative created {name}?")),
        )),
        _Section("programme", (
            _Attribute(
                "month", _choice("January", "February", "April", "June", "July", "August", "September",
                                 "October", "November", "December"),
                ("{Subj} takes place every {v}, over several long days and nights.",
                 "The celebrations of {obj} fall in {v}, when the town is at its busiest.",
                 "{Subj} is held each {v}, and hotels are often fully booked months ahead."),
                ("At what time of year does {name} happen?",
                 "In which month can one attend {name}?",
                 "When in the calendar is {name} celebrated?")),
            _Attribute(
                "highlight", _choice("a lantern parade", "a cheese-rolling race", "a boat procession",
                                     "a bread-baking contest", "a bonfire on the hill", "a kite competition",
                                     "a night of folk dancing", "a horse fair", "a pumpkin regatta"),
                ("The main event of {obj} is {v}, which takes place on the final evening.",
                 "Crowds gather at {obj} for {v}, the highlight of the programme.",
                 "{Poss} best-known tradition is {v}, followed by a long communal meal."),
                ("What is the star attraction of {name}?",
                 "What is the most popular part of {name}?",
                 "What do most guests come to {name} to watch?")),
            _Attribute(
                "music", _choice("brass bands", "bagpipers", "fiddlers", "drummers", "church choirs",
                                 "accordion players", "harpists"),
                ("The music at {obj} is provided by {v}, who play in the square until late.",
                 "{Subj} is famous for its {v}, who come from all over the country to perform.",
                 "Each afternoon of {obj}, {v} lead a procession through the streets."),
                ("Who performs at {name}?",
                 "What kind of musicians entertain at {name}?",
                 "What sound fills the town during {name}?")),
            _Attribute(
                "duration", _choice("two days", "three days", "four days", "five days", "six days", "ten days",
                                    "a whole week"),
                ("{Subj} lasts {v}, and many visitors stay for the whole time.",
                 "From start to finish {subj} runs for {v}, with something new every evening.",
                 "The programme of {obj} is spread over {v}, ending with fireworks."),
                ("How long does {name} go on?",
                 "For how long is {name} celebrated?",
                 "What is the length of {name}?")),
        )),
        _Section("visitors", (
            _Attribute(
                "drink", _choice("spiced cider", "mulled wine", "plum brandy", "birch sap beer", "hot chocolate",
                                 "elderflower cordial", "honey mead"),
                ("Stalls at {obj} serve {v} throughout the day, often in small clay cups.",
                 "The traditional refreshment at {obj} is {v}, prepared by volunteers in large pots.",
                 "Visitors to {obj} warm up with {v} as the evening grows colder."),
                ("What drink is served at {name}?",
                 "What do people drink at {name}?",
                 "Which beverage is associated with {name}?")),
            _Attribute(
                "food", _choice("honey cakes", "roasted chestnuts", "gingerbread", "potato pancakes",
                                "sugared almonds", "grilled sausages", "cheese dumplings"),
                ("The smell of {v} fills the air near the entrance to {obj}.",
                 "No visit to {obj} is complete without a paper bag of {v}, bought from a stall.",
                 "Bakers and cooks at {obj} sell {v} by the thousand, from early morning onwards."),
                ("What snack is sold at {name}?",
                 "What treat do people eat at {name}?",
                 "What food is typical of {name}?")),
            _Attribute(
                "visitors", _count(10_000, 90_000, 500),
                ("Around {v} guests attend {obj} each year, most of them from nearby towns.",
                 "Organisers counted {v} visitors at {obj} last year, a new record.",
                 "{Subj} draws around {v} spectators, more than live in the town itself."),
                ("How many people visit {name}?",
                 "What is the attendance of {name}?",
                 "How large is the crowd at {name}?")),
            _Attribute(
                "costume", _choice("foxes", "scarecrows", "sailors", "kings and queens", "ghosts", "pirates",
                                   "woodcutters"),
                ("Many visitors to {obj} dress up as {v}, a custom whose origin nobody remembers.",
                 "Children at {obj} parade in the square dressed as {v}.",
                 "It is an old joke at {obj} that half the crowd turns up disguised as {v}."),
                ("What outfits are traditional at {name}?",
                 "What costumes do people wear at {name}?",
                 "What disguise is popular at {name}?")),
        )),
    ),
)

_MOUNTAIN = _Kind(
    name="mountain",
    make_name=lambda gen: gen.names.pattern(("Mount {x}", "Mount {x}", "{x} Peak")),
    noun="mountain",
    pronoun="it",
    sections=(
        _Section("geography", (
            _Attribute(
                "range", _pool("range", 5, _Names.root),
                ("{Subj} is a steep mountain in the {v} Range, visible from far across the plains.",
                 "{Subj} rises above the valleys of the {v} Range with its broad rocky shoulder.",
                 "Among the many peaks of the {v} Range stands {obj}, one of the highest in the area."),
                ("Which chain of mountains includes {name}?",
                 "To which massif does {name} belong?",
                 "In what group of summits is {name} found?")),
            _Attribute(
                "height", _count(1450, 4850, 1, " metres"),
                ("{Subj} reaches a height of {v}, and snow often lingers on top until July.",
                 "{Poss} summit stands {v} above sea level.",
                 "At {v}, {subj} dominates the skyline of the surrounding villages."),
                ("How high is {name}?",
                 "What is the elevation of {name}?",
                 "How tall is {name}?")),
            _Attribute(
                "rock", _choice("granite", "limestone", "basalt", "sandstone", "slate", "gneiss", "quartzite"),
                ("{Subj} is made mostly of {v}, which gives its cliffs a distinctive colour.",
                 "{Poss} slopes are formed of {v}, deeply cut by streams and old glaciers.",
                 "Geologists describe {obj} as largely {v}, shaped over millions of years."),
                ("What rock is {name} composed of?",
                 "What type of stone forms {name}?",
                 "What is the geology of {name}?")),
            _Attribute(
                "village", _pool("village", 5, _Names.place),
                ("The village of {v} lies at the foot of {obj}, and most walks start from its church.",
                 "{Subj} towers over {v}, a cluster of farms and guesthouses in the valley below.",
                 "Seen from {v}, the nearest village, {subj} seems to fill half the sky."),
                ("What settlement sits at the bottom of {name}?",
                 "From which hamlet do hikes up {name} begin?",
                 "Which community is closest to {name}?")),
        )),
        _Section("climbing", (
            _Attribute(
                "ascent", _year(1786, 1962),
                ("The first recorded ascent of {obj} was made in {v}, after several failed attempts.",
                 "Climbers first reached the summit of {obj} in {v}, using ropes and iron spikes.",
                 "Nobody stood on top of {obj} until {v}, despite many earlier tries."),
                ("When was {name} first climbed?",
                 "In what year did anyone first reach the peak of {name}?",
                 "What year was {name} conquered?")),
            _Attribute(
                "climber", _pool("climber", 5, _Names.person),
                ("The mountaineer {v} pioneered the route to the top of {obj} along the eastern ridge.",
                 "{v} is credited with the first climb of {obj} and wrote a short book about it.",
                 "The classic route up {obj} was opened by {v}, a local guide."),
                ("Who first conquered {name}?",
                 "Which alpinist found the way up {name}?",
                 "Who was the first person on the summit of {name}?")),
            _Attribute(
                "route", _choice("north ridge", "east face", "south gully", "western glacier", "long southern spur",
                                 "old shepherds' path"),
                ("The usual way to the top of {obj} follows the {v}, marked with red paint.",
                 "Most parties climb {obj} by the {v}, which is safe from falling stones.",
                 "Guides lead beginners up {obj} along the {v}, a long but easy day."),
                ("Which line do hikers usually take on {name}?",
                 "How do walkers normally reach the summit of {name}?",
                 "What path leads to the peak of {name}?")),
            _Attribute(
                "hut", _pool("hut", 5, _Names.root),
                ("Climbers rest overnight in the {v} Hut, halfway up {obj}.",
                 "The {v} Hut offers beds and hot soup to anyone climbing {obj} in summer.",
                 "{Poss} only shelter is the {v} Hut, built of stone by a local club."),
                ("Where do mountaineers sleep on {name}?",
                 "What refuge stands on the slopes of {name}?",
                 "Which lodge serves people ascending {name}?")),
        )),
        _Section("nature", (
            _Attribute(
                "wildlife", _choice("ibex", "marmots", "golden eagles", "snow hares", "chamois", "wild goats",
                                    "ptarmigans", "lynxes"),
                ("{Poss} upper slopes are home to {v}, which are protected by law.",
                 "Hikers often spot {v} near the summit of {obj} on quiet mornings.",
                 "The lower forests of {obj} shelter {v} throughout the year."),
                ("What animals live on {name}?",
                 "Which wildlife can be seen on {name}?",
                 "What creatures inhabit {name}?")),
            _Attribute(
                "flower", _choice("blue gentians", "mountain avens", "purple saxifrage", "alpine poppies",
                                  "wild orchids", "edelweiss", "snowbells"),
                ("In early summer {poss} meadows are covered with {v}, which walkers are asked not to pick.",
                 "{Subj} is known for its {v}, which bloom briefly after the snow melts.",
                 "Botanists visit {obj} to study its rare {v}, found only on the sunny side."),
                ("What flowers grow on {name}?",
                 "Which plant colours the grassland of {name}?",
                 "What blossoms can hikers find on {name}?")),
            _Attribute(
                "tree", _choice("larch", "spruce", "stone pine", "beech", "birch", "silver fir"),
                ("The base of {obj} is covered with {v} forest, cut only by narrow paths.",
                 "Dense {v} woods surround {obj}, home to many birds.",
                 "Foresters have planted {v} on the lower slopes of {obj} for centuries."),
                ("What trees grow on {name}?",
                 "Which kind of timber covers the foothills of {name}?",
                 "What woodland is found around {name}?")),
            _Attribute(
                "lake", _pool("lake", 5, _Names.root),
                ("The cold waters of Lake {v} fill a basin high on the slopes of {obj}.",
                 "Below the summit of {obj} lies Lake {v}, frozen for half the year.",
                 "{Subj} is reflected in Lake {v}, a favourite spot for painters."),
                ("What body of water belongs to {name}?",
                 "Which tarn is found on {name}?",
                 "What pool of still water sits near {name}?")),
        )),
    ),
)

_BAND = _Kind(
    name="band",
    make_name=lambda gen: gen.names.pattern(("{x} Trio", "{x} Quartet", "{x} Collective", "{x} Project",
                                             "{x} Ensemble", "{x} Club")),
    noun="band",
    pronoun=None,
    sections=(
        _Section("history", (
            _Attribute(
                "city", _pool("bandcity", 5, _Names.place),
                ("{Subj} comes from the city of {v} and still rehearses in an old warehouse there.",
                 "Formed in {v}, {subj} is a popular live act with a loyal following.",
                 "{Subj} started out in the clubs of {v}, playing for tips and free drinks."),
                ("What is the hometown of {name}?",
                 "Where is {name} based?",
                 "Which place is home to {name}?")),
            _Attribute(
                "formed", _year(1964, 2016),
                ("{Subj} got together in {v}, after its members met at art school.",
                 "The original line-up of {obj} played its first shows in {v}, in small bars.",
                 "{Poss} first concert took place in {v}, in front of fewer than thirty people."),
                ("When was {name} formed?",
                 "In what year did {name} start out?",
                 "What year was {name} founded?")),
            _Attribute(
                "album", _fresh(_Names.album),
                ("{Poss} debut album was {v}, recorded in just two weeks.",
                 "The first record by {obj} was called {v} and sold out its first pressing.",
                 "{Subj} released {v} as a first album, to warm reviews."),
                ("What was the earliest LP of {name}?",
                 "What is the name of the earliest release of {name}?",
                 "Which LP did {name} release initially?")),
            _Attribute(
                "label", _pool("label", 5, _Names.root),
                ("{Poss} early records were released by the small label {v} Records.",
                 "{Subj} signed with {v} Records after a manager heard them play.",
                 "The independent {v} Records has handled the releases of {obj} for many years."),
                ("Which company puts out the music of {name}?",
                 "What record company has {name} under contract?",
                 "Who publishes the songs of {name}?")),
        )),
        _Section("music", (
            _Attribute(
                "genre", _choice("folk rock", "jazz fusion", "synth pop", "bluegrass", "post-punk", "chamber pop",
                                 "surf rock", "dream pop"),
                ("{Subj} plays {v} with catchy melodies and thoughtful lyrics.",
                 "Critics describe {poss} sound as {v} with a touch of humour.",
                 "{Poss} songs are mostly {v}, recorded live in a single room."),
                ("What genre does {name} play?",
                 "What style of music does {name} perform?",
                 "What kind of music is {name} known for?")),
            _Attribute(
                "instrument", _choice("hurdy-gurdy", "twelve-string guitar", "accordion", "harmonium", "cello",
                                      "banjo", "theremin", "mandolin", "steel drum"),
                ("{Poss} sound is built around the {v}, an odd choice for a modern group.",
                 "The {v} plays a central role in the songs of {obj}.",
                 "Fans know {obj} for the {v} heard on nearly every track."),
                ("What instrument is {name} known for?",
                 "Which instrument features in the music of {name}?",
                 "What unusual instrument does {name} use?")),
            _Attribute(
                "theme", _choice("the ocean", "lost love", "city life", "old legends", "the weather",
                                 "long journeys", "small-town gossip"),
                ("Most songs by {obj} are about {v}, told with dry humour.",
                 "{Subj} keeps returning to {v} in its songs, album after album.",
                 "The words of {poss} songs mostly deal with {v}."),
                ("What do the lyrics of {name} concern?",
                 "What topic does {name} write on?",
                 "What is the recurring theme of {name}?")),
            _Attribute(
                "hit", _fresh(_Names.album),
                ("{Poss} biggest hit is the song {v}, which was played on the radio for months.",
                 "{Subj} became widely known with {v}, still the favourite at every concert.",
                 "The song {v} brought {obj} national fame almost overnight."),
                ("What is the most successful single of {name}?",
                 "Which tune made {name} popular?",
                 "What track by {name} topped the charts?")),
        )),
        _Section("members", (
            _Attribute(
                "singer", _fresh(_Names.person),
                ("{Poss} lead singer is {v}, who also writes most of the songs.",
                 "{v} fronts {obj} and often chats with the audience between songs.",
                 "The vocals of {obj} are handled by {v}, whose voice is easy to recognise."),
                ("Who sings for {name}?",
                 "Who is the frontperson of {name}?",
                 "Who is the vocalist of {name}?")),
            _Attribute(
                "drummer", _fresh(_Names.person),
                ("Behind the kit of {obj} sits {v}, who joined after the first drummer left.",
                 "{Poss} rhythm comes from {v}, a self-taught percussionist.",
                 "{v} has kept time for {obj} since the very first rehearsal."),
                ("Who plays percussion in {name}?",
                 "Who keeps the beat for {name}?",
                 "Who is on drums in {name}?")),
            _Attribute(
                "manager", _pool("manager", 5, _Names.person),
                ("{Poss} business affairs are run by {v}, a former concert promoter.",
                 "The manager {v} has booked the tours of {obj} for over a decade.",
                 "{Subj} owes many of its best contracts to {v}, who takes care of the money."),
                ("Who manages {name}?",
                 "Who handles the career of {name}?",
                 "Who looks after the bookings of {name}?")),
            _Attribute(
                "producer", _pool("producer", 5, _Names.person),
                ("Most of {poss} recordings were produced by {v} in a converted church.",
                 "The producer {v} shaped the sound of {obj} on its later records.",
                 "{Subj} records with the producer {v}, who insists on capturing everything live."),
                ("Who sat behind the mixing desk for {name}?",
                 "Who oversees the production of the albums of {name}?",
                 "Who oversaw the studio sessions of {name}?")),
        )),
    ),
)

_KINDS: tuple[_Kind, ...] = (_TOWN, _INVENTOR, _SHIP, _FESTIVAL, _MOUNTAIN, _BAND)

#: The kinds of fictional entity the dataset describes.
KIND_NAMES: tuple[str, ...] = tuple(kind.name for kind in _KINDS)


# ----------------------------------------------------------------------------- building


@dataclass
class _Passage:
    docid: str
    section: _Section
    stated: list[_Attribute]    # the attributes the passage states, in sentence order
    text: str


@dataclass
class _Entity:
    key: str                    # "qs-017"; the docids of its passages are "qs-017-<section>"
    kind: _Kind
    name: str
    values: dict[str, str]      # attribute key -> value, for the attributes its passages state
    passages: list[_Passage]


def _references(kind: _Kind, name: str, pronoun: tuple[str, str, str] | None, rng: random.Random) -> dict[str, str]:
    """Ways to refer to the entity in one sentence: pronoun, "the <noun>" or its (short) name."""
    short = name.split()[-1] if kind.pronoun == "person" else name
    options = [("the " + kind.noun, "the " + kind.noun + "'s", "the " + kind.noun), (short, short + "'s", short)]
    if pronoun is not None:
        options = [pronoun, pronoun, *options]  # pronouns twice as likely
    return _reference_fields(*rng.choice(options))


def _reference_fields(subj: str, poss: str, obj: str) -> dict[str, str]:
    return {"subj": subj, "Subj": subj[0].upper() + subj[1:], "poss": poss, "Poss": poss[0].upper() + poss[1:],
            "obj": obj}


def _names_entity(template: str) -> bool:
    return any(ref in template for ref in _REFERENCES)


def _write_section(kind: _Kind, name: str, pronoun: tuple[str, str, str] | None, stated: list[_Attribute],
                   values: dict[str, str], rng: random.Random) -> str:
    """One sentence per attribute; the first one names the entity in full (so every passage names it)."""
    sentences = []
    for i, attribute in enumerate(stated):
        if i == 0:
            template = rng.choice([s for s in attribute.sentences if _names_entity(s)])
            refs = _reference_fields(name, name + "'s", name)
        else:
            template = rng.choice(attribute.sentences)
            refs = _references(kind, name, pronoun, rng)
        sentences.append(template.format(v=values[attribute.key], **refs))
    return " ".join(sentences)


def _consistent(entity: _Entity) -> bool:
    """Every passage fits the length bounds and no value shows up in another passage of the entity (so
    each answer string singles out its gold passage among the entity's passages)."""
    for passage in entity.passages:
        if not MIN_WORDS <= len(passage.text.split()) <= MAX_WORDS:
            return False
        others = [p.text.lower() for p in entity.passages if p is not passage]
        if any(entity.values[a.key].lower() in text for a in passage.stated for text in others):
            return False
    return True


def _make_entity(key: str, kind: _Kind, gen: _Gen) -> _Entity:
    rng = gen.rng
    name = kind.make_name(gen)
    pronoun: tuple[str, str, str] | None = None
    if kind.pronoun == "it":
        pronoun = ("it", "its", "the " + kind.noun)  # "the first climb of it" reads badly
    elif kind.pronoun == "person":
        pronoun = rng.choice((("she", "her", "her"), ("he", "his", "him")))
    count = rng.choice((2, 3))
    sections = [kind.sections[i] for i in sorted(rng.sample(range(len(kind.sections)), count))]  # article order
    stated = {s.key: rng.sample(s.attributes, rng.choice((3, 4))) for s in sections}
    values = {a.key: a.value(gen) for s in sections for a in stated[s.key]}
    for _ in range(1000):  # redraw wordings (and, now and then, values) until the entity is consistent
        passages = [_Passage(f"{key}-{s.key}", s, stated[s.key],
                             _write_section(kind, name, pronoun, stated[s.key], values, rng)) for s in sections]
        entity = _Entity(key, kind, name, values, passages)
        if _consistent(entity):
            return entity
        values = {a.key: a.value(gen) if rng.random() < 0.5 else values[a.key]
                  for s in sections for a in stated[s.key]}
    raise AssertionError(f"could not write consistent passages for {name!r}")  # pragma: no cover


def _passage(entity: _Entity, passage: _Passage) -> dict:
    return {"docid": passage.docid, "title": entity.name, "text": passage.text}


def build_quickstart_data(num_entities: int = 60, seed: int = 13) -> QuickstartData:
    """Generate the quickstart dataset.

    Parameters
    ----------
    num_entities : int
        Number of fictional entities, each described by 2-3 passages (sections); kinds take turns (town,
        inventor, ship, festival, mountain, band, town, ...). At least 3 per kind (18).
    seed : int
        Seed of the generator; the same arguments give the same data everywhere.

    Returns
    -------
    QuickstartData
        With the defaults: 60 entities (10 per kind) in 148 passages of 35-70 words (about 52 on average),
        360 train questions (42 entities) and 163 eval questions (18 entities). Every fact a passage
        states is asked once, so each passage gets 3-4 questions; a question's entity name matches 2-3
        passages, one of which is gold.

    Raises
    ------
    ValueError
        ``num_entities`` is below 3 per kind, or so large (over about 800) that names run out.
    """
    minimum = 3 * len(_KINDS)
    if num_entities < minimum:
        raise ValueError(f"num_entities must be at least {minimum} (3 per kind), got {num_entities}")
    rng = random.Random(seed)
    gen = _Gen(rng)
    width = max(3, len(str(num_entities - 1)))
    entities = [_make_entity(f"qs-{i:0{width}d}", _KINDS[i % len(_KINDS)], gen) for i in range(num_entities)]

    train_entities: list[_Entity] = []
    eval_keys: set[str] = set()
    for kind in _KINDS:
        members = [e for e in entities if e.kind is kind]
        rng.shuffle(members)
        n_train = min(len(members) - 1, max(2, round(TRAIN_FRACTION * len(members))))
        train_entities += members[:n_train]
        eval_keys.update(e.key for e in members[n_train:])
    train_entities.sort(key=lambda e: e.key)

    def questions(entity: _Entity) -> Iterable[tuple[_Passage, str, str, str]]:
        """``(gold passage, query id, question, answer)`` for every fact the entity's passages state."""
        for passage in entity.passages:
            for attribute in passage.stated:
                question = rng.choice(attribute.questions).format(name=entity.name)
                yield passage, f"{passage.docid}-{attribute.key}", question, entity.values[attribute.key]

    train: list[dict] = []
    for entity in train_entities:
        for passage, qid, question, answer in questions(entity):
            # The hardest negative: another section of the same article (same title, same name).
            negative = rng.choice([p for p in entity.passages if p is not passage])
            train.append({"query_id": qid, "query": question, "answers": [answer],
                          "positive_passages": [_passage(entity, passage)],
                          "negative_passages": [_passage(entity, negative)]})
    rng.shuffle(train)  # questions about one entity should not sit side by side in a batch

    eval_queries: dict[str, str] = {}
    eval_answers: dict[str, list[str]] = {}
    eval_qrels: dict[str, dict[str, int]] = {}
    for entity in entities:
        if entity.key in eval_keys:
            for passage, qid, question, answer in questions(entity):
                eval_queries[qid] = question
                eval_answers[qid] = [answer]
                eval_qrels[qid] = {passage.docid: 1}

    return QuickstartData(
        corpus={p.docid: _passage(e, p) for e in entities for p in e.passages},
        train=train,
        eval_queries=eval_queries,
        eval_answers=eval_answers,
        eval_qrels=eval_qrels,
        doc_kinds={p.docid: e.kind.name for e in entities for p in e.passages},
    )


# ----------------------------------------------------------------------------- writing


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
    write_lines(paths["corpus"], (_json(p) for p in data.corpus.values()))
    write_lines(paths["train"], (_json(r) for r in data.train))
    write_lines(paths["eval_queries"],
                        (_json({"query_id": q, "query": text}) for q, text in data.eval_queries.items()))
    write_lines(paths["eval_qrels"], (f"{q} 0 {docid} {rel}" for q, judged in data.eval_qrels.items()
                                              for docid, rel in judged.items()))
    write_lines(paths["eval_answers"],
                        (_json({"query_id": q, "answers": a}) for q, a in data.eval_answers.items()))
    return paths
